//! The admission scheduler of one pool: class resolution is done by the caller; this
//! decides, for each request, admit now, queue, or reject, and books what it admits.
//!
//! - Aggregated pool: one queue checks both class fractions, and one rank must satisfy both.
//! - Prefill pool: the only gate of a disaggregated request. It checks the class prefill
//!   fraction on its own ranks and the class decode fraction on the paired decode pool,
//!   read through a [`DecodeRoomView`] (no message), and takes a pending-decode
//!   reservation at admission.
//! - Decode pool: a staged decode leg is admitted upstream (booked at once, router-wide
//!   reject thresholds still apply); a bypass-shaped decode request takes the full gate.
//!
//! Within a class: earliest deadline first, and a new arrival never overtakes its class's
//! backlog. Across classes: deficit round robin by quantum (see `crate::queue`).

mod arrive;
mod drain;
mod gate;
mod request;
mod room;
mod select;

#[cfg(test)]
mod tests;

pub use request::{
    Admission, AdmissionRequest, DecodeReservation, Outcome, Phase, PrefixHit, RejectReason,
};
pub use room::DecodeRoomView;

use crate::ids::{BookingKey, RequestId, RouterId};
use crate::ledger::BookingLedger;
use crate::policy::PolicyProfile;
use crate::queue::{ClassQueues, QueueClassSpec, QueueSnapshot, QueueTicket};
use crate::select::{SelectionConfig, SelectionConfigError, Selector};
use crate::time::Timestamp;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use room::{InflightReservations, PassCache};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Which pool a scheduler serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolRole {
    Aggregated,
    Prefill,
    Decode,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfig {
    pub role: PoolRole,
    /// The router this scheduler books for (the owner of its bookings).
    pub owner: RouterId,
    /// How long a pending-decode reservation lives before it expires on its own.
    pub reservation_lease: Duration,
    /// How long one of this router's own bookings may live before it is released as leaked
    /// (`None`: for as long as it is booked). Set it above the longest a request may run: the
    /// frontend releases every booking before that (see `crate::router::PoolRouter::expire_leases`).
    #[serde(default)]
    pub booking_lease: Option<Duration>,
    /// How placement weighs load against prefix reuse.
    #[serde(default)]
    pub selection: SelectionConfig,
    /// Seed of the scheduler's own RNG (selection tie-breaks and softmax draws), so a run
    /// replays exactly.
    #[serde(default)]
    pub seed: u64,
    /// Prefill pool: hold the decode room a request will need at its admission (on by
    /// default). Off only to measure what reservations buy: the gate then checks decode room
    /// without holding it, and a burst can overshoot even one router's line.
    #[serde(default = "yes")]
    pub decode_reservations: bool,
}

fn yes() -> bool {
    true
}

impl SchedulerConfig {
    /// Default selection settings and seed 0.
    pub fn new(role: PoolRole, owner: RouterId) -> Self {
        Self {
            role,
            owner,
            reservation_lease: Duration::from_secs(30),
            booking_lease: None,
            selection: SelectionConfig::default(),
            seed: 0,
            decode_reservations: true,
        }
    }
}

/// Counters for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SchedulerStats {
    pub admitted: u64,
    pub admitted_upstream: u64,
    pub queued: u64,
    pub rejected: u64,
    pub cancelled: u64,
    /// Times the paired decode pool was asked for room (at most once per class per pass
    /// for requests without a LoRA).
    pub room_queries: u64,
    pub gate_passes: u64,
}

/// A request that waits at a gate for room that room credits could give (see
/// `crate::credits`): decode room (a prefill pool's paired decode pool, or an aggregated
/// pool's own ranks), or prefill room on the pool's own ranks (an aggregated pool, or a
/// disaggregated fleet's prefill pool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoomWant {
    pub class: crate::ids::ClassId,
    /// Decode blocks the request needs (0 when its class has no decode line, and in a
    /// prefill pool's want for its own prefill room).
    pub need: u64,
    /// Prompt tokens it books, when they come out of prefill credits: in an aggregated pool
    /// both credits are then asked on one rank, as the gate needs both on the same rank. A
    /// prefill pool's want without it is for the paired decode pool's room.
    pub prefill_need: Option<u64>,
    pub lora: Option<String>,
}

/// A serialisable view for `Observe`.
#[derive(Debug, Clone, Serialize)]
pub struct SchedulerSnapshot {
    pub role: PoolRole,
    pub queue: QueueSnapshot,
    pub ledger: crate::ledger::LedgerSnapshot,
    pub inflight_reservations: usize,
    pub stats: SchedulerStats,
}

#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    profile: PolicyProfile,
    ledger: BookingLedger,
    queue: ClassQueues<AdmissionRequest>,
    queued: FxHashMap<RequestId, QueueTicket>,
    inflight: InflightReservations,
    cache: PassCache,
    stats: SchedulerStats,
    selector: Selector,
    rng: SmallRng,
    wants: Vec<RoomWant>,
}

