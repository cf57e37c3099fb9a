//! The RouterActor's state and the work its handlers share: settling outcomes (replying,
//! publishing deltas, casting reservations), draining, the deadline timer, and publishing the
//! decode room.

use super::{OwnDelta, Paired, RouteError, RouterMsg};
use crate::clock::Clock;
use crate::lag::{LagRecorder, LagSummary};
use crate::room_view::{RoomPublisher, RoomSnapshot};
use crate::supervisor::InflightRegistry;
use crate::wire::{BookingDelta, Digest, digest_from};
use ractor::concurrency::JoinHandle;
use ractor::{ActorRef, MessagingErr, RpcReplyPort};
use router_core::admission::RejectReason;
use router_core::admission::SchedulerSnapshot;
use router_core::ledger::{Booking, LeasedReservation};
use router_core::{
    Admission, DecodeRoomView, Outcome, PoolRole, PoolRouter, RequestId, RoomWant, RouteRequest,
    RouterId, Timestamp, WorkerId, WorkerSpec,
};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

type Reply = RpcReplyPort<Result<Admission, RouteError>>;

/// Requests a starting node holds before it admits; past this, new ones are refused.
const MAX_HELD: usize = 65_536;
/// The one armed deadline timer.
type Timer = (Timestamp, JoinHandle<Result<(), MessagingErr<RouterMsg>>>);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RouterCounters {
    /// Own deltas dropped because the peer-sync queue was full.
    pub dropped_deltas: u64,
    /// Admissions whose caller had gone: rolled back.
    pub rolled_back: u64,
    /// Queued requests whose caller went away: removed, never booked.
    pub abandoned: u64,
    pub worker_errors: u64,
    pub reservations_lost: u64,
    /// Own bookings released by their lease: booked a lease term ago and never released
    /// (a leak the lease ended).
    pub leases_expired: u64,
    /// Requests refused because the starting node already held `MAX_HELD` of them.
    pub refused_not_ready: u64,
    /// Room-credit messages dropped because the credit courier's queue was full (periodic
    /// reports repair them).
    pub credit_messages_dropped: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RouterSnapshot {
    pub role: PoolRole,
    pub scheduler: SchedulerSnapshot,
    pub waiting_replies: usize,
    pub counters: RouterCounters,
    /// Peer-sync lag: a peer's delta from its publication to its application here.
    pub peer_lag_us: LagSummary,
    /// Decode pool in a replicated fleet: the room credits it holds and owns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credits: Option<router_core::credits::CreditSnapshot>,
}

/// The digest of what one owner holds in this router's ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OwnerDigest {
    pub digest: Digest,
    /// As in `OwnState` (0 for a peer).
    pub deltas_sent: u64,
}

/// The live bookings and reservations one owner holds in this router's ledger (its own, for
/// snapshots and heartbeat digests; a peer's, to compare with that peer's digest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OwnState {
    pub bookings: Vec<(RequestId, Booking)>,
    pub reservations: Vec<(RequestId, LeasedReservation)>,
    /// Own deltas handed to the peer-sync queue before this state was read (0 for a peer's
    /// state). The peer-sync actor publishes a digest or snapshot of this state right after
    /// sequencing that many deltas, so it matches the sequence exactly.
    pub deltas_sent: u64,
}

pub struct RouterState {
    pub(super) router: PoolRouter,
    clock: Clock,
    waiting: HashMap<RequestId, Reply>,
    armed: Option<Timer>,
    room_out: Option<RoomPublisher>,
    published_epoch: Option<u64>,
    pub(super) paired: Option<Paired>,
    deltas: Option<mpsc::Sender<OwnDelta>>,
    deltas_sent: u64,
    inflight: Option<InflightRegistry>,
    /// Restored bookings whose rank is not known yet (a restarted actor learns its workers
    /// again from their next announcements); booked as soon as the worker is back.
    pending_restore: Vec<(RequestId, Booking)>,
    /// False while a starting node waits for its peers' bookings: `route` calls are held.
    admitting: bool,
    held: std::collections::VecDeque<(RouteRequest, Timestamp, Reply)>,
    pub(super) counters: RouterCounters,
    pub(super) peer_lag: LagRecorder,
    /// Decode pool in a replicated fleet: room credits (see `super::credits`).
    pub(super) credits: Option<super::credits::CreditsState>,
}

