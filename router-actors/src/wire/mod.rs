//! The NATS edge: subjects, versioned msgpack envelopes and their conversion to typed
//! messages. Nothing outside this module sees raw payloads. Every decode failure is counted
//! by kind (malformed, unknown version, foreign cluster) and the message dropped; nothing here
//! panics on input. Before serde sees a payload, [`check_shape`] (`shape.rs`) refuses one
//! nested deeper than [`MAX_DEPTH`] or whose lengths claim more than it holds.

mod digest;
mod messages;
mod seq;
mod shape;
mod subjects;

pub use digest::{booking_hash, digest_from, digest_of, reservation_hash};
pub use messages::{
    BookingDelta, BookingMsg, CreditEnvelope, Digest, KvEventBatch, RoomChanged, SnapshotReply,
    SnapshotRequest, WorkerAnnounce, WorkerLoad,
};
pub use seq::{SeqEvent, SeqTracker};
pub use shape::{ShapeError, check_shape};
pub use subjects::{Subjects, pool_cluster, pool_token};

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use uuid::Uuid;

/// Version of every envelope this build writes and the only one it reads. 2: booking deltas
/// travel batched (`BookingMsg::Deltas`). 3: a reservation's lease travels as `lease_left`
/// (µs of lease left, its own type) instead of an `expires_at` that meant the same.
pub const WIRE_VERSION: u16 = 3;

/// What travels on every subject: who sent it, their per-subject sequence, when, and the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub v: u16,
    pub cluster: String,
    pub sender: Uuid,
    pub seq: u64,
    /// Sender's wall clock, µs since the Unix epoch (for lag metrics only).
    pub sent_at_us: u64,
    pub body: T,
}

