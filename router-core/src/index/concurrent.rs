//! The concurrent index: one writer applies events, any number of readers on other threads
//! look prefixes up at the same time, and no reader ever waits for the writer.
//!
//! Ranks are numbered with small dense slots ([`super::holders`]) and each block's holders are
//! bits: for every 64 slots one flat table from sequence hash to a word of bits
//! ([`BitTable`], lock-free, atomics only). A fleet of up to 64 ranks has one table, so
//! storing or removing a block is one probe and two plain stores, with no allocation, and a
//! lookup walks the request's blocks ANDing their words into the set of ranks still matching.
//! The tables and the slot table are published together as one [`Snapshot`] behind an
//! `ArcSwap`: a reader loads it once per lookup; the writer replaces it only when a table is
//! rebuilt (grown, or rid of tombstones) or a slot changes hands, and mutates the current
//! tables in place otherwise.
//!
//! A lookup may see an event half applied (some of its blocks stored, later ones not yet);
//! that is the same staleness a reader would see one event earlier or later. It never credits
//! a block to a rank that does not hold it: slots are resolved with the slot table loaded
//! before the walk, and a walk during which a slot changed owner is done again.
//!
//! The writer-side bookkeeping (engine ids, reference counts, event ids, counters, the slot
//! assignment) lives in the [`KvIndexWriter`] alone.

use super::events::{EventStatus, KvEvent};
use super::flat::BitTable;
use super::holders::{Slot, SlotTable, Slots, for_each_bit};
use super::ledger::{HolderStore, Ledger};
use super::overlap::OverlapScores;
use super::stats::IndexStats;
use crate::hashing::SequenceHash;
use crate::ids::{RankId, WorkerId};
use crate::worker::{WorkerSpec, WorkerSpecError};
use arc_swap::ArcSwap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a lookup works from: one bit table per 64 slots, and who holds each slot.
#[derive(Debug)]
struct Snapshot {
    words: Vec<Arc<BitTable>>,
    slots: Arc<SlotTable>,
}

/// What the writer and its readers share.
#[derive(Debug)]
struct Shared {
    current: ArcSwap<Snapshot>,
    /// Distinct blocks some rank holds (the writer's count).
    blocks: AtomicUsize,
}

/// Holder changes, applied to the writer's current snapshot.
struct Store<'w> {
    shared: &'w Shared,
    current: &'w mut Arc<Snapshot>,
    slots: &'w mut Slots,
    blocks: &'w mut usize,
    /// Presized room of the first table (it never shrinks below this).
    min_keys: usize,
}

impl Store<'_> {
    fn publish(&mut self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        self.shared.current.store(Arc::clone(&snapshot));
        *self.current = snapshot;
    }

    /// Publishes the slot table, with a table for every word of slots it now has.
    fn publish_slots(&mut self) {
        let table = self.slots.table();
        let mut words = self.current.words.clone();
        while words.len() < table.words() {
            words.push(Arc::new(BitTable::with_capacity(0)));
        }
        self.publish(Snapshot {
            words,
            slots: Arc::new(table),
        });
    }

    /// Whether another word's table has bits for `seq` (fleets of over 64 ranks only).
    fn held_elsewhere(&self, seq: SequenceHash, word: usize) -> bool {
        let words = &self.current.words;
        words.len() > 1 && (words.iter().enumerate()).any(|(w, t)| w != word && t.get(seq) != 0)
    }
}