impl std::fmt::Debug for RouterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterState")
            .field("waiting", &self.waiting.len())
            .finish_non_exhaustive()
    }
}

impl RouterState {
    pub(super) fn new(
        router: PoolRouter,
        clock: Clock,
        room_out: Option<RoomPublisher>,
        paired: Option<Paired>,
        deltas: Option<mpsc::Sender<OwnDelta>>,
        inflight: Option<InflightRegistry>,
    ) -> Self {
        Self {
            router,
            clock,
            waiting: HashMap::new(),
            armed: None,
            room_out,
            published_epoch: None,
            paired,
            deltas,
            deltas_sent: 0,
            inflight,
            pending_restore: Vec::new(),
            admitting: true,
            held: std::collections::VecDeque::new(),
            counters: RouterCounters::default(),
            peer_lag: LagRecorder::default(),
            credits: None,
        }
    }

    pub(super) fn clock(&self) -> Clock {
        self.clock
    }

    pub(super) fn owner(&self) -> RouterId {
        self.router.scheduler().owner()
    }

    /// Books this router's own in-flight requests again after a restart; those on ranks not
    /// known yet wait for their worker's next announcement.
    pub(super) fn restore(&mut self, bookings: Vec<(RequestId, Booking)>) {
        let pending = self.router.restore(bookings, self.clock.now());
        self.pending_restore.extend(pending);
    }

    /// Applies the releases handles recorded in the in-flight registry (see its module doc):
    /// when the actor starts, and before each message.
    pub(super) fn apply_recorded_releases(&mut self) {
        let ended = match &self.inflight {
            Some(registry) => registry.take_ended(),
            None => return,
        };
        for id in ended {
            self.release(id);
        }
    }

    /// Releases own bookings whose lease ended (leaked: never released by their caller).
    fn expire_leases(&mut self, now: Timestamp) {
        let expired = self.router.expire_leases(now);
        for request in expired {
            tracing::warn!(%request, "a booking outlived its lease: released");
            self.counters.leases_expired += 1;
            self.emit(BookingDelta::Release { request });
        }
    }

    fn room(&self) -> Option<Arc<RoomSnapshot>> {
        self.paired.as_ref().map(|p| p.room.load())
    }

    pub(super) fn route(&mut self, request: RouteRequest, arrival: Timestamp, reply: Reply) {
        if !self.admitting {
            self.hold(request, arrival, reply);
            return;
        }
        let now = self.clock.now();
        let room = self.room();
        let view = room.as_deref().map(|r| r as &dyn DecodeRoomView);
        let outcome = self.router.route(request, arrival, now, view);
        self.settle(outcome, Some(reply));
    }

    /// Keeps a request until the node admits; past [`MAX_HELD`] the newest is refused.
    fn hold(&mut self, request: RouteRequest, arrival: Timestamp, reply: Reply) {
        if self.held.len() < MAX_HELD {
            self.held.push_back((request, arrival, reply));
            return;
        }
        self.counters.refused_not_ready += 1;
        let _ = reply.send(Err(RouteError::Rejected {
            class: request.class,
            reason: RejectReason::NotReady,
        }));
    }

    pub(super) fn set_admitting(&mut self, yes: bool) {
        self.admitting = yes;
        while self.admitting
            && let Some((request, arrival, reply)) = self.held.pop_front()
        {
            self.route(request, arrival, reply);
        }
    }

    /// Carries out one outcome: replies (or keeps the reply port while queued), publishes
    /// the booking, casts the decode reservation, and rolls back an admission nobody waits for.
    fn settle(&mut self, outcome: Outcome, port: Option<Reply>) {
        let request = outcome.request();
        let port = port.or_else(|| self.waiting.remove(&request));
        let answer = match outcome {
            Outcome::Queued { .. } => {
                if let Some(port) = port {
                    self.waiting.insert(request, port);
                }
                return;
            }
            Outcome::Admitted(admission) if port.as_ref().is_none_or(RpcReplyPort::is_closed) => {
                // Booked but nobody will proxy it: undo the booking and the reservation.
                self.router.cancel(request, self.clock.now());
                self.counters.rolled_back += 1;
                if let (Some(res), Some(paired)) = (admission.decode_reservation, &self.paired) {
                    let _ = paired.decode.unreserve(res.key.request);
                }
                return;
            }
            Outcome::Admitted(admission) => {
                let key = self.router.scheduler().key(request);
                if let Some(booking) = self.router.ledger().booking(&key).cloned() {
                    self.emit(BookingDelta::Book { request, booking });
                }
                if let (Some(res), Some(paired)) = (admission.decode_reservation, &self.paired)
                    && paired.decode.reserve(res).is_err()
                {
                    self.counters.reservations_lost += 1;
                }
                Ok(admission)
            }
            Outcome::Rejected {
                class,
                reason: RejectReason::UnknownClass,
                ..
            } => Err(RouteError::UnknownClass(class)),
            Outcome::Rejected { class, reason, .. } => Err(RouteError::Rejected { class, reason }),
        };
        if let Some(port) = port {
            let _ = port.send(answer);
        }
    }