/// Only the fields needed to accept or drop a message before decoding its body.
#[derive(Debug, Deserialize)]
struct Header {
    v: u16,
    cluster: String,
    sender: Uuid,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("malformed payload: {0}")]
    Malformed(String),
    #[error("unknown wire version {0}")]
    UnknownVersion(u16),
    #[error("message from foreign cluster {0:?}")]
    ForeignCluster(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode message: {0}")]
pub struct EncodeError(pub String);

/// Decode failures by kind, for metrics.
#[derive(Debug, Default)]
pub struct WireCounters {
    pub malformed: AtomicU64,
    pub unknown_version: AtomicU64,
    pub foreign_cluster: AtomicU64,
}

impl WireCounters {
    pub fn count(&self, error: &DecodeError) {
        let counter = match error {
            DecodeError::Malformed(_) => &self.malformed,
            DecodeError::UnknownVersion(_) => &self.unknown_version,
            DecodeError::ForeignCluster(_) => &self.foreign_cluster,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn total(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
            + self.unknown_version.load(Ordering::Relaxed)
            + self.foreign_cluster.load(Ordering::Relaxed)
    }
}

pub fn encode<T: Serialize>(envelope: &Envelope<T>) -> Result<Bytes, EncodeError> {
    rmp_serde::to_vec_named(envelope)
        .map(Bytes::from)
        .map_err(|e| EncodeError(e.to_string()))
}

/// The sender of an envelope of this version and cluster, without decoding its body (a
/// subscriber drops its own echoes this way).
pub fn sender_of(payload: &[u8], cluster: &str) -> Result<Uuid, DecodeError> {
    header(payload, cluster).map(|h| h.sender)
}

/// Deepest nesting a payload may have: every message type nests at most 8 levels (an
/// envelope, a booking snapshot, its bookings, a tuple, a booking, its rank).
pub const MAX_DEPTH: usize = 32;

/// Reads and checks the header: version and cluster.
fn header(payload: &[u8], cluster: &str) -> Result<Header, DecodeError> {
    check_shape(payload, MAX_DEPTH).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    let header: Header =
        rmp_serde::from_slice(payload).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if header.v != WIRE_VERSION {
        return Err(DecodeError::UnknownVersion(header.v));
    }
    if header.cluster != cluster {
        return Err(DecodeError::ForeignCluster(header.cluster));
    }
    Ok(header)
}

/// Decodes an envelope of this version and cluster.
pub fn decode<T: DeserializeOwned>(
    payload: &[u8],
    cluster: &str,
) -> Result<Envelope<T>, DecodeError> {
    header(payload, cluster)?;
    rmp_serde::from_slice(payload).map_err(|e| DecodeError::Malformed(e.to_string()))
}

/// Builds envelopes for one sender: its id, cluster and a sequence per subject.
#[derive(Debug)]
pub struct Outbox {
    cluster: String,
    sender: Uuid,
    seqs: std::collections::HashMap<String, u64>,
    /// The first bytes of every envelope this outbox seals (see [`Outbox::sealed_here`]).
    echo_prefix: Vec<u8>,
}

/// An [`Envelope`] as [`Outbox::seal`] writes it: the same fields in the same order,
/// borrowed.
#[derive(Serialize)]
struct SealedEnvelope<'a, T> {
    v: u16,
    cluster: &'a str,
    sender: Uuid,
    seq: u64,
    sent_at_us: u64,
    body: &'a T,
}

/// The leading fields of an envelope, encoded alone to measure [`Outbox::echo_prefix`].
#[derive(Serialize)]
struct Lead<'a> {
    v: u16,
    cluster: &'a str,
    sender: Uuid,
}

impl Outbox {
    pub fn new(cluster: impl Into<String>, sender: Uuid) -> Self {
        let cluster = cluster.into();
        // Fields are written in order, so an envelope begins with its map header and then
        // `v`, `cluster` and `sender` exactly as `Lead` writes them after its own (shorter)
        // map header: the prefix is that many bytes of an envelope.
        let lead = rmp_serde::to_vec_named(&Lead {
            v: WIRE_VERSION,
            cluster: &cluster,
            sender,
        });
        let sample = encode(&Envelope {
            v: WIRE_VERSION,
            cluster: cluster.clone(),
            sender,
            seq: 0,
            sent_at_us: 0,
            body: (),
        });
        let echo_prefix = match (lead, sample) {
            (Ok(lead), Ok(sample)) if lead.len() <= sample.len() => sample[..lead.len()].to_vec(),
            _ => Vec::new(),
        };
        Self {
            cluster,
            sender,
            seqs: Default::default(),
            echo_prefix,
        }
    }

    pub fn sender(&self) -> Uuid {
        self.sender
    }

    /// Whether `payload` is an envelope this sender sealed (of this version and cluster),
    /// told from its first bytes alone: a subscriber drops its own echoes without reading
    /// them (what [`sender_of`] would conclude, for a fraction of the work).
    pub fn sealed_here(&self, payload: &[u8]) -> bool {
        !self.echo_prefix.is_empty() && payload.starts_with(&self.echo_prefix)
    }

    /// The next envelope on `subject`, encoded.
    pub fn seal<T: Serialize>(&mut self, subject: &str, body: T) -> Result<Bytes, EncodeError> {
        let seq = match self.seqs.get_mut(subject) {
            Some(seq) => seq,
            None => self.seqs.entry(subject.to_owned()).or_insert(0),
        };
        *seq += 1;
        // Written as an `Envelope` is (same fields, same order), borrowing instead of cloning.
        let envelope = SealedEnvelope {
            v: WIRE_VERSION,
            cluster: &self.cluster,
            sender: self.sender,
            seq: *seq,
            sent_at_us: now_us(),
            body: &body,
        };
        rmp_serde::to_vec_named(&envelope)
            .map(Bytes::from)
            .map_err(|e| EncodeError(e.to_string()))
    }

    /// The last sequence used on `subject` (0 before the first message).
    pub fn last_seq(&self, subject: &str) -> u64 {
        self.seqs.get(subject).copied().unwrap_or(0)
    }
}

/// Wall clock in µs since the Unix epoch; only for lag measurements across processes.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
