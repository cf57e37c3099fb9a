//! Plain data of the class queues: the per-class configuration, the ticket that names a
//! queued entry, and every value that leaves the queue (dispatched entries, expiries,
//! rejections, snapshots). All outcomes are serialisable so the actor layer can log or
//! ship them as they are.

use crate::ids::ClassId;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Configuration of one class queue, indexed densely by [`ClassId`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueClassSpec {
    /// Deficit-round-robin credit earned per round, in uncached tokens. Must be > 0.
    pub quantum: u64,
    /// Longest a request may wait in the queue: its deadline is `arrival + slo`.
    pub slo: Duration,
    /// Queued requests allowed per discovered worker (`None`: unlimited).
    pub request_limit_per_worker: Option<u64>,
    /// Queued raw prompt tokens allowed per discovered worker (`None`: unlimited).
    pub token_limit_per_worker: Option<u64>,
}

impl QueueClassSpec {
    /// A class without limits.
    pub const fn new(quantum: u64, slo: Duration) -> Self {
        Self {
            quantum,
            slo,
            request_limit_per_worker: None,
            token_limit_per_worker: None,
        }
    }
}

/// Why a set of class specs was refused by [`ClassQueues::new`](super::ClassQueues::new).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum QueueConfigError {
    #[error("class {class:?}: quantum must be at least 1")]
    ZeroQuantum { class: ClassId },
    #[error("{count} classes configured, at most {max} fit a ClassId")]
    TooManyClasses { count: usize, max: usize },
}

/// Names one queued entry; unique for the lifetime of its [`ClassQueues`](super::ClassQueues)
/// and increasing in enqueue order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QueueTicket(pub u64);

/// Where a request ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpiryStage {
    /// Already at or past its deadline when offered to the queue: never stored.
    Admission,
    /// Reached its deadline while queued: shed instead of dispatched late.
    Dispatch,
}

/// Which per-class cap refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Number of queued requests.
    Requests,
    /// Sum of the raw prompt tokens of queued requests.
    Tokens,
}

/// Why [`ClassQueues::enqueue`](super::ClassQueues::enqueue) refused an entry: a fact about
/// the queue that the scheduler turns into the request's
/// [`RejectReason`](crate::admission::RejectReason), the one reason type callers see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum EnqueueRefusal {
    #[error("class {class:?} does not exist ({classes} classes configured)")]
    UnknownClass { class: ClassId, classes: usize },
    #[error("deadline passed {overdue:?} ago at {stage:?}")]
    Expired {
        stage: ExpiryStage,
        overdue: Duration,
    },
    #[error("{kind:?} limit reached: {current} queued, limit {limit}")]
    LimitReached {
        kind: LimitKind,
        current: u64,
        limit: u64,
    },
}

/// A refused request: the payload comes back to the caller with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnqueueRejection<T> {
    pub class: ClassId,
    pub payload: T,
    pub reason: EnqueueRefusal,
}

/// An entry that left the queue to be dispatched (or because its caller went away).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dequeued<T> {
    pub class: ClassId,
    pub payload: T,
    pub ticket: QueueTicket,
    pub arrival: Timestamp,
    pub deadline: Timestamp,
    /// DRR cost in uncached tokens (at least 1).
    pub cost: u64,
    pub raw_tokens: u64,
    /// `now - arrival` when it left.
    pub waited: Duration,
}

/// An entry shed because it reached its deadline while queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expired<T> {
    pub class: ClassId,
    pub payload: T,
    pub ticket: QueueTicket,
    pub arrival: Timestamp,
    pub deadline: Timestamp,
    pub stage: ExpiryStage,
    /// `now - deadline` when it was shed (zero when shed exactly at its deadline).
    pub overdue: Duration,
    pub cost: u64,
    pub raw_tokens: u64,
}

/// Result of one [`ClassQueues::pop_next`](super::ClassQueues::pop_next): at most one entry
/// to dispatch, plus every entry shed on the way (in deadline order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[must_use = "expired entries must be answered to their callers"]
pub struct Pop<T> {
    pub popped: Option<Dequeued<T>>,
    pub expired: Vec<Expired<T>>,
}

/// A borrowed view of one queued entry, as yielded by
/// [`ClassQueues::iter_class`](super::ClassQueues::iter_class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedRef<'a, T> {
    pub ticket: QueueTicket,
    pub arrival: Timestamp,
    pub deadline: Timestamp,
    pub cost: u64,
    pub raw_tokens: u64,
    pub payload: &'a T,
}

/// State of one class for metrics and debugging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSnapshot {
    pub class: ClassId,
    pub len: usize,
    /// Sum of raw prompt tokens queued.
    pub tokens: u64,
    pub deficit: u64,
    pub quantum: u64,
    /// Arrival of the head entry: the oldest, since one class has one SLO.
    pub oldest_arrival: Option<Timestamp>,
    pub head_deadline: Option<Timestamp>,
}

/// State of every class queue and of the round-robin arbiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSnapshot {
    pub len: usize,
    pub tokens: u64,
    /// Next class the ring pass starts from.
    pub cursor: usize,
    /// Class re-offered first on the next pop because it still holds credit.
    pub carry: Option<ClassId>,
    pub classes: Vec<ClassSnapshot>,
}