    fn settle_all(&mut self, outcomes: Vec<Outcome>) {
        for outcome in outcomes {
            self.settle(outcome, None);
        }
    }

    /// Records an own change in the in-flight registry and queues it for peer sync.
    pub(super) fn emit(&mut self, delta: BookingDelta) {
        if let Some(registry) = &self.inflight {
            match &delta {
                BookingDelta::Book { request, booking } => {
                    registry.booked(*request, booking.clone())
                }
                BookingDelta::PrefillDone { request } => registry.prefill_done(*request),
                BookingDelta::Release { request } => registry.released(*request),
                BookingDelta::Reserve { .. } | BookingDelta::Unreserve { .. } => {}
            }
        }
        if let Some(tx) = &self.deltas {
            let index = self.deltas_sent + 1;
            match tx.try_send(OwnDelta { index, delta }) {
                Ok(()) => self.deltas_sent += 1,
                Err(_) => self.counters.dropped_deltas += 1,
            }
        }
    }

    /// Drops queued requests whose caller went away, then admits what the gates allow.
    pub(super) fn drain(&mut self) {
        let now = self.clock.now();
        let gone: Vec<RequestId> = self
            .waiting
            .iter()
            .filter(|(_, port)| port.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.waiting.remove(&id);
            self.router.cancel(id, now);
            self.counters.abandoned += 1;
        }
        let room = self.room();
        let view = room.as_deref().map(|r| r as &dyn DecodeRoomView);
        let outcomes = self.router.drain(now, view);
        self.settle_all(outcomes);
    }

    pub(super) fn tick(&mut self) {
        self.armed = None;
        self.credit_tick();
        let now = self.clock.now();
        self.expire_leases(now);
        let outcomes = self.router.expire(now);
        self.settle_all(outcomes);
        self.drain();
    }

    pub(super) fn prefill_done(&mut self, id: RequestId) {
        if self.router.prefill_done(id) {
            self.emit(BookingDelta::PrefillDone { request: id });
            self.drain();
        }
    }

    pub(super) fn release(&mut self, id: RequestId) {
        if let Some(at) = self.pending_restore.iter().position(|(r, _)| *r == id) {
            self.pending_restore.swap_remove(at);
            self.emit(BookingDelta::Release { request: id });
            return;
        }
        if self.router.release(id) {
            self.emit(BookingDelta::Release { request: id });
            self.drain();
        }
    }

    pub(super) fn cancel(&mut self, id: RequestId) {
        if let Some(port) = self.waiting.remove(&id) {
            drop(port);
            self.router.cancel(id, self.clock.now());
            self.counters.abandoned += 1;
            return;
        }
        let key = self.router.scheduler().key(id);
        let booked = self.router.ledger().booking(&key).is_some();
        if self.router.cancel(id, self.clock.now()) && booked {
            self.emit(BookingDelta::Release { request: id });
            self.drain();
        }
    }

    pub(super) fn upsert_worker(&mut self, spec: WorkerSpec) {
        let id = spec.id;
        if self.router.ledger().worker(id) == Some(&spec) {
            return; // a heartbeat: nothing changed
        }
        if let Err(error) = self.router.upsert_worker(spec) {
            self.counters.worker_errors += 1;
            tracing::warn!(worker = %id, %error, "worker announcement refused");
            return;
        }
        if let (Some(registry), Some(spec)) = (&self.inflight, self.router.ledger().worker(id)) {
            registry.worker_up(spec.clone());
        }
        if !self.pending_restore.is_empty() {
            let pending = std::mem::take(&mut self.pending_restore);
            self.restore(pending);
        }
        self.drain();
    }

