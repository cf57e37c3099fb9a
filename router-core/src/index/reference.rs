//! The single-threaded reference index: a plain map from sequence hash to the ranks holding
//! it, and a deliberately naive lookup (each candidate rank walks the request's blocks on its
//! own). It is the specification the concurrent index is checked against, and is fine wherever
//! one thread owns the index.

use super::events::{EventStatus, KvEvent};
use super::ledger::{HolderStore, Ledger};
use super::overlap::OverlapScores;
use super::stats::IndexStats;
use crate::hashing::SequenceHash;
use crate::ids::{RankId, WorkerId};
use crate::worker::{WorkerSpec, WorkerSpecError};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

#[derive(Debug, Default)]
struct PlainStore(FxHashMap<SequenceHash, BTreeSet<RankId>>);

impl HolderStore for PlainStore {
    type Holder = RankId;

    fn holder(&mut self, rank: RankId) -> RankId {
        rank
    }

    fn release(&mut self, _rank: RankId) {}

    fn add_holder(&mut self, seq: SequenceHash, rank: RankId) -> bool {
        self.0.entry(seq).or_default().insert(rank)
    }

    fn remove_holder(&mut self, seq: SequenceHash, rank: RankId) {
        if let Some(set) = self.0.get_mut(&seq) {
            set.remove(&rank);
            if set.is_empty() {
                self.0.remove(&seq);
            }
        }
    }
}

/// Single-threaded KV prefix index fed by events.
#[derive(Debug, Default)]
pub struct ReferenceIndex {
    ledger: Ledger,
    store: PlainStore,
}

impl ReferenceIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_worker(&mut self, spec: &WorkerSpec) -> Result<(), WorkerSpecError> {
        self.ledger.add_worker(spec, &mut self.store)
    }

    pub fn remove_worker(&mut self, worker: WorkerId) -> bool {
        self.ledger.remove_worker(worker, &mut self.store)
    }

    pub fn apply(&mut self, event: &KvEvent) -> EventStatus {
        self.ledger.apply(event, &mut self.store)
    }

    /// Per-rank matched prefix depth of `hashes`.
    pub fn find_matches(&self, hashes: &[SequenceHash]) -> OverlapScores {
        let Some(first) = hashes.first().and_then(|h| self.store.0.get(h)) else {
            return OverlapScores::default();
        };
        let pairs = first
            .iter()
            .map(|&rank| {
                let depth = hashes
                    .iter()
                    .take_while(|h| self.store.0.get(h).is_some_and(|s| s.contains(&rank)))
                    .count();
                (rank, u32::try_from(depth).unwrap_or(u32::MAX))
            })
            .collect();
        OverlapScores::from_pairs(pairs)
    }

    /// The ranks holding one block, sorted.
    pub fn holders(&self, seq: SequenceHash) -> Vec<RankId> {
        self.store
            .0
            .get(&seq)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            blocks: self.store.0.len() as u64,
            ..self.ledger.stats()
        }
    }
}
