//! The KV prefix index: which data-parallel ranks hold which prefixes of which requests.
//!
//! Fed by workers' KV events ([`KvEvent`]: stored / removed / cleared), it answers
//! `find_matches(&[SequenceHash]) -> OverlapScores`: for each rank, how many of the request's
//! blocks, from the first, it already holds. Internally every block is keyed by the router's
//! own chained [`SequenceHash`] (parent's sequence hash + the block's local hash), which makes
//! the index a radix tree flattened into one hash map: a node is named by its whole path, so a
//! lookup is a walk of hash-map probes with no pointer chasing, and engines whose block ids are
//! opaque work as well as ones that use our hashing. Per rank, the engine's ids are translated
//! to sequence hashes for `Stored` parents and `Removed` ids.
//!
//! - [`KvIndexWriter`] / [`KvIndexReader`]: the concurrent index (one writer, lock-free
//!   readers on any thread): ranks as dense slots, each block's holders a word of bits in a
//!   flat atomic table (`holders.rs`, `flat.rs`).
//! - [`SharedKvIndex`]: one writer behind a mutex plus a lock-free reader, shared by the
//!   actor that applies events and the router that looks prefixes up.
//! - [`ReferenceIndex`]: the single-threaded reference it is property-tested against.
//! - [`ApproxIndex`]: for engines that publish no events, learns from the router's own
//!   placements, with a TTL and a per-rank LRU capacity.

mod approx;
mod concurrent;
mod events;
mod flat;
mod holders;
mod ledger;
mod overlap;
mod reference;
mod shared;
mod stats;

#[cfg(test)]
mod tests;

pub use approx::{ApproxConfig, ApproxIndex};
pub use concurrent::{KvIndexReader, KvIndexWriter};
pub use events::{EventKind, EventStatus, ExternalHash, KvEvent, KvEventData, StoredBlock};
pub use overlap::OverlapScores;
pub use reference::ReferenceIndex;
pub use shared::SharedKvIndex;
pub use stats::{EventIdCounts, EventKindCounts, EventStatusCounts, IndexStats};
