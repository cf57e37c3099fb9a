//! A flat open-addressing hash table from a block's sequence hash to one 64-bit word of holder
//! bits, written by one thread and read by any number of others without locks, in safe Rust
//! (atomics only).
//!
//! An entry is two atomic words, key and bits, inline in one array: a probe is one cache line,
//! a stored or removed block is two plain stores, and nothing is allocated per block. Keys
//! never move inside a table; a removed key leaves a tombstone. When keys and tombstones fill
//! three quarters of the table the writer copies the live keys into a fresh table
//! ([`BitTable::rebuilt`]) and publishes that; readers still on the old one see it as it was.
//!
//! Reads are exact per entry: the writer stores bits before the key it files them under and
//! zeroes them before it buries the key, and a reader reads key, bits, key again, retrying the
//! probe if the key changed in between (the entry was reused for another block). Only the
//! writer's progress makes a reader retry, so readers are lock-free.
//!
//! Single-writer discipline: the `&self` writing methods must only ever be called by one
//! thread at a time; [`super::KvIndexWriter`] guarantees it by needing `&mut self` for them.

use crate::hashing::SequenceHash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Key of an entry never used (ends a probe).
const EMPTY: u64 = 0;
/// Key of an entry whose block was removed (a probe goes on past it).
const TOMB: u64 = 1;
/// Smallest table, in entries.
const MIN_ENTRIES: usize = 64;

#[derive(Debug, Default)]
struct Entry {
    key: AtomicU64,
    bits: AtomicU64,
}

/// One word (64 slots) of holder bits per block.
#[derive(Debug)]
pub(crate) struct BitTable {
    entries: Box<[Entry]>,
    /// log2 of the number of entries.
    shift: u32,
    /// Bits of the two blocks whose sequence hashes collide with the markers above.
    marked: [AtomicU64; 2],
    /// Keys with some bit set (writer's count).
    live: AtomicUsize,
    /// Entries not `EMPTY`: live keys and tombstones (writer's count).
    used: AtomicUsize,
}

