//! The pool router: the one call the actor layer drives per request. It hashes the prompt
//! (or takes precomputed hashes), looks its prefix up in the KV index (event-fed, or the
//! approximate index learned from this router's own placements), builds the admission
//! request for the class the caller resolved and hands it to the scheduler; and it forwards
//! worker changes, KV events, first tokens and releases. Its own bookings hold a lease
//! (`lease.rs`): one never released expires ([`PoolRouter::expire_leases`]).

mod lease;
mod peer;
mod request;

#[cfg(test)]
mod input_fuzz;
#[cfg(test)]
mod tests;

pub use peer::{Applied, Holdings};
pub use request::{Prompt, RouteRequest};

use crate::admission::{AdmissionRequest, DecodeRoomView, Outcome, Scheduler, SchedulerConfig};
use crate::hashing::{SequenceHash, token_sequence_hashes};
use crate::ids::{RequestId, WorkerId};
use crate::index::{
    ApproxConfig, ApproxIndex, EventStatus, KvEvent, KvIndexReader, OverlapScores, SharedKvIndex,
};
use crate::ledger::BookingLedger;
use crate::policy::PolicyProfile;
use crate::time::Timestamp;
use crate::worker::{WorkerSpec, WorkerSpecError};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

/// Where prefix overlap comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixMode {
    /// Workers publish KV events.
    Events,
    /// Engines publish nothing: learn from this router's own placements.
    Approximate(ApproxConfig),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRouterConfig {
    pub scheduler: SchedulerConfig,
    /// Tokens per KV block; every worker of the pool must announce the same.
    pub block_size: u32,
    pub prefix: PrefixMode,
}

/// How a router in events mode learns the prefixes of workers that publish no KV events
/// (`WorkerSpec::kv_events == false`): from its own placements, held this long.
pub const FALLBACK_APPROX: ApproxConfig = ApproxConfig {
    ttl: std::time::Duration::from_secs(120),
    capacity_blocks: 1 << 20,
};

#[derive(Debug)]
enum Prefix {
    /// Shared with whoever applies the events; this router only reads it (and registers
    /// workers in it). Workers without events are learnt in `fallback`.
    Events {
        index: SharedKvIndex,
        fallback: Learnt,
    },
    /// Every worker is learnt from placements.
    Approximate(Learnt),
}

/// An index learnt from this router's own placements.
#[derive(Debug)]
struct Learnt {
    index: ApproxIndex,
    /// Queued requests' hashes, learnt when they are admitted.
    queued: FxHashMap<RequestId, Vec<SequenceHash>>,
    /// Events mode: the workers learnt here (those that publish no events).
    workers: FxHashSet<WorkerId>,
}

impl Learnt {
    fn new(config: ApproxConfig) -> Self {
        Self {
            index: ApproxIndex::new(config),
            queued: FxHashMap::default(),
            workers: FxHashSet::default(),
        }
    }

    fn remove_worker(&mut self, spec: &WorkerSpec) {
        self.workers.remove(&spec.id);
        for rank in spec.ranks() {
            self.index.remove_rank(rank);
        }
    }