impl HolderStore for Store<'_> {
    type Holder = Slot;

    fn holder(&mut self, rank: RankId) -> Slot {
        let (slot, changed) = self.slots.assign(rank);
        if changed {
            self.publish_slots();
        }
        slot
    }

    fn release(&mut self, rank: RankId) {
        if self.slots.release(rank) {
            self.publish_slots();
        }
    }

    fn add_holder(&mut self, seq: SequenceHash, slot: Slot) -> bool {
        let word = slot.word();
        let Some(table) = self.current.words.get(word) else {
            return false; // not reached: every assigned slot's word has a table
        };
        let (added, first) = table.set(seq, slot.bit());
        if first && !self.held_elsewhere(seq, word) {
            *self.blocks += 1;
        }
        if table.full() {
            let min_keys = if word == 0 { self.min_keys } else { 0 };
            let mut words = self.current.words.clone();
            words[word] = Arc::new(table.rebuilt(min_keys));
            let slots = Arc::clone(&self.current.slots);
            self.publish(Snapshot { words, slots });
        }
        added
    }

    fn remove_holder(&mut self, seq: SequenceHash, slot: Slot) {
        let word = slot.word();
        if let Some(table) = self.current.words.get(word)
            && table.clear(seq, slot.bit())
            && !self.held_elsewhere(seq, word)
        {
            *self.blocks -= 1;
        }
    }
}

impl Shared {
    fn find(&self, hashes: &[SequenceHash]) -> OverlapScores {
        let Some((&first, rest)) = hashes.split_first() else {
            return OverlapScores::default();
        };
        loop {
            let snapshot = self.current.load();
            let scores = match &snapshot.words[..] {
                [table] => {
                    let mut depth_of = [0u32; 64];
                    let head = table.get(first);
                    walk_one_word(head, rest, |h| table.get(h), &mut depth_of);
                    snapshot.slots.scores(&[head], &depth_of)
                }
                words => {
                    let heads: Vec<u64> = words.iter().map(|t| t.get(first)).collect();
                    let mut depth_of = vec![0u32; words.len() * 64];
                    walk_words(words, heads.clone(), rest, &mut depth_of);
                    snapshot.slots.scores(&heads, &depth_of)
                }
            };
            if self.current.load().slots.generation == snapshot.slots.generation {
                return OverlapScores::from_sorted(scores);
            }
            // A slot changed owner during the walk: walk again with the new table.
        }
    }

    fn holders(&self, seq: SequenceHash) -> Vec<RankId> {
        loop {
            let snapshot = self.current.load();
            let mut ranks = Vec::new();
            for (i, table) in snapshot.words.iter().enumerate() {
                for_each_bit(i, table.get(seq), |s| ranks.extend(snapshot.slots.rank(s)));
            }
            if self.current.load().slots.generation == snapshot.slots.generation {
                ranks.sort_unstable();
                return ranks;
            }
        }
    }
}

/// The prefix walk over one-word bitsets (fleets of up to 64 ranks): `active` is the set of
/// slots matching every block so far (at first the holders of the first block); a slot
/// leaving it gets its depth in `depth_of`. Stops at the first block no active slot holds.
fn walk_one_word(
    mut active: u64,
    rest: &[SequenceHash],
    bits: impl Fn(SequenceHash) -> u64,
    depth_of: &mut [u32; 64],
) {
    let mut depth = 1u32;
    for &h in rest {
        if active == 0 {
            return;
        }
        let kept = active & bits(h);
        for_each_bit(0, active & !kept, |s| depth_of[s.index()] = depth);
        active = kept;
        depth += 1;
    }
    for_each_bit(0, active, |s| depth_of[s.index()] = depth);
}

/// The same walk over several words (fleets of over 64 ranks; `depth_of` has 64 entries per
/// word): only the tables of words with a rank still matching are probed.
fn walk_words(
    words: &[Arc<BitTable>],
    mut active: Vec<u64>,
    rest: &[SequenceHash],
    depth_of: &mut [u32],
) {
    let mut depth = 1u32;
    for &h in rest {
        if active.iter().all(|&w| w == 0) {
            return;
        }
        for (i, word) in active.iter_mut().enumerate() {
            if *word == 0 {
                continue;
            }
            let kept = *word & words[i].get(h);
            for_each_bit(i, *word & !kept, |s| depth_of[s.index()] = depth);
            *word = kept;
        }
        depth += 1;
    }
    for (i, &word) in active.iter().enumerate() {
        for_each_bit(i, word, |s| depth_of[s.index()] = depth);
    }
}

