//! The event-fed index as one pool shares it between two owners: whoever applies KV events
//! (the node's KvEventsActor) and the pool's router, which only reads.
//!
//! [`SharedKvIndex`] is a clonable handle on one [`KvIndexWriter`] behind a mutex and a
//! lock-free [`KvIndexReader`] on the same map. Writes (events, worker changes) take the
//! mutex; lookups never do, so a router's `find_matches` never waits behind a burst of
//! events being applied elsewhere. The mutex only orders the rare worker changes a router
//! makes against the event stream.

use super::concurrent::{KvIndexReader, KvIndexWriter};
use super::events::{EventStatus, KvEvent};
use super::overlap::OverlapScores;
use super::stats::IndexStats;
use crate::hashing::SequenceHash;
use crate::ids::WorkerId;
use crate::worker::{WorkerSpec, WorkerSpecError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One pool's event-fed index: clone it to every owner.
#[derive(Clone)]
pub struct SharedKvIndex {
    writer: Arc<Mutex<KvIndexWriter>>,
    reader: KvIndexReader,
}

impl Default for SharedKvIndex {
    fn default() -> Self {
        Self::new(KvIndexWriter::new())
    }
}

impl SharedKvIndex {
    pub fn new(writer: KvIndexWriter) -> Self {
        let reader = writer.reader();
        Self {
            writer: Arc::new(Mutex::new(writer)),
            reader,
        }
    }

    /// The writer, exclusively (events, worker changes). Lookups do not wait for it. The
    /// writer's operations do not panic midway, so a poisoned lock still holds a whole index.
    pub fn write(&self) -> MutexGuard<'_, KvIndexWriter> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `events` in order under one lock; returns how many the index refused (their
    /// kinds are in the index's own status counts).
    pub fn apply_all(&self, events: &[KvEvent]) -> u64 {
        let mut writer = self.write();
        events
            .iter()
            .filter(|e| writer.apply(e) != EventStatus::Ok)
            .count() as u64
    }

    pub fn add_worker(&self, spec: &WorkerSpec) -> Result<(), WorkerSpecError> {
        self.write().add_worker(spec)
    }

    pub fn remove_worker(&self, worker: WorkerId) -> bool {
        self.write().remove_worker(worker)
    }

    /// Per-rank matched prefix depth, from the lock-free reader.
    pub fn find_matches(&self, hashes: &[SequenceHash]) -> OverlapScores {
        self.reader.find_matches(hashes)
    }

    pub fn reader(&self) -> KvIndexReader {
        self.reader.clone()
    }

    pub fn stats(&self) -> IndexStats {
        self.write().stats()
    }
}

impl std::fmt::Debug for SharedKvIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedKvIndex")
            .field("blocks", &self.reader.block_count())
            .finish_non_exhaustive()
    }
}