    pub(super) fn remove_worker(&mut self, id: WorkerId) {
        if let Some(registry) = &self.inflight {
            registry.worker_down(id);
        }
        self.router.remove_worker(id);
        self.drain();
    }

    pub(super) fn snapshot(&self) -> RouterSnapshot {
        RouterSnapshot {
            role: self.router.scheduler().role(),
            scheduler: self.router.scheduler().snapshot(),
            waiting_replies: self.waiting.len() + self.held.len(),
            counters: RouterCounters {
                credit_messages_dropped: self.credits.as_ref().map_or(0, |c| c.dropped),
                ..self.counters.clone()
            },
            peer_lag_us: self.peer_lag.summary(),
            credits: self.credit_snapshot(),
        }
    }

    pub(super) fn own_state(&self) -> OwnState {
        OwnState {
            deltas_sent: self.deltas_sent,
            ..self.state_of(self.owner())
        }
    }

    /// The digest of what this ledger holds under `owner`, without copying it.
    pub(super) fn digest_of(&self, owner: RouterId) -> OwnerDigest {
        let ledger = self.router.ledger();
        OwnerDigest {
            digest: digest_from(
                ledger.keys_of(owner).map(|(k, b)| (k.request, b)),
                ledger
                    .reservations_of(owner)
                    .map(|(k, r)| (k.request, r.leased(self.clock.now()))),
            ),
            deltas_sent: if owner == self.owner() {
                self.deltas_sent
            } else {
                0
            },
        }
    }

    /// What this ledger holds under `owner`, sorted by request. Reservation leases are given
    /// as time left (the wire form), since every node keeps its own clock.
    pub(super) fn state_of(&self, owner: RouterId) -> OwnState {
        let held = self.router.holdings(owner, self.clock.now());
        OwnState {
            bookings: held.bookings,
            reservations: held.reservations,
            deltas_sent: 0,
        }
    }

    /// Hands the requests waiting on room to whoever can fetch credits for them: decode room
    /// to the paired decode pool's router, the pool's own prefill (and an aggregated pool's
    /// decode) room to this router's credit agent.
    fn send_wants(&mut self) {
        let wants = self.router.take_room_wants();
        if wants.is_empty() {
            return;
        }
        let (own, decode): (Vec<RoomWant>, Vec<RoomWant>) = match &self.paired {
            Some(_) => wants.into_iter().partition(|w| w.prefill_need.is_some()),
            None => (wants, Vec::new()),
        };
        if !decode.is_empty()
            && let Some(paired) = &self.paired
        {
            let _ = paired.decode.want_room(decode);
        }
        if !own.is_empty() {
            self.want_room(own);
        }
    }

    /// After every message: publish the decode room if the ledger moved, and keep exactly
    /// one timer armed for the earliest deadline.
    pub(super) fn after_change(&mut self, myself: &ActorRef<RouterMsg>) {
        if let Some(room) = self.room() {
            let now = self.clock.now();
            self.router.forget_applied_reservations(room.as_ref(), now);
        }
        // The gate's wants, and the credits they bring (a drain in between may leave new
        // wants: one more round).
        for _ in 0..2 {
            self.send_wants();
            self.credit_upkeep();
        }
        if let Some(out) = &self.room_out {
            let ledger = self.router.ledger();
            if self.published_epoch != Some(ledger.epoch()) {
                let classes = self.router.scheduler().profile().classes().len();
                out.publish(RoomSnapshot::capture(ledger, classes, &[self.owner()]));
                self.published_epoch = Some(ledger.epoch());
            }
        }
        let next = match (self.router.next_deadline(), self.credit_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (next, &self.armed) {
            (Some(at), Some((armed_at, _))) if *armed_at == at => {}
            (Some(at), _) => {
                self.disarm();
                let delay = self
                    .clock
                    .instant(at)
                    .saturating_duration_since(tokio::time::Instant::now());
                let handle = myself.send_after(delay, || RouterMsg::Tick);
                self.armed = Some((at, handle));
            }
            (None, Some(_)) => self.disarm(),
            (None, None) => {}
        }
    }

    pub(super) fn disarm(&mut self) {
        if let Some((_, handle)) = self.armed.take() {
            handle.abort();
        }
    }
}
