//! What the scheduler is asked and what it answers: an admission request with its phase,
//! and an outcome that is always a value with a reason (`Admitted`, `Queued`, `Rejected`).
//! Every rejection reason is distinct and serialisable, for metrics labels and HTTP errors.

use crate::eligibility::Eligibility;
use crate::ids::{BookingKey, ClassId, RankId, RequestId};
use crate::ledger::GateClosed;
use crate::queue::{ExpiryStage, LimitKind, QueueTicket};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Which leg of a request this scheduling call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// One pool does prefill and decode.
    Aggregated,
    /// The prefill leg of a disaggregated request (the only admission gate).
    Prefill,
    /// The decode leg. `staged`: its KV already sits on a prefill worker, so it is admitted
    /// upstream (no class wait); otherwise (a conditional-disaggregation bypass that will
    /// prefill locally) it takes the full decode gate.
    Decode { staged: bool },
}

/// One request offered to a scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmissionRequest {
    pub id: RequestId,
    pub class: ClassId,
    pub phase: Phase,
    /// Chained sequence hashes of the prompt's full blocks.
    pub block_hashes: Vec<u64>,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Prompt tokens already cached on the best eligible rank (queue cost is uncached).
    pub cached_tokens: u64,
    /// Matched prefix depth in blocks per rank, from the KV prefix index (ranks absent
    /// from the list match nothing).
    pub overlap: Vec<(RankId, u32)>,
    /// Decode blocks the request will hold beyond its prompt blocks (output estimate).
    pub output_blocks: u64,
    pub eligibility: Eligibility,
    /// Soft affinity: take this rank when it is eligible.
    pub preferred: Option<RankId>,
    /// Admit now or reject now, whatever the class allows.
    pub do_not_queue: bool,
    /// When the router received the request (the class deadline counts from here).
    pub arrival: Timestamp,
}

impl AdmissionRequest {
    /// A request with no constraints; set fields for the rest.
    pub fn new(id: RequestId, class: ClassId, phase: Phase, arrival: Timestamp) -> Self {
        Self {
            id,
            class,
            phase,
            block_hashes: Vec::new(),
            prompt_tokens: 0,
            cached_tokens: 0,
            overlap: Vec::new(),
            output_blocks: 0,
            eligibility: Eligibility::default(),
            preferred: None,
            do_not_queue: false,
            arrival,
        }
    }

    /// Prompt tokens still to compute (never below 1, the unit of queue cost).
    pub fn uncached_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }

    /// Decode blocks the request needs on its decode rank: its prompt blocks plus output.
    pub fn decode_need(&self) -> u64 {
        (self.block_hashes.len() as u64).saturating_add(self.output_blocks)
    }
}

/// Decode room held at prefill admission, for the caller to apply to the decode ledger
/// (a cast to the decode actor) and to release if the request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodeReservation {
    pub key: BookingKey,
    pub rank: RankId,
    pub blocks: u64,
    pub expires_at: Timestamp,
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Admission {
    pub request: RequestId,
    pub class: ClassId,
    pub rank: RankId,
    /// Time spent in the class queue (zero on the direct path).
    pub waited: Duration,
    /// A staged decode leg booked without class wait.
    pub admitted_upstream: bool,
    pub decode_reservation: Option<DecodeReservation>,
    /// The prefix reuse found for it (metrics and spans).
    pub prefix: PrefixHit,
}

/// How much of an admitted request's prompt the chosen rank already holds, by the KV
/// prefix index (events, or the approximate index) at placement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PrefixHit {
    /// Full prompt blocks (one chained hash each).
    pub prompt_blocks: u32,
    /// Of them, the leading blocks the chosen rank holds.
    pub matched_blocks: u32,
    /// `matched_blocks` in tokens, at most the prompt's tokens.
    pub cached_tokens: u64,
}

/// Why a request was refused. Each variant is its own metric label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum RejectReason {
    #[error("class queue full: {kind:?} {current} of {limit}")]
    QueueFull {
        kind: LimitKind,
        current: u64,
        limit: u64,
    },
    #[error("queue deadline passed at {stage:?} by {overdue_ms} ms")]
    DeadlinePassed { stage: ExpiryStage, overdue_ms: u64 },
    /// A class or request that may not wait found its gate closed.
    #[error("no capacity for a request that may not queue: {cause:?}")]
    WouldQueue { cause: GateClosed },
    /// A request that may not queue arrived behind its class's backlog (it may not
    /// overtake it).
    #[error("class backlog ahead of a request that may not queue")]
    BehindBacklog,
    #[error("no worker can serve the request")]
    NoWorkers,
    #[error("every eligible worker is over a reject threshold")]
    AllWorkersOverloaded,
    #[error("pinned rank {rank} is overloaded")]
    PinnedOverloaded { rank: RankId },
    #[error("pinned rank {rank} is not allowed or not in the pool")]
    PinnedUnavailable { rank: RankId },
    #[error("request is already queued or booked")]
    Duplicate,
    #[error("the class id is not in this scheduler's profile")]
    UnknownClass,
    /// The router is starting and has not heard its peers' bookings yet; it held more
    /// requests than it may.
    #[error("router not ready: peers' bookings are not in yet")]
    NotReady,
}

impl RejectReason {
    /// A stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::QueueFull { .. } => "queue_full",
            Self::DeadlinePassed { .. } => "deadline_passed",
            Self::WouldQueue { .. } => "would_queue",
            Self::BehindBacklog => "behind_backlog",
            Self::NoWorkers => "no_workers",
            Self::AllWorkersOverloaded => "all_workers_overloaded",
            Self::PinnedOverloaded { .. } => "pinned_overloaded",
            Self::PinnedUnavailable { .. } => "pinned_unavailable",
            Self::Duplicate => "duplicate",
            Self::UnknownClass => "unknown_class",
            Self::NotReady => "not_ready",
        }
    }
}

/// The answer for one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Admitted(Admission),
    Queued {
        request: RequestId,
        class: ClassId,
        ticket: QueueTicket,
    },
    Rejected {
        request: RequestId,
        class: ClassId,
        reason: RejectReason,
    },
}

impl Outcome {
    pub fn request(&self) -> RequestId {
        match self {
            Outcome::Admitted(a) => a.request,
            Outcome::Queued { request, .. } | Outcome::Rejected { request, .. } => *request,
        }
    }

    pub fn admitted(&self) -> Option<&Admission> {
        match self {
            Outcome::Admitted(a) => Some(a),
            _ => None,
        }
    }

    pub fn rejection(&self) -> Option<&RejectReason> {
        match self {
            Outcome::Rejected { reason, .. } => Some(reason),
            _ => None,
        }
    }
}
