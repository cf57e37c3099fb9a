//! The approximate index, for engines that publish no KV events: it learns from the router's
//! own placements ("I sent these blocks to that rank, so it probably holds them now").
//!
//! A placement touches each of its blocks on the rank. An entry counts for `ttl` after its
//! last touch, and each rank keeps at most `capacity_blocks` entries, evicting the least
//! recently touched first. Within one placement the deepest block counts as the least
//! recent, so a full rank drops the ends of sequences before their shared prefixes, as an
//! engine's LRU would. Time is passed in; the index never reads a clock.

use super::overlap::{OverlapScores, match_prefix};
use crate::hashing::SequenceHash;
use crate::ids::RankId;
use crate::time::Timestamp;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproxConfig {
    /// How long a placed block is assumed to stay cached after its last touch.
    pub ttl: Duration,
    /// Most blocks one rank is assumed to hold (e.g. its `total_kv_blocks`).
    pub capacity_blocks: usize,
}

/// Order of touches: time first, then a counter that makes every touch unique.
type TouchKey = (Timestamp, u64);

#[derive(Debug, Default)]
struct RankLru {
    by_touch: BTreeMap<TouchKey, SequenceHash>,
    touched: FxHashMap<SequenceHash, TouchKey>,
}

/// Prefix index learnt from placements. Single-threaded; the scheduler owns it.
#[derive(Debug)]
pub struct ApproxIndex {
    ttl_us: u64,
    capacity: usize,
    /// Block → (rank, last touch) for every rank assumed to hold it, sorted by rank.
    holders: FxHashMap<SequenceHash, Vec<(RankId, Timestamp)>>,
    ranks: FxHashMap<RankId, RankLru>,
    /// Every live entry by last touch, oldest first, for TTL expiry.
    expiry: BTreeMap<TouchKey, (RankId, SequenceHash)>,
    next_touch: u64,
}

impl ApproxIndex {
    pub fn new(config: ApproxConfig) -> Self {
        Self {
            ttl_us: u64::try_from(config.ttl.as_micros()).unwrap_or(u64::MAX),
            capacity: config.capacity_blocks,
            holders: FxHashMap::default(),
            ranks: FxHashMap::default(),
            expiry: BTreeMap::new(),
            next_touch: 0,
        }
    }

    fn alive(&self, touched: Timestamp, now: Timestamp) -> bool {
        touched.0.saturating_add(self.ttl_us) > now.0
    }

    /// The router placed a request with these blocks on `rank` at `now`.
    pub fn record_placement(&mut self, rank: RankId, hashes: &[SequenceHash], now: Timestamp) {
        self.expire(now);
        // Deepest first, so the prefix is the most recently touched.
        for &seq in hashes.iter().rev() {
            self.touch(rank, seq, now);
        }
        while self
            .ranks
            .get(&rank)
            .is_some_and(|l| l.touched.len() > self.capacity)
        {
            let oldest = self
                .ranks
                .get(&rank)
                .and_then(|l| l.by_touch.first_key_value());
            let Some((&key, &seq)) = oldest else { break };
            self.drop_entry(rank, seq, key);
        }
    }

    fn touch(&mut self, rank: RankId, seq: SequenceHash, now: Timestamp) {
        let key = (now, self.next_touch);
        self.next_touch += 1;
        let lru = self.ranks.entry(rank).or_default();
        if let Some(old) = lru.touched.insert(seq, key) {
            lru.by_touch.remove(&old);
            self.expiry.remove(&old);
        }
        lru.by_touch.insert(key, seq);
        self.expiry.insert(key, (rank, seq));
        let entries = self.holders.entry(seq).or_default();
        match entries.binary_search_by_key(&rank, |&(r, _)| r) {
            Ok(i) => entries[i].1 = now,
            Err(i) => entries.insert(i, (rank, now)),
        }
    }

    fn drop_entry(&mut self, rank: RankId, seq: SequenceHash, key: TouchKey) {
        self.expiry.remove(&key);
        if let Some(lru) = self.ranks.get_mut(&rank) {
            lru.by_touch.remove(&key);
            lru.touched.remove(&seq);
            if lru.touched.is_empty() {
                self.ranks.remove(&rank);
            }
        }
        if let Some(entries) = self.holders.get_mut(&seq) {
            entries.retain(|&(r, _)| r != rank);
            if entries.is_empty() {
                self.holders.remove(&seq);
            }
        }
    }

    /// Drops every entry whose TTL has run out at `now`. Lookups already ignore expired
    /// entries; this frees their memory.
    pub fn expire(&mut self, now: Timestamp) {
        while let Some((&key, &(rank, seq))) = self.expiry.first_key_value() {
            if self.alive(key.0, now) {
                break;
            }
            self.drop_entry(rank, seq, key);
        }
    }

    /// Forgets everything placed on `rank` (its worker left).
    pub fn remove_rank(&mut self, rank: RankId) {
        let Some(lru) = self.ranks.get(&rank) else {
            return;
        };
        let entries: Vec<(TouchKey, SequenceHash)> =
            lru.by_touch.iter().map(|(&k, &s)| (k, s)).collect();
        for (key, seq) in entries {
            self.drop_entry(rank, seq, key);
        }
    }

