//! Serialisable counters of a prefix index: how many blocks it holds, how many events of each
//! kind it applied and how they went, and what the event ids say about lost or reordered events.

use super::events::{EventKind, EventStatus};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventKindCounts {
    pub stored: u64,
    pub removed: u64,
    pub cleared: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStatusCounts {
    pub ok: u64,
    pub unknown_worker: u64,
    pub unknown_rank: u64,
    pub parent_not_found: u64,
    pub duplicate_block: u64,
    pub block_not_found: u64,
}

/// Per (worker, dp rank) event-id continuity, summed over ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventIdCounts {
    /// Times an event id jumped forward by more than one.
    pub gaps: u64,
    /// Event ids skipped by those jumps (events presumably lost).
    pub missed_events: u64,
    /// Events whose id was not above the last one seen (duplicates or reordering). They are
    /// still applied.
    pub out_of_order: u64,
}

/// A snapshot of an index's state and history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexStats {
    pub workers: u64,
    pub ranks: u64,
    /// Distinct sequence hashes held by at least one rank.
    pub blocks: u64,
    /// (rank, block) pairs: the sum over ranks of the blocks each holds.
    pub rank_blocks: u64,
    pub events: EventKindCounts,
    pub statuses: EventStatusCounts,
    pub event_ids: EventIdCounts,
}

impl EventKindCounts {
    pub(crate) fn count(&mut self, kind: EventKind) {
        match kind {
            EventKind::Stored => self.stored += 1,
            EventKind::Removed => self.removed += 1,
            EventKind::Cleared => self.cleared += 1,
        }
    }
}

impl EventStatusCounts {
    pub(crate) fn count(&mut self, status: EventStatus) {
        match status {
            EventStatus::Ok => self.ok += 1,
            EventStatus::UnknownWorker => self.unknown_worker += 1,
            EventStatus::UnknownRank => self.unknown_rank += 1,
            EventStatus::ParentNotFound => self.parent_not_found += 1,
            EventStatus::DuplicateBlock => self.duplicate_block += 1,
            EventStatus::BlockNotFound => self.block_not_found += 1,
        }
    }
}
