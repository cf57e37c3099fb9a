//! Pool membership: adding a worker's ranks, changing a worker's capacities (which moves
//! every class line on its ranks) and removing a worker (which drops what it held).

use super::rank::RankState;
use super::{BookingLedger, WorkerSpec};
use crate::ids::{BookingKey, RankId, WorkerId};
use crate::worker::WorkerSpecError;

#[derive(Debug, Clone)]
pub(crate) struct WorkerEntry {
    pub spec: WorkerSpec,
    pub slots: Vec<usize>,
    /// Ranks over a router-wide reject threshold.
    pub over_ranks: usize,
    /// Its adapter slots, as its engine last reported them.
    pub adapters: crate::adapters::AdapterResidency,
}

impl WorkerEntry {
    /// Overloaded only when every rank is over a reject threshold.
    pub(crate) fn overloaded(&self) -> bool {
        !self.slots.is_empty() && self.over_ranks == self.slots.len()
    }
}

impl BookingLedger {
    /// Adds a worker, or applies a changed announcement of a known one (capacities, ranks,
    /// adapters). Ranks that disappear drop what they held. Returns the keys dropped.
    pub fn upsert_worker(&mut self, spec: WorkerSpec) -> Result<Vec<BookingKey>, WorkerSpecError> {
        spec.validate()?;
        let wanted: Vec<RankId> = spec.ranks().collect();
        let mut dropped = Vec::new();
        if let Some(old) = self.workers.get(&spec.id) {
            let gone: Vec<RankId> = old.spec.ranks().filter(|r| !wanted.contains(r)).collect();
            for rank in gone {
                dropped.extend(self.remove_rank(rank));
            }
        }
        let mut slots = Vec::with_capacity(wanted.len());
        for rank in &wanted {
            let slot = match self.by_rank.get(rank) {
                Some(&slot) => {
                    let classes = &self.classes;
                    let Some(state) = self.slots[slot].as_mut() else {
                        continue;
                    };
                    state.total_kv_blocks = spec.total_kv_blocks;
                    state.batch_tokens = spec.batch_tokens();
                    state.block_size = spec.block_size;
                    state.set_lines(classes);
                    slot
                }
                None => self.insert_rank(RankState::new(
                    *rank,
                    spec.total_kv_blocks,
                    spec.batch_tokens(),
                    spec.block_size,
                    &self.classes,
                )),
            };
            slots.push(slot);
        }
        // Lines moved: recount the worker's overload from scratch, then reindex its ranks.
        let mut over_ranks = 0;
        for &slot in &slots {
            let thresholds = &self.thresholds;
            if let Some(rank) = self.slots[slot].as_mut() {
                rank.over = rank.over_thresholds(thresholds);
                over_ranks += usize::from(rank.over);
            }
        }
        let adapters = self
            .workers
            .get(&spec.id)
            .map(|w| w.adapters.clone())
            .unwrap_or_default();
        self.workers.insert(
            spec.id,
            WorkerEntry {
                spec,
                slots: slots.clone(),
                over_ranks,
                adapters,
            },
        );
        for slot in slots {
            self.reindex(slot);
        }
        self.epoch += 1;
        self.room_epoch += 1;
        Ok(dropped)
    }

    /// Removes a worker and everything booked or reserved on its ranks.
    pub fn remove_worker(&mut self, worker: WorkerId) -> Vec<BookingKey> {
        let Some(entry) = self.workers.remove(&worker) else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        for rank in entry.spec.ranks() {
            dropped.extend(self.remove_rank(rank));
        }
        self.epoch += 1;
        self.room_epoch += 1;
        dropped
    }

    /// What `worker`'s engine reports of its adapter slots (a placement hint, never a
    /// booking). Unknown workers are ignored.
    pub fn set_adapters(&mut self, worker: WorkerId, adapters: crate::adapters::AdapterResidency) {
        if let Some(entry) = self.workers.get_mut(&worker) {
            entry.adapters = adapters;
        }
    }

    /// What a request for `adapter` finds on `worker`.
    pub fn adapter_fit(&self, worker: WorkerId, adapter: &str) -> crate::adapters::AdapterFit {
        self.workers
            .get(&worker)
            .map_or(crate::adapters::AdapterFit::Unknown, |w| {
                w.adapters.fit(adapter)
            })
    }

    pub fn worker(&self, worker: WorkerId) -> Option<&WorkerSpec> {
        self.workers.get(&worker).map(|w| &w.spec)
    }

    pub fn workers(&self) -> impl Iterator<Item = &WorkerSpec> {
        self.workers.values().map(|w| &w.spec)
    }

    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    pub fn rank_count(&self) -> usize {
        self.by_rank.len()
    }

    pub fn worker_is_overloaded(&self, worker: WorkerId) -> bool {
        self.workers
            .get(&worker)
            .is_some_and(WorkerEntry::overloaded)
    }

    /// Every rank of the pool.
    pub fn rank_ids(&self) -> impl Iterator<Item = RankId> + '_ {
        self.by_rank.keys().copied()
    }

    pub fn has_rank(&self, rank: RankId) -> bool {
        self.by_rank.contains_key(&rank)
    }

    fn insert_rank(&mut self, mut state: RankState) -> usize {
        if self.credit_owner.is_some() {
            // Credits on: a new rank holds none until its owner grants some.
            state.credit_held = Some(0);
            if self.prefill_credits {
                state.prefill_credit_held = Some(0);
            }
        }
        let id = state.id;
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.slots[slot] = Some(state);
                slot
            }
            None => {
                self.slots.push(Some(state));
                self.counted.push(false);
                self.slots.len() - 1
            }
        };
        let want = self.slots.len();
        for tree in self.open.iter_mut().chain(self.room.iter_mut()) {
            tree.grow(want);
        }
        self.by_rank.insert(id, slot);
        slot
    }

    fn remove_rank(&mut self, rank: RankId) -> Vec<BookingKey> {
        let Some(&slot) = self.by_rank.get(&rank) else {
            return Vec::new();
        };
        let mut keys: Vec<BookingKey> = self
            .bookings
            .iter()
            .filter(|(_, h)| h.slot == slot)
            .map(|(k, _)| *k)
            .chain(
                self.reservations
                    .iter()
                    .filter(|(_, (_, s))| *s == slot)
                    .map(|(k, _)| *k),
            )
            .collect();
        keys.sort();
        for key in &keys {
            self.release(key);
        }
        self.uncount(slot);
        self.slots[slot] = None;
        self.reindex(slot);
        self.by_rank.remove(&rank);
        self.free_slots.push(slot);
        keys
    }
}
