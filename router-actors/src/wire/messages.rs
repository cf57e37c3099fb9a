//! Message bodies, one type per subject. They reuse router-core's serialisable types
//! (bookings, reservations, worker specs, KV events) so conversion stays trivial.

pub use router_core::ledger::BookingDelta;
use router_core::ledger::{Booking, LeasedReservation};
use router_core::{ClassId, KvEvent, PoolRole, RequestId, WorkerId, WorkerSpec};
use serde::{Deserialize, Serialize};

/// A worker's announcement, repeated as its heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerAnnounce {
    pub spec: WorkerSpec,
    pub pool: PoolRole,
    /// Its OpenAI-compatible base URL.
    pub endpoint: String,
    pub heartbeat_ms: u64,
    /// Routers drop the worker when no announcement arrives for this long.
    pub lease_ms: u64,
    /// The worker is leaving the fleet now (its engine stopped answering, or it is shutting
    /// down): routers remove it at once instead of waiting for its lease to run out.
    #[serde(default)]
    pub leaving: bool,
}

/// Engine-reported load (never mixed with router bookings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerLoad {
    pub worker: WorkerId,
    pub dp_rank: u32,
    pub kv_used_blocks: u64,
    pub waiting: u64,
    /// Requests the engine is running (absent from older senders: 0).
    #[serde(default)]
    pub running: u64,
    /// Its LoRA adapter slots, when it reports them (absent from older senders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapters: Option<router_core::AdapterResidency>,
}

/// Count and order-independent checksum of a router's live bookings and reservations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    pub bookings: u64,
    pub reservations: u64,
    pub checksum: u64,
}

/// What flows on `router.<pool>.bookings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BookingMsg {
    /// Consecutive own deltas of the sender, in order, under one sequence number: what the
    /// sender had queued when it published (one message per delta cost a seal, a bus message
    /// and a receive each, which bounded a node's booking rate).
    Deltas(Vec<BookingDelta>),
    /// "I am alive; this is what I hold". Peers expire a sender silent for `lease_ms`.
    Heartbeat { digest: Digest, lease_ms: u64 },
    /// The sender is stopping: receivers drop it and everything it holds at once.
    Goodbye,
    /// A sender's full live state, broadcast in its own sequence (answer to a
    /// `SnapshotRequest { owner: None }`, and a starting router's first message). It reflects
    /// exactly the messages before it, so receivers replace and continue from its sequence.
    Snapshot(SnapshotReply),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    /// Only this router's bookings, or every router's when `None`.
    pub owner: Option<uuid::Uuid>,
}

/// A router's full live state; `last_seq` is the booking-subject sequence it reflects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotReply {
    pub owner: uuid::Uuid,
    pub last_seq: u64,
    pub bookings: Vec<(RequestId, Booking)>,
    /// Leases as time left, in the sender's clock when it answered.
    pub reservations: Vec<(RequestId, LeasedReservation)>,
}

/// Decode room may have grown. A hint: receivers recheck against the room they can see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomChanged {
    pub epoch: u64,
    /// Classes whose room may have grown (empty: all).
    pub classes: Vec<ClassId>,
}

/// A batch of KV events from one worker.
pub type KvEventBatch = Vec<KvEvent>;

/// A room-credit message (`router.decode.credits`) for one router: every decode router
/// subscribes and keeps those addressed to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditEnvelope {
    pub to: uuid::Uuid,
    pub msg: router_core::credits::CreditMsg,
}