    /// Per-rank matched prefix depth of `hashes`, counting only entries alive at `now`.
    pub fn find_matches(&self, hashes: &[SequenceHash], now: Timestamp) -> OverlapScores {
        match_prefix(
            hashes,
            |h| self.holders.get(&h).map_or(&[][..], Vec::as_slice),
            |&(rank, touched)| self.alive(touched, now).then_some(rank),
        )
    }

    /// (rank, block) entries held, expired or not yet expired.
    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seqs(ids: &[u64]) -> Vec<SequenceHash> {
        ids.iter().copied().map(SequenceHash).collect()
    }

    fn index(ttl_ms: u64, capacity_blocks: usize) -> ApproxIndex {
        ApproxIndex::new(ApproxConfig {
            ttl: Duration::from_millis(ttl_ms),
            capacity_blocks,
        })
    }

    const A: RankId = RankId::new(1, 0);
    const B: RankId = RankId::new(2, 0);

    #[test]
    fn placements_are_matched_by_prefix_per_rank() {
        let mut ix = index(1_000, 100);
        let t = Timestamp::from_millis(10);
        ix.record_placement(A, &seqs(&[1, 2, 3]), t);
        ix.record_placement(B, &seqs(&[1, 4]), t);
        let m = ix.find_matches(&seqs(&[1, 2, 3, 9]), t);
        assert_eq!(m.get(A), 3);
        assert_eq!(m.get(B), 1);
        assert_eq!(ix.find_matches(&seqs(&[7, 1]), t).len(), 0);
    }

    #[test]
    fn entries_expire_after_the_ttl_since_their_last_touch() {
        let mut ix = index(1_000, 100);
        ix.record_placement(A, &seqs(&[1, 2]), Timestamp::from_millis(0));
        ix.record_placement(A, &seqs(&[1]), Timestamp::from_millis(800));
        let q = seqs(&[1, 2]);
        assert_eq!(ix.find_matches(&q, Timestamp::from_millis(999)).get(A), 2);
        // Block 2 was last touched at 0 ms: gone at 1000 ms; block 1 (touched at 800) stays.
        assert_eq!(ix.find_matches(&q, Timestamp::from_millis(1_000)).get(A), 1);
        assert_eq!(ix.find_matches(&q, Timestamp::from_millis(1_800)).get(A), 0);
        ix.expire(Timestamp::from_millis(1_000));
        assert_eq!(ix.len(), 1);
        ix.expire(Timestamp::from_millis(1_800));
        assert!(ix.is_empty());
    }

    #[test]
    fn a_full_rank_evicts_its_least_recently_used_blocks_deepest_first() {
        let mut ix = index(60_000, 3);
        let t0 = Timestamp::from_millis(0);
        ix.record_placement(A, &seqs(&[1, 2]), t0);
        ix.record_placement(A, &seqs(&[10, 11]), Timestamp::from_millis(1));
        // Capacity 3: the oldest placement loses its deepest block first.
        assert_eq!(
            ix.find_matches(&seqs(&[1, 2]), Timestamp::from_millis(2))
                .get(A),
            1
        );
        assert_eq!(
            ix.find_matches(&seqs(&[10, 11]), Timestamp::from_millis(2))
                .get(A),
            2
        );
        // A placement longer than the capacity keeps its prefix.
        ix.record_placement(B, &seqs(&[20, 21, 22, 23, 24]), t0);
        assert_eq!(ix.find_matches(&seqs(&[20, 21, 22, 23, 24]), t0).get(B), 3);
        assert_eq!(ix.len(), 6);
    }

    #[test]
    fn touching_a_block_again_protects_it_from_eviction() {
        let mut ix = index(60_000, 2);
        ix.record_placement(A, &seqs(&[1]), Timestamp::from_millis(0));
        ix.record_placement(A, &seqs(&[2]), Timestamp::from_millis(1));
        ix.record_placement(A, &seqs(&[1]), Timestamp::from_millis(2));
        ix.record_placement(A, &seqs(&[3]), Timestamp::from_millis(3));
        let now = Timestamp::from_millis(4);
        assert_eq!(ix.find_matches(&seqs(&[1]), now).get(A), 1);
        assert_eq!(ix.find_matches(&seqs(&[2]), now).get(A), 0);
        assert_eq!(ix.find_matches(&seqs(&[3]), now).get(A), 1);
    }

    #[test]
    fn removing_a_rank_forgets_only_its_placements() {
        let mut ix = index(60_000, 10);
        let t = Timestamp::ZERO;
        ix.record_placement(A, &seqs(&[1, 2]), t);
        ix.record_placement(B, &seqs(&[1, 2]), t);
        ix.remove_rank(A);
        let m = ix.find_matches(&seqs(&[1, 2]), t);
        assert_eq!((m.get(A), m.get(B)), (0, 2));
        assert_eq!(ix.len(), 2);
    }
}
