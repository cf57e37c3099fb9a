//! The writer-side bookkeeping every event-fed index shares: registered workers, and per
//! (worker, dp rank) the translation from the engine's opaque block ids to the router's own
//! sequence hashes and the last event id seen.
//!
//! The ledger decides what an event means and turns it into holder changes
//! ("rank R now holds block S" / "no longer holds S"), which it hands to a [`HolderStore`]: the
//! plain map of [`super::ReferenceIndex`] or the lock-free bit tables of
//! [`super::KvIndexWriter`]. So both indexes interpret events identically and differ only in
//! storage and lookup.

use super::events::{EventStatus, ExternalHash, KvEvent, KvEventData, StoredBlock};
use super::stats::IndexStats;
use crate::hashing::{SequenceHash, chain};
use crate::ids::{RankId, WorkerId};
use crate::worker::{WorkerSpec, WorkerSpecError};
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::ops::Range;

/// Where holder changes go: the set of ranks holding each block.
pub(crate) trait HolderStore {
    /// How the store names a rank (the rank itself, or a dense slot).
    type Holder: Copy;
    /// The store's name for a registered rank, registering it on first use. Called once per
    /// event, not per block.
    fn holder(&mut self, rank: RankId) -> Self::Holder;
    /// The rank is gone and holds nothing any more: its name may be reused.
    fn release(&mut self, rank: RankId);
    /// Adds `holder` to the holders of `seq`; false when it already was one.
    fn add_holder(&mut self, seq: SequenceHash, holder: Self::Holder) -> bool;
    /// Removes `holder` from the holders of `seq` (nothing when it was not one).
    fn remove_holder(&mut self, seq: SequenceHash, holder: Self::Holder);
}

#[derive(Debug, Default)]
struct RankState {
    /// Engine block id → the router's sequence hash of that block: one map probe per block
    /// on the write path. The store itself says whether the rank already held the sequence.
    by_external: FxHashMap<ExternalHash, SequenceHash>,
    /// Sequences this rank holds under more than one engine id (an engine whose ids carry
    /// more than the router hashes), with the number of ids beyond the first. Rare; a
    /// sequence leaves the store only when its last id is removed.
    extra_ids: FxHashMap<SequenceHash, u32>,
    last_event_id: Option<u64>,
    /// Ids to make room for at the first Stored event: the rank's cache size, capped, so a
    /// warming-up rank does not rehash its id map over and over.
    expected_ids: usize,
}

/// Cap of [`RankState::expected_ids`] (an id map of about 270 KB per rank).
const MAX_EXPECTED_IDS: u64 = 8_192;

impl RankState {
    /// Drops every block; returns how many distinct blocks the rank held.
    fn drop_all<S: HolderStore>(&mut self, holder: S::Holder, store: &mut S) -> u64 {
        let extra: u64 = self.extra_ids.drain().map(|(_, n)| u64::from(n)).sum();
        let ids = self.by_external.len() as u64;
        for (_, seq) in self.by_external.drain() {
            store.remove_holder(seq, holder);
        }
        ids - extra
    }
}

#[derive(Debug, Default)]
pub(crate) struct Ledger {
    workers: FxHashMap<WorkerId, Range<u32>>,
    ranks: FxHashMap<RankId, RankState>,
    stats: IndexStats,
}

impl Ledger {
    /// Registers a worker, or updates its rank range (ranks it no longer owns drop their blocks).
    pub(crate) fn add_worker(
        &mut self,
        spec: &WorkerSpec,
        store: &mut impl HolderStore,
    ) -> Result<(), WorkerSpecError> {
        spec.validate()?;
        let range = spec.dp_start..spec.dp_start.saturating_add(spec.dp_size);
        if let Some(old) = self.workers.insert(spec.id, range.clone()) {
            for dp_rank in old.filter(|r| !range.contains(r)) {
                self.drop_rank(
                    RankId {
                        worker: spec.id,
                        dp_rank,
                    },
                    store,
                );
            }
        }
        for rank in spec.ranks() {
            let expected = spec.total_kv_blocks.unwrap_or(0).min(MAX_EXPECTED_IDS);
            self.ranks.entry(rank).or_default().expected_ids = expected as usize;
            store.holder(rank);
        }
        self.refresh_counts();
        Ok(())
    }

    /// Forgets a worker and everything its ranks held. False when it was not registered.
    pub(crate) fn remove_worker(&mut self, worker: WorkerId, store: &mut impl HolderStore) -> bool {
        let Some(range) = self.workers.remove(&worker) else {
            return false;
        };
        for dp_rank in range {
            self.drop_rank(RankId { worker, dp_rank }, store);
        }
        self.refresh_counts();
        true
    }