    /// Learns where an admitted request went (a queued one's hashes wait for it).
    fn learn(&mut self, outcome: &Outcome, hashes: Vec<SequenceHash>, now: Timestamp, all: bool) {
        match outcome {
            Outcome::Queued { request, .. } => {
                self.queued.insert(*request, hashes);
            }
            Outcome::Admitted(a) => {
                let hashes = self.queued.remove(&a.request).unwrap_or(hashes);
                if all || self.workers.contains(&a.rank.worker) {
                    self.index.record_placement(a.rank, &hashes, now);
                }
            }
            Outcome::Rejected { request, .. } => {
                self.queued.remove(request);
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Spec(#[from] WorkerSpecError),
    #[error("{worker}: block_size {announced} differs from the pool's {pool}")]
    BlockSize {
        worker: WorkerId,
        announced: u32,
        pool: u32,
    },
}

/// One pool's router: prefix index + scheduler.
#[derive(Debug)]
pub struct PoolRouter {
    scheduler: Scheduler,
    prefix: Prefix,
    block_size: u32,
    leases: lease::Leases,
}

impl PoolRouter {
    /// A router with an index of its own (events reach it through [`Self::apply_kv_event`]).
    pub fn new(config: PoolRouterConfig, profile: PolicyProfile) -> Self {
        Self::with_index(config, profile, SharedKvIndex::default())
    }

    /// A router reading `index` in events mode (ignored in approximate mode): events applied
    /// to `index` elsewhere are seen by this router's lookups, which never wait for them.
    pub fn with_index(
        config: PoolRouterConfig,
        profile: PolicyProfile,
        index: SharedKvIndex,
    ) -> Self {
        let prefix = match config.prefix {
            PrefixMode::Events => Prefix::Events {
                index,
                fallback: Learnt::new(FALLBACK_APPROX),
            },
            PrefixMode::Approximate(cfg) => Prefix::Approximate(Learnt::new(cfg)),
        };
        Self {
            leases: lease::Leases::new(config.scheduler.booking_lease),
            scheduler: Scheduler::new(config.scheduler, profile),
            prefix,
            block_size: config.block_size.max(1),
        }
    }

    /// Room credits off: a router alone in its pool judges the lines on its own ledger, which
    /// holds every booking there is. True when that may have opened the gate (drain).
    pub fn disable_credits(&mut self) -> bool {
        self.scheduler.ledger_mut().disable_credits()
    }

    /// Room credits on (`crate::credits`): this router's class headroom on every rank is
    /// also bounded by the credits it holds there.
    pub fn enable_credits(&mut self) {
        let owner = self.scheduler.owner();
        // Prompt tokens are booked out of prefill credits where this pool's own gate checks
        // its prefill line for the requests it books: an aggregated pool, or a prefill pool
        // (a decode pool books staged legs, which skip the class lines).
        let prefill = self.scheduler.role() != crate::admission::PoolRole::Decode;
        self.scheduler.ledger_mut().enable_credits(owner, prefill);
    }

    /// Applies what a credit agent says this router now holds, and raises the room epoch
    /// when `room_may_have_grown` (credits given back to it as owner). True when the gate
    /// may have opened (drain).
    pub fn apply_credits(
        &mut self,
        held: Vec<(crate::credits::CreditKey, u64)>,
        room_may_have_grown: bool,
    ) -> bool {
        let ledger = self.scheduler.ledger_mut();
        let before = ledger.room_epoch();
        for (key, amount) in held {
            ledger.set_credit_held(key, amount);
        }
        if room_may_have_grown {
            ledger.raise_room_epoch();
        }
        ledger.room_epoch() != before
    }

    /// Requests that waited on decode room since the last call (prefill pools).
    pub fn take_room_wants(&mut self) -> Vec<crate::admission::RoomWant> {
        self.scheduler.take_room_wants()
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Prefill pool: stops counting own reservations that the decode view has applied.
    pub fn forget_applied_reservations(&mut self, room: &dyn DecodeRoomView, now: Timestamp) {
        self.scheduler.forget_applied_reservations(room, now);
    }

    pub fn ledger(&self) -> &BookingLedger {
        self.scheduler.ledger()
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// A lock-free read handle on the event-fed index (none in approximate mode).
    pub fn index_reader(&self) -> Option<KvIndexReader> {
        match &self.prefix {
            Prefix::Events { index, .. } => Some(index.reader()),
            Prefix::Approximate(_) => None,
        }
    }

    /// The event-fed index this router reads (none in approximate mode).
    pub fn kv_index(&self) -> Option<&SharedKvIndex> {
        match &self.prefix {
            Prefix::Events { index, .. } => Some(index),
            Prefix::Approximate(_) => None,
        }
    }

    /// Hashes, looks up and offers the request to the scheduler. `arrival` is when the
    /// request reached the router (its class deadline counts from then); `now` is the time of
    /// this call. A class id outside the profile is rejected as `UnknownClass`.
    pub fn route(
        &mut self,
        request: RouteRequest,
        arrival: Timestamp,
        now: Timestamp,
        room: Option<&dyn DecodeRoomView>,
    ) -> Outcome {
        debug_assert!(arrival <= now, "a request cannot arrive after it is routed");
        let (hashes, prompt_tokens) = match &request.prompt {
            Prompt::Tokens(tokens) => (
                token_sequence_hashes(tokens, self.block_size as usize, request.scope()),
                tokens.len() as u64,
            ),
            Prompt::Hashes {
                block_hashes,
                prompt_tokens,
            } => (
                block_hashes.iter().copied().map(SequenceHash).collect(),
                *prompt_tokens,
            ),
        };
        let overlap = self.overlap(&hashes, now);
        let best = overlap.best().map_or(0, |(_, depth)| u64::from(depth));
        let mut admission =
            AdmissionRequest::new(request.id, request.class, request.phase, arrival);
        admission.block_hashes = hashes.iter().map(|h| h.0).collect();
        admission.prompt_tokens = prompt_tokens;
        admission.cached_tokens = (best * u64::from(self.block_size)).min(prompt_tokens);
        admission.overlap = overlap.iter().collect();
        admission.output_blocks = request
            .expected_output_tokens
            .div_ceil(u64::from(self.block_size));
        admission.eligibility = request.eligibility;
        admission.eligibility.lora = request.lora.or(admission.eligibility.lora);
        admission.preferred = request.preferred;
        admission.do_not_queue = request.do_not_queue;
        let outcome = self.scheduler.arrive(admission, now, room);
        self.learn(&outcome, hashes, now);
        self.lease(&outcome, now);
        outcome
    }

    /// Admits queued requests whose gates opened (after a release, a first token, a peer's
    /// release, `RoomChanged`, a worker change).
    pub fn drain(&mut self, now: Timestamp, room: Option<&dyn DecodeRoomView>) -> Vec<Outcome> {
        let outcomes = self.scheduler.drain(now, room);
        for outcome in &outcomes {
            self.learn(outcome, Vec::new(), now);
            self.lease(outcome, now);
        }
        outcomes
    }

    /// Sheds due requests and reservations (the actor's timer).
    pub fn expire(&mut self, now: Timestamp) -> Vec<Outcome> {
        let outcomes = self.scheduler.expire(now);
        for outcome in &outcomes {
            self.learn(outcome, Vec::new(), now);
        }
        self.learnt_mut().index.expire(now);
        outcomes
    }

    pub fn prefill_done(&mut self, request: RequestId) -> bool {
        self.scheduler.prefill_done(request)
    }

    pub fn release(&mut self, request: RequestId) -> bool {
        self.leases.end(request);
        self.scheduler.release(request)
    }

    pub fn cancel(&mut self, request: RequestId, now: Timestamp) -> bool {
        self.leases.end(request);
        self.learnt_mut().queued.remove(&request);
        self.scheduler.cancel(request, now)
    }

    /// Releases this router's bookings whose lease ended at or before `now` (booked one
    /// `SchedulerConfig::booking_lease` ago and never released: leaked); returns them, for the
    /// actor to publish their release.
    pub fn expire_leases(&mut self, now: Timestamp) -> Vec<RequestId> {
        let due = self.leases.take_due(now);
        due.into_iter()
            .filter(|&request| self.scheduler.release(request))
            .collect()
    }

    /// The earliest instant something is due: the scheduler's (a queued request's deadline,
    /// a reservation's lease end) or a booking's lease end. An actor arms one timer for it.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        match (self.scheduler.next_deadline(), self.leases.next_end()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// An admission books a request: its lease starts.
    fn lease(&mut self, outcome: &Outcome, now: Timestamp) {
        if let Outcome::Admitted(admission) = outcome {
            self.leases.grant(admission.request, now);
        }
    }

    /// Adds or updates a worker in the ledger and the index.
    /// A spec identical to the known one changes nothing (announcements repeat as heartbeats).
    pub fn upsert_worker(&mut self, spec: WorkerSpec) -> Result<(), WorkerError> {
        spec.validate()?;
        if self.scheduler.ledger().worker(spec.id) == Some(&spec) {
            return Ok(());
        }
        if spec.block_size != self.block_size {
            return Err(WorkerError::BlockSize {
                worker: spec.id,
                announced: spec.block_size,
                pool: self.block_size,
            });
        }
        if let Prefix::Events { index, fallback } = &mut self.prefix {
            index.add_worker(&spec)?;
            if spec.kv_events {
                fallback.remove_worker(&spec);
            } else {
                fallback.workers.insert(spec.id);
            }
        }
        self.scheduler.ledger_mut().upsert_worker(spec)?;
        Ok(())
    }

    /// Removes a worker: its index entries and what was booked on it go.
    /// What `worker`'s engine reports of its LoRA adapter slots: a placement hint for the
    /// adapters' requests (`crate::adapters`), never a booking.
    pub fn set_adapters(&mut self, worker: WorkerId, adapters: crate::adapters::AdapterResidency) {
        self.scheduler.ledger_mut().set_adapters(worker, adapters);
    }

    pub fn remove_worker(&mut self, worker: WorkerId) {
        if let Prefix::Events { index, .. } = &self.prefix {
            index.remove_worker(worker);
        }
        if let Some(spec) = self.scheduler.ledger().worker(worker).cloned() {
            self.learnt_mut().remove_worker(&spec);
        }
        let owner = self.scheduler.owner();
        for key in self.scheduler.ledger_mut().remove_worker(worker) {
            if key.owner == owner {
                self.leases.end(key.request);
            }
        }
    }

    /// Applies a worker's KV event (ignored, and counted as such, in approximate mode).
    pub fn apply_kv_event(&mut self, event: &KvEvent) -> EventStatus {
        match &mut self.prefix {
            Prefix::Events { index, .. } => index.write().apply(event),
            Prefix::Approximate(_) => EventStatus::UnknownWorker,
        }
    }

    fn learnt_mut(&mut self) -> &mut Learnt {
        match &mut self.prefix {
            Prefix::Events { fallback, .. } => fallback,
            Prefix::Approximate(learnt) => learnt,
        }
    }

    /// Per-rank overlap: from the events index, plus what this router learnt for workers
    /// without events (their ranks are never in the events index, so the two never overlap).
    fn overlap(&self, hashes: &[SequenceHash], now: Timestamp) -> OverlapScores {
        match &self.prefix {
            Prefix::Events { index, fallback } => {
                let found = index.find_matches(hashes);
                if fallback.workers.is_empty() {
                    return found;
                }
                let learnt = fallback.index.find_matches(hashes, now);
                OverlapScores::from_pairs(found.iter().chain(learnt.iter()).collect())
            }
            Prefix::Approximate(learnt) => learnt.index.find_matches(hashes, now),
        }
    }

    /// Learns where admitted requests went: every worker in approximate mode, the workers
    /// without events in events mode.
    fn learn(&mut self, outcome: &Outcome, hashes: Vec<SequenceHash>, now: Timestamp) {
        match &mut self.prefix {
            Prefix::Events { fallback, .. } if !fallback.workers.is_empty() => {
                fallback.learn(outcome, hashes, now, false);
            }
            Prefix::Events { .. } => {}
            Prefix::Approximate(learnt) => learnt.learn(outcome, hashes, now, true),
        }
    }
}
