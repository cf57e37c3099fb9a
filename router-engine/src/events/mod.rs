//! An engine's KV events as it publishes them, and their translation into the fleet's
//! [`KvEvent`](router_core::KvEvent)s.
//!
//! vLLM (and SGLang, which publishes the same format) sends each batch as a ZMQ multipart
//! message: topic, an 8-byte big-endian sequence number, and a msgpack payload
//! `[ts, events, data_parallel_rank?]`. This module is pure: [`decode_batch`] reads a payload
//! (`decode.rs`), [`Translator`] turns a batch into fleet events with the router's own block
//! hashes computed from the blocks' tokens (`translate.rs`), and [`SeqCheck`] follows the
//! sequence numbers to spot a lost batch or a restarted engine (`sequence.rs`).

mod decode;
#[cfg(test)]
mod fuzz;
mod sequence;
mod translate;

pub use decode::{DecodeError, decode_batch};
pub use sequence::{SeqCheck, SeqStep};
pub use translate::{Skipped, Translated, Translator};

use router_core::ExternalHash;

/// One batch as the engine published it.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineBatch {
    /// The engine's timestamp (seconds since the Unix epoch).
    pub ts: f64,
    pub events: Vec<EngineEvent>,
    /// The data-parallel rank that published it (absent in older engines: rank 0).
    pub dp_rank: Option<u32>,
}

/// One event as the engine published it. Engine block hashes are folded to 64 bits
/// ([`ExternalHash`]): integers as they are, 32-byte digests through xxh3.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// Full blocks now in the cache; `token_ids` holds `block_size` tokens per block.
    Stored {
        hashes: Vec<ExternalHash>,
        parent: Option<ExternalHash>,
        token_ids: Vec<u32>,
        block_size: u32,
        lora_name: Option<String>,
        /// The cache salt the first block was stored under (vLLM's `cache_salt`, among its
        /// extra keys); engines salt only a sequence's first block.
        salt: Option<String>,
        /// The KV cache group (hybrid models have several; plain models one, `None` or 0).
        group: Option<u32>,
    },
    Removed {
        hashes: Vec<ExternalHash>,
        group: Option<u32>,
    },
    /// The engine dropped its whole prefix cache.
    Cleared,
    /// An event type this build does not know (counted, skipped).
    Unknown { tag: String },
}