    fn drop_rank(&mut self, rank: RankId, store: &mut impl HolderStore) {
        if let Some(mut state) = self.ranks.remove(&rank) {
            let holder = store.holder(rank);
            self.stats.rank_blocks -= state.drop_all(holder, store);
            store.release(rank);
        }
    }

    fn refresh_counts(&mut self) {
        self.stats.workers = self.workers.len() as u64;
        self.stats.ranks = self.ranks.len() as u64;
    }

    /// The counters; `blocks` is left for the caller, which knows its store.
    pub(crate) fn stats(&self) -> IndexStats {
        self.stats
    }

    pub(crate) fn apply(&mut self, event: &KvEvent, store: &mut impl HolderStore) -> EventStatus {
        self.stats.events.count(event.data.kind());
        let status = self.apply_inner(event, store);
        self.stats.statuses.count(status);
        status
    }

    fn apply_inner(&mut self, event: &KvEvent, store: &mut impl HolderStore) -> EventStatus {
        let Some(range) = self.workers.get(&event.worker) else {
            return EventStatus::UnknownWorker;
        };
        if !range.contains(&event.dp_rank) {
            return EventStatus::UnknownRank;
        }
        let rank = RankId {
            worker: event.worker,
            dp_rank: event.dp_rank,
        };
        let state = self.ranks.entry(rank).or_default();
        let holder = store.holder(rank);

        let ids = &mut self.stats.event_ids;
        match state.last_event_id {
            Some(last) if event.event_id > last.saturating_add(1) => {
                ids.gaps += 1;
                ids.missed_events += event.event_id - last - 1;
            }
            Some(last) if event.event_id <= last => ids.out_of_order += 1,
            _ => {}
        }
        state.last_event_id = Some(
            state
                .last_event_id
                .map_or(event.event_id, |l| l.max(event.event_id)),
        );

        match &event.data {
            KvEventData::Stored { parent, blocks } => {
                let (status, added) = store_blocks(state, holder, *parent, blocks, store);
                self.stats.rank_blocks += added;
                status
            }
            KvEventData::Removed { hashes } => {
                let (status, removed) = remove_blocks(state, holder, hashes, store);
                self.stats.rank_blocks -= removed;
                status
            }
            KvEventData::Cleared => {
                self.stats.rank_blocks -= state.drop_all(holder, store);
                EventStatus::Ok
            }
        }
    }
}

/// Returns the status and how many blocks the rank newly holds.
fn store_blocks<S: HolderStore>(
    state: &mut RankState,
    holder: S::Holder,
    parent: Option<ExternalHash>,
    blocks: &[StoredBlock],
    store: &mut S,
) -> (EventStatus, u64) {
    let mut parent_seq = match parent {
        None => None,
        Some(ext) => match state.by_external.get(&ext) {
            Some(&seq) => Some(seq),
            None => return (EventStatus::ParentNotFound, 0),
        },
    };
    if state.by_external.capacity() == 0 {
        state
            .by_external
            .reserve(state.expected_ids.max(blocks.len()));
    }
    let mut status = EventStatus::Ok;
    let mut added = 0;
    for block in blocks {
        let seq = chain(parent_seq, block.local);
        parent_seq = Some(seq);
        match state.by_external.entry(block.hash) {
            Entry::Occupied(_) => {
                // Already known under this id (possibly as another sequence): keep the first
                // mapping, so a later Removed of this id undoes exactly what was done.
                status = EventStatus::DuplicateBlock;
                continue;
            }
            Entry::Vacant(v) => {
                v.insert(seq);
            }
        }
        if store.add_holder(seq, holder) {
            added += 1;
        } else {
            *state.extra_ids.entry(seq).or_insert(0) += 1;
        }
    }
    (status, added)
}

/// Returns the status and how many blocks the rank no longer holds.
fn remove_blocks<S: HolderStore>(
    state: &mut RankState,
    holder: S::Holder,
    hashes: &[ExternalHash],
    store: &mut S,
) -> (EventStatus, u64) {
    let mut status = EventStatus::Ok;
    let mut removed = 0;
    for ext in hashes {
        let Some(seq) = state.by_external.remove(ext) else {
            status = EventStatus::BlockNotFound;
            continue;
        };
        // `extra_ids` is nearly always empty: skip hashing into it then.
        let extra = if state.extra_ids.is_empty() {
            None
        } else {
            state.extra_ids.get_mut(&seq)
        };
        match extra {
            Some(1) => {
                state.extra_ids.remove(&seq);
            }
            Some(n) => *n -= 1,
            None => {
                store.remove_holder(seq, holder);
                removed += 1;
            }
        }
    }
    (status, removed)
}