impl Scheduler {
    /// A scheduler for a validated profile. An invalid `config.selection` (a field that is
    /// negative or not finite) falls back to the default for that field; call
    /// [`Scheduler::try_new`] (or `SelectionConfig::validate` when loading config) to get
    /// the error instead.
    pub fn new(config: SchedulerConfig, profile: PolicyProfile) -> Self {
        let mut config = config;
        config.selection = sanitized(config.selection);
        match Self::try_new(config, profile) {
            Ok(scheduler) => scheduler,
            Err(e) => unreachable!("sanitized selection settings refused: {e}"),
        }
    }

    /// A scheduler, or why its selection settings cannot be used.
    pub fn try_new(
        config: SchedulerConfig,
        profile: PolicyProfile,
    ) -> Result<Self, SelectionConfigError> {
        let selector = Selector::new(config.selection)?;
        let mut ledger = match config.role {
            PoolRole::Prefill => BookingLedger::without_decode_lines(&profile),
            PoolRole::Aggregated | PoolRole::Decode => BookingLedger::new(&profile),
        };
        ledger.set_prefill_load_scale(config.selection.prefill_load_scale);
        let rng = SmallRng::seed_from_u64(config.seed);
        let specs = profile
            .classes()
            .iter()
            .map(|c| QueueClassSpec {
                quantum: c.quantum,
                slo: c.slo,
                request_limit_per_worker: c.request_queue_limit_per_worker,
                token_limit_per_worker: c.token_queue_limit_per_worker,
            })
            .collect();
        let queue = match ClassQueues::new(specs) {
            Ok(queue) => queue,
            // A validated profile has quanta > 0 and at most u16::MAX classes.
            Err(e) => unreachable!("validated profile refused by the queue: {e}"),
        };
        Ok(Self {
            config,
            profile,
            ledger,
            queue,
            queued: FxHashMap::default(),
            inflight: InflightReservations::default(),
            cache: PassCache::default(),
            stats: SchedulerStats::default(),
            selector,
            rng,
            wants: Vec::new(),
        })
    }

    pub fn role(&self) -> PoolRole {
        self.config.role
    }

    pub fn owner(&self) -> RouterId {
        self.config.owner
    }

    pub fn profile(&self) -> &PolicyProfile {
        &self.profile
    }

    pub fn ledger(&self) -> &BookingLedger {
        &self.ledger
    }

    /// For peer deltas, worker changes and reservations coming from the paired prefill
    /// scheduler. Callers drain afterwards when capacity may have grown.
    pub fn ledger_mut(&mut self) -> &mut BookingLedger {
        &mut self.ledger
    }

    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }

    pub fn queued_len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_queued(&self, request: RequestId) -> bool {
        self.queued.contains_key(&request)
    }

    /// The earliest instant something is due: a queued request's deadline or a
    /// reservation's lease end. An actor arms one timer for it and calls `expire`.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        match (
            self.queue.next_deadline(),
            self.ledger.next_reservation_expiry(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn key(&self, request: RequestId) -> BookingKey {
        BookingKey::new(self.config.owner, request)
    }

    /// Drops the prompt tokens of this router's booking at its first token. True when the
    /// ledger changed (prefill capacity grew: drain).
    pub fn prefill_done(&mut self, request: RequestId) -> bool {
        let key = self.key(request);
        self.ledger.mark_prefill_done(&key)
    }

    /// Releases this router's booking (or reservation) of a request. True when something
    /// was released (capacity grew: drain).
    pub fn release(&mut self, request: RequestId) -> bool {
        let key = self.key(request);
        self.ledger.release(&key).is_some()
    }

    /// Forgets own reservations that the paired decode view has applied (or that expired),
    /// so the count of in-flight reservations is exact even while no gate pass runs.
    pub fn forget_applied_reservations(&mut self, room: &dyn DecodeRoomView, now: Timestamp) {
        let applied = room.applied_reserve_seq(self.config.owner);
        self.inflight.unseen(applied, now);
    }

    /// Requests that waited on decode room since the last call (one per class and adapter).
    pub fn take_room_wants(&mut self) -> Vec<RoomWant> {
        std::mem::take(&mut self.wants)
    }

    pub fn snapshot(&self) -> SchedulerSnapshot {
        SchedulerSnapshot {
            role: self.config.role,
            queue: self.queue.snapshot(),
            ledger: self.ledger.snapshot(),
            inflight_reservations: self.inflight.len(),
            stats: self.stats.clone(),
        }
    }
}

/// Each field that is negative or not finite replaced by its default.
fn sanitized(selection: SelectionConfig) -> SelectionConfig {
    let default = SelectionConfig::default();
    let keep = |v: f64, d: f64| if v.is_finite() && v >= 0.0 { v } else { d };
    SelectionConfig {
        prefill_load_scale: keep(selection.prefill_load_scale, default.prefill_load_scale),
        overlap_credit: keep(selection.overlap_credit, default.overlap_credit),
        temperature: keep(selection.temperature, default.temperature),
        count_booked_prefix: selection.count_booked_prefix,
    }
}
