//! The concurrent index: one writer applies events, any number of readers on other threads
//! look prefixes up at the same time, and no reader ever waits for the writer.
//!
//! Storage is a `papaya` lock-free hash map from sequence hash to the (sorted, immutable) set of
//! ranks holding that block. The writer replaces a block's set with a new one on every change;
//! readers see either the old or the new set, never a torn one, and never take a lock (papaya
//! reclaims replaced sets by epochs). Resizes are `Blocking`: the one writer finishes a resize
//! before going on, while readers keep reading the old table; papaya's default incremental
//! resize left tables half-migrated whenever the writer paused, and every lookup then probed
//! both tables (5× slower lookups on the trace replay). A
//! lookup may see an event half applied (some of its blocks stored, later ones not yet); that
//! is the same staleness a reader would see one event earlier or later, and scores stay
//! consistent per block.
//!
//! The writer-side bookkeeping (engine ids, reference counts, event ids, counters) lives in the
//! [`KvIndexWriter`] alone; readers only need the map.

use super::events::{EventStatus, KvEvent};
use super::ledger::{HolderStore, Ledger};
use super::overlap::{OverlapScores, RankSet, match_prefix};
use super::stats::IndexStats;
use crate::hashing::SequenceHash;
use crate::ids::{RankId, WorkerId};
use crate::worker::{WorkerSpec, WorkerSpecError};
use papaya::{Compute, Guard, Operation, ResizeMode};
use rustc_hash::FxBuildHasher;
use std::fmt;
use std::sync::Arc;

type BlockMap = papaya::HashMap<SequenceHash, RankSet, FxBuildHasher>;

/// Holder changes applied to the shared map under one epoch guard.
///
/// `compute` finds the key and swaps the entry in one probe. The writer being the only mutator,
/// a plain `get` then `insert` / `remove` would be just as correct, but it probes twice: on the
/// trace replay it ran 2.5 % more instructions and was no faster. Where a write's time goes
/// (callgrind + perf, 8 workers): papaya's per-entry allocation and deferred free (~25 %), its
/// probes (~20 %, mostly cache misses), the Blocking resizes that clear tombstones left by
/// removals (~15 %), the ledger's per-rank id map (~10 %).
struct SharedStore<'m, G: Guard> {
    map: &'m BlockMap,
    guard: &'m G,
}

impl<G: Guard> HolderStore for SharedStore<'_, G> {
    fn add_holder(&mut self, seq: SequenceHash, rank: RankId) -> bool {
        let outcome = self.map.compute(
            seq,
            |entry| match entry {
                None => Operation::Insert(RankSet::One(rank)),
                Some((_, set)) if set.contains(rank) => Operation::Abort(()),
                Some((_, set)) => Operation::Insert(set.with(rank)),
            },
            self.guard,
        );
        !matches!(outcome, Compute::Aborted(()))
    }

    fn remove_holder(&mut self, seq: SequenceHash, rank: RankId) {
        self.map.compute(
            seq,
            |entry| match entry {
                Some((_, set)) if set.contains(rank) => match set.without(rank) {
                    None => Operation::Remove,
                    Some(rest) => Operation::Insert(rest),
                },
                _ => Operation::Abort(()),
            },
            self.guard,
        );
    }
}

fn find_in(map: &BlockMap, hashes: &[SequenceHash]) -> OverlapScores {
    let guard = map.guard();
    match_prefix(
        hashes,
        |h| map.get(&h, &guard).map_or(&[][..], RankSet::as_slice),
        |r| Some(*r),
    )
}

/// The one writer of a concurrent index. Not `Clone`: there is exactly one per index.
pub struct KvIndexWriter {
    ledger: Ledger,
    map: Arc<BlockMap>,
}

/// A cheap, clonable, `Send + Sync` read handle on a concurrent index. Lookups never block,
/// whatever the writer is doing.
#[derive(Clone)]
pub struct KvIndexReader {
    map: Arc<BlockMap>,
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
    /// fleet's total KV blocks), so a warming-up router does not pay for resizes.
    pub fn with_capacity(blocks: usize) -> Self {
        Self {
            ledger: Ledger::default(),
            map: Arc::new(
                papaya::HashMap::builder()
                    .hasher(FxBuildHasher)
                    .resize_mode(ResizeMode::Blocking)
                    .capacity(blocks)
                    .build(),
            ),
        }
    }

    /// A read handle on this index (clone it freely, send it to other threads).
    pub fn reader(&self) -> KvIndexReader {
        KvIndexReader {
            map: Arc::clone(&self.map),
        }
    }

    pub fn add_worker(&mut self, spec: &WorkerSpec) -> Result<(), WorkerSpecError> {
        let guard = self.map.guard();
        self.ledger.add_worker(
            spec,
            &mut SharedStore {
                map: &self.map,
                guard: &guard,
            },
        )
    }

    /// Forgets a worker and every block its ranks held. False when it was not registered.
    pub fn remove_worker(&mut self, worker: WorkerId) -> bool {
        let guard = self.map.guard();
        self.ledger.remove_worker(
            worker,
            &mut SharedStore {
                map: &self.map,
                guard: &guard,
            },
        )
    }

    /// Applies one event; readers see its effect block by block as it is applied.
    pub fn apply(&mut self, event: &KvEvent) -> EventStatus {
        let guard = self.map.guard();
        self.ledger.apply(
            event,
            &mut SharedStore {
                map: &self.map,
                guard: &guard,
            },
        )
    }

    pub fn find_matches(&self, hashes: &[SequenceHash]) -> OverlapScores {
        find_in(&self.map, hashes)
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            blocks: self.map.len() as u64,
            ..self.ledger.stats()
        }
    }
}

impl KvIndexReader {
    /// Per-rank matched prefix depth of `hashes`; stops at the first block no matching rank
    /// holds.
    pub fn find_matches(&self, hashes: &[SequenceHash]) -> OverlapScores {
        find_in(&self.map, hashes)
    }

    /// The ranks holding one block, sorted.
    pub fn holders(&self, seq: SequenceHash) -> Vec<RankId> {
        let guard = self.map.guard();
        self.map
            .get(&seq, &guard)
            .map(|s| s.as_slice().to_vec())
            .unwrap_or_default()
    }

    /// Distinct blocks currently held by some rank.
    pub fn block_count(&self) -> usize {
        self.map.len()
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
            .field("blocks", &self.map.len())
            .finish()
    }
}