/// The one writer of a concurrent index. Not `Clone`: there is exactly one per index.
pub struct KvIndexWriter {
    ledger: Ledger,
    slots: Slots,
    /// The snapshot readers currently load (the writer's own reference to it).
    current: Arc<Snapshot>,
    blocks: usize,
    min_keys: usize,
    shared: Arc<Shared>,
}

/// A cheap, clonable, `Send + Sync` read handle on a concurrent index. Lookups never block,
/// whatever the writer is doing.
#[derive(Clone)]
pub struct KvIndexReader {
    shared: Arc<Shared>,
}

impl Default for KvIndexWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl KvIndexWriter {
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An index with room for `blocks` distinct blocks before its table grows (e.g. the
    /// fleet's total KV blocks), so a warming-up router does not pay for rebuilds.
    pub fn with_capacity(blocks: usize) -> Self {
        let current = Arc::new(Snapshot {
            words: vec![Arc::new(BitTable::with_capacity(blocks))],
            slots: Arc::new(SlotTable::default()),
        });
        Self {
            ledger: Ledger::default(),
            slots: Slots::default(),
            shared: Arc::new(Shared {
                current: ArcSwap::new(Arc::clone(&current)),
                blocks: AtomicUsize::new(0),
            }),
            current,
            blocks: 0,
            min_keys: blocks,
        }
    }

    /// A read handle on this index (clone it freely, send it to other threads).
    pub fn reader(&self) -> KvIndexReader {
        KvIndexReader {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs `f` on the ledger with a store on the shared tables.
    fn with_store<T>(&mut self, f: impl FnOnce(&mut Ledger, &mut Store<'_>) -> T) -> T {
        let mut store = Store {
            shared: &self.shared,
            current: &mut self.current,
            slots: &mut self.slots,
            blocks: &mut self.blocks,
            min_keys: self.min_keys,
        };
        let out = f(&mut self.ledger, &mut store);
        self.shared.blocks.store(self.blocks, Ordering::Relaxed);
        out
    }

    pub fn add_worker(&mut self, spec: &WorkerSpec) -> Result<(), WorkerSpecError> {
        self.with_store(|ledger, store| ledger.add_worker(spec, store))
    }

    /// Forgets a worker and every block its ranks held. False when it was not registered.
    pub fn remove_worker(&mut self, worker: WorkerId) -> bool {
        self.with_store(|ledger, store| ledger.remove_worker(worker, store))
    }

    /// Applies one event; readers see its effect block by block as it is applied.
    pub fn apply(&mut self, event: &KvEvent) -> EventStatus {
        self.with_store(|ledger, store| ledger.apply(event, store))
    }

    pub fn find_matches(&self, hashes: &[SequenceHash]) -> OverlapScores {
        self.shared.find(hashes)
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            blocks: self.blocks as u64,
            ..self.ledger.stats()
        }
    }
}

impl KvIndexReader {
    /// Per-rank matched prefix depth of `hashes`; stops at the first block no matching rank
    /// holds.
    pub fn find_matches(&self, hashes: &[SequenceHash]) -> OverlapScores {
        self.shared.find(hashes)
    }

    /// The ranks holding one block, sorted.
    pub fn holders(&self, seq: SequenceHash) -> Vec<RankId> {
        self.shared.holders(seq)
    }

    /// Distinct blocks currently held by some rank.
    pub fn block_count(&self) -> usize {
        self.shared.blocks.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for KvIndexWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvIndexWriter")
            .field("stats", &self.stats())
            .finish()
    }
}

impl fmt::Debug for KvIndexReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvIndexReader")
            .field("blocks", &self.block_count())
            .finish()
    }
}