impl BitTable {
    /// A table with room for `keys` keys before it must be rebuilt.
    pub(crate) fn with_capacity(keys: usize) -> Self {
        let entries = (keys.saturating_mul(4) / 3 + 1)
            .max(MIN_ENTRIES)
            .next_power_of_two();
        Self {
            entries: (0..entries).map(|_| Entry::default()).collect(),
            shift: entries.trailing_zeros(),
            marked: Default::default(),
            live: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
        }
    }

    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: the top bits of key × 2^64/φ.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.shift)) as usize
    }

    fn next(&self, i: usize) -> usize {
        (i + 1) & (self.entries.len() - 1)
    }

    /// The holder bits of `seq` (0: none).
    pub(crate) fn get(&self, seq: SequenceHash) -> u64 {
        let key = seq.0;
        if key <= TOMB {
            return self.marked[key as usize].load(Ordering::Acquire);
        }
        let mut i = self.home(key);
        loop {
            let e = &self.entries[i];
            match e.key.load(Ordering::Acquire) {
                k if k == key => {
                    let bits = e.bits.load(Ordering::Acquire);
                    if e.key.load(Ordering::Acquire) == key {
                        return bits;
                    }
                    // The entry went to another block meanwhile: probe again.
                    i = self.home(key);
                }
                EMPTY => return 0,
                _ => i = self.next(i),
            }
        }
    }

    /// The entry holding `key`, or where to put it (the first tombstone on the way, else the
    /// empty entry that ended the probe). Writer only.
    fn find(&self, key: u64) -> Result<usize, usize> {
        let mut tomb = None;
        let mut i = self.home(key);
        loop {
            match self.entries[i].key.load(Ordering::Relaxed) {
                k if k == key => return Ok(i),
                EMPTY => return Err(tomb.unwrap_or(i)),
                TOMB if tomb.is_none() => tomb = Some(i),
                _ => {}
            }
            i = self.next(i);
        }
    }

    /// Sets `bit` for `seq`. Returns (whether it was newly set, whether `seq` had no bit before).
    /// Writer only; call [`Self::full`] afterwards.
    pub(crate) fn set(&self, seq: SequenceHash, bit: u64) -> (bool, bool) {
        let key = seq.0;
        let word = if key <= TOMB {
            &self.marked[key as usize]
        } else {
            match self.find(key) {
                Ok(i) => &self.entries[i].bits,
                Err(i) => {
                    let e = &self.entries[i];
                    if e.key.load(Ordering::Relaxed) == EMPTY {
                        self.used.fetch_add(1, Ordering::Relaxed);
                    }
                    self.live.fetch_add(1, Ordering::Relaxed);
                    // Bits first: a reader that sees the key sees them.
                    e.bits.store(bit, Ordering::Release);
                    e.key.store(key, Ordering::Release);
                    return (true, true);
                }
            }
        };
        let old = word.load(Ordering::Relaxed);
        if old & bit != 0 {
            return (false, false);
        }
        if old == 0 {
            self.live.fetch_add(1, Ordering::Relaxed);
        }
        word.store(old | bit, Ordering::Release);
        (true, old == 0)
    }

    /// Clears `bit` for `seq`; true when that left `seq` with no bit. Writer only.
    pub(crate) fn clear(&self, seq: SequenceHash, bit: u64) -> bool {
        let key = seq.0;
        let (word, entry) = if key <= TOMB {
            (&self.marked[key as usize], None)
        } else {
            match self.find(key) {
                Ok(i) => (&self.entries[i].bits, Some(&self.entries[i])),
                Err(_) => return false,
            }
        };
        let old = word.load(Ordering::Relaxed);
        if old & bit == 0 {
            return false;
        }
        word.store(old & !bit, Ordering::Release);
        if old != bit {
            return false;
        }
        if let Some(e) = entry {
            e.key.store(TOMB, Ordering::Release);
        }
        self.live.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Blocks with some bit set.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Keys and tombstones fill three quarters of the table: time for [`Self::rebuilt`].
    pub(crate) fn full(&self) -> bool {
        self.used.load(Ordering::Relaxed) * 4 >= self.entries.len() * 3
    }

    /// A fresh copy with the live keys only, with room for twice as many and at least
    /// `min_keys`. Writer only.
    pub(crate) fn rebuilt(&self, min_keys: usize) -> Self {
        let fresh = Self::with_capacity(self.live().saturating_mul(2).max(min_keys));
        for e in self.entries.iter() {
            let (key, bits) = (
                e.key.load(Ordering::Relaxed),
                e.bits.load(Ordering::Relaxed),
            );
            if key > TOMB && bits != 0 {
                fresh.set(SequenceHash(key), bits);
            }
        }
        for (key, word) in self.marked.iter().enumerate() {
            let bits = word.load(Ordering::Relaxed);
            if bits != 0 {
                fresh.set(SequenceHash(key as u64), bits);
            }
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_set_cleared_and_survive_rebuilds_including_the_marker_keys() {
        let keys: Vec<SequenceHash> = (0..200u64).map(|k| SequenceHash(k * 7919)).collect();
        let mut t = BitTable::with_capacity(0);
        for (n, &k) in keys.iter().enumerate() {
            assert_eq!(t.set(k, 1 << (n % 64)), (true, true));
            assert_eq!(t.set(k, 1 << (n % 64)), (false, false));
            if t.full() {
                t = t.rebuilt(0);
            }
        }
        assert_eq!(t.set(SequenceHash(1), 4), (true, true)); // a marker key
        assert_eq!(t.live(), 201);
        for (n, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), 1 << (n % 64));
        }
        // Remove every other key; the rest stay reachable past the tombstones.
        for (n, &k) in keys.iter().enumerate() {
            assert!(!t.clear(k, 1 << ((n + 1) % 64)), "a bit never set");
        }
        for (n, &k) in keys.iter().enumerate().step_by(2) {
            assert!(t.clear(k, 1 << (n % 64)));
            assert!(!t.clear(k, 1 << (n % 64)));
        }
        let t = t.rebuilt(0);
        assert_eq!(t.live(), 101);
        for (n, &k) in keys.iter().enumerate() {
            let expected = if n % 2 == 0 { 0 } else { 1 << (n % 64) };
            assert_eq!(t.get(k), expected);
        }
        assert_eq!(t.get(SequenceHash(1)), 4);
        assert_eq!(t.get(SequenceHash(0)), 0);
        assert!(t.clear(SequenceHash(1), 4) && t.live() == 100);
    }
}
