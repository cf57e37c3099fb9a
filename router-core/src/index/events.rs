//! KV events: what a worker tells the routers about the blocks its engine holds.
//!
//! Engines name blocks by their own opaque 64-bit id ([`ExternalHash`]); alongside each stored
//! block they send the router-compatible [`LocalBlockHash`] of its tokens, which is what the
//! index chains into [`crate::hashing::SequenceHash`]es. Events are external input: every way
//! they can be wrong has an [`EventStatus`], and none of them can corrupt the index.

use crate::hashing::LocalBlockHash;
use crate::ids::WorkerId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The engine's own id for a block: opaque, only unique per (worker, dp rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExternalHash(pub u64);

impl fmt::Display for ExternalHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ext:{:016x}", self.0)
    }
}

/// One block of a `Stored` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredBlock {
    /// The engine's id for this block (used by later `Removed` events and as a `parent`).
    pub hash: ExternalHash,
    /// Hash of the block's tokens, computed as in [`crate::hashing::local_block_hashes`].
    pub local: LocalBlockHash,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvEventData {
    /// `blocks` now sit in the cache, each one the child of the one before it; the first is a
    /// child of `parent` (`None`: the blocks start a sequence).
    Stored {
        parent: Option<ExternalHash>,
        blocks: Vec<StoredBlock>,
    },
    /// These blocks were evicted.
    Removed { hashes: Vec<ExternalHash> },
    /// The rank dropped its whole cache.
    Cleared,
}

/// One event of one data-parallel rank of one worker. `event_id` increases by one per event
/// of the publisher, so gaps reveal lost events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvEvent {
    pub worker: WorkerId,
    #[serde(default)]
    pub dp_rank: u32,
    pub event_id: u64,
    pub data: KvEventData,
}

/// The kind of an event, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Stored,
    Removed,
    Cleared,
}

impl KvEventData {
    pub fn kind(&self) -> EventKind {
        match self {
            KvEventData::Stored { .. } => EventKind::Stored,
            KvEventData::Removed { .. } => EventKind::Removed,
            KvEventData::Cleared => EventKind::Cleared,
        }
    }
}

/// How applying one event went. Anything but `Ok` is counted; what could be applied safely
/// was applied, the rest was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    Ok,
    /// The worker is not registered: the event was dropped.
    UnknownWorker,
    /// The worker is registered but does not own this dp rank: the event was dropped.
    UnknownRank,
    /// A `Stored` event's parent is not held by this rank: the event was dropped (its blocks
    /// cannot be placed in a prefix).
    ParentNotFound,
    /// A `Stored` block id this rank already holds: that block was skipped, the rest applied.
    DuplicateBlock,
    /// A `Removed` block id this rank does not hold: that id was skipped, the rest applied.
    BlockNotFound,
}

impl EventStatus {
    pub fn is_ok(self) -> bool {
        self == EventStatus::Ok
    }
}
