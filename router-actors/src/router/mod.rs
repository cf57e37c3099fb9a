//! RouterActor: one per pool (aggregated, prefill or decode). It owns the pool's
//! `PoolRouter` (prefix index + scheduler) and carries out what router-core decides: it
//! answers `route` when the request is admitted or rejected (even after waiting in the
//! queue), drains whenever capacity may have grown, arms one timer for the earliest deadline,
//! publishes its own booking deltas for peer sync, applies peers' deltas, and, in a decode
//! pool, publishes its room for the node's prefill actor.
//!
//! Files: `mod.rs` (messages, args, the actor), `state.rs` (handlers' shared work),
//! `handle.rs` (the typed handle), `peer.rs` (applying peers' deltas).

mod credits;
mod handle;
mod peer;
mod state;

#[cfg(test)]
mod tests;

pub use credits::{CreditsArgs, SharedAgent};
pub use handle::{ActorGone, RouteError, RouterHandle};
pub use state::{OwnState, OwnerDigest, RouterCounters, RouterSnapshot};

use crate::clock::Clock;
use crate::room_view::{RoomPublisher, RoomReader};
use crate::supervisor::InflightRegistry;
use crate::wire::BookingDelta;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use router_core::{
    Admission, DecodeReservation, Holdings, PolicyProfile, PoolRouter, PoolRouterConfig, RequestId,
    RoomWant, RouteRequest, RouterId, SharedKvIndex, Timestamp, WorkerId, WorkerSpec,
};
use state::RouterState;
use std::time::Duration;
use tokio::sync::mpsc;

/// The paired decode pool of a prefill actor: its published room and the actor that takes
/// reservations.
#[derive(Debug, Clone)]
pub struct Paired {
    pub room: RoomReader,
    pub decode: RouterHandle,
}

#[derive(Clone)]
pub struct RouterArgs {
    pub config: PoolRouterConfig,
    pub profile: PolicyProfile,
    pub clock: Clock,
    /// Decode pool: where its room is published.
    pub room_out: Option<RoomPublisher>,
    /// Prefill pool: the paired decode pool.
    pub paired: Option<Paired>,
    /// Own booking deltas, for the peer-sync actor. Bounded: when full, deltas are dropped
    /// and counted (peers then see a digest drift and ask for a snapshot).
    pub deltas: Option<mpsc::Sender<OwnDelta>>,
    /// A slow periodic drain that guards against a lost room hint.
    pub recheck_every: Duration,
    /// The node's registry of this router's own live bookings: kept up to date by the
    /// actor, read back when a restarted actor starts (its bookings are restored, not leaked).
    pub inflight: Option<InflightRegistry>,
    /// Hold `route` calls until this says true (a starting node waits for its peers'
    /// bookings before it admits). `None`: admit at once.
    pub admit_when: Option<tokio::sync::watch::Receiver<bool>>,
    /// Events mode: the pool's prefix index, shared with the node's KvEventsActor (which
    /// applies the events) and kept across restarts of this actor. `None`: an index of its
    /// own that nothing else writes (tests that feed no KV events).
    pub kv_index: Option<SharedKvIndex>,
    /// Decode pool in a replicated fleet: take part in room credits, so replicas admit
    /// against the pool's decode room as one gate. `None`: this router's view alone.
    pub credits: Option<CreditsArgs>,
}

impl RouterArgs {
    /// A router alone: no room publisher, no paired pool, no peer sync, no periodic recheck,
    /// no in-flight registry, admitting at once, with an index of its own. Set what differs.
    pub fn new(config: PoolRouterConfig, profile: PolicyProfile, clock: Clock) -> Self {
        Self {
            config,
            profile,
            clock,
            room_out: None,
            paired: None,
            deltas: None,
            recheck_every: Duration::ZERO,
            inflight: None,
            admit_when: None,
            kv_index: None,
            credits: None,
        }
    }
}

impl std::fmt::Debug for RouterArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterArgs")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One of this router's own deltas with its index: how many deltas had been handed to the
/// peer-sync queue, this one included. `OwnState::deltas_sent` counts the same way, so the
/// peer-sync actor knows exactly which deltas a state read reflects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnDelta {
    pub index: u64,
    pub delta: BookingDelta,
}

#[derive(Debug)]
pub enum RouterMsg {
    /// Admit, queue or reject; the reply comes when the request is admitted or rejected.
    /// `arrival` is stamped by the handle (the class deadline counts from it).
    Route {
        request: RouteRequest,
        arrival: Timestamp,
        reply: RpcReplyPort<Result<Admission, RouteError>>,
    },
    PrefillDone(RequestId),
    Release(RequestId),
    /// The caller went away: a queued request leaves the queue, a booked one is released.
    Cancel(RequestId),
    UpsertWorker(WorkerSpec),
    RemoveWorker(WorkerId),
    /// A worker's engine reports its LoRA adapter slots (a placement hint).
    SetAdapters(WorkerId, router_core::AdapterResidency),
    /// Decode pool: hold room for a request admitted by the node's prefill pool.
    Reserve(DecodeReservation),
    /// Decode pool: the prefill leg failed or was cancelled; give the room back.
    Unreserve(RequestId),
    /// A peer router's delta, applied under its owner id. `sent_at_us` is its envelope's
    /// publication time (sender's wall clock): the lag to its application is recorded.
    Peer {
        owner: RouterId,
        delta: BookingDelta,
        sent_at_us: Option<u64>,
    },
    /// A peer's full state (snapshot repair): replaces everything held under its id.
    PeerReplace {
        owner: RouterId,
        state: Holdings,
    },
    /// A peer stopped heart-beating: drop everything it held.
    PeerGone(RouterId),
    /// Prefill pool: decode room may have grown.
    RoomChanged,
    /// Decode pool: requests wait at the node's prefill gate for decode room (fetch room
    /// credits for them).
    WantRoom(Vec<RoomWant>),
    /// Decode pool: a peer's room-credit message for this router.
    Credit {
        from: RouterId,
        msg: router_core::credits::CreditMsg,
    },
    /// Decode pool: the pool's live peer routers are now these.
    Peers(Vec<RouterId>),
    /// The node may (or may no longer) admit: held requests are routed when it turns true.
    Admitting(bool),
    /// Deadline timer or periodic recheck.
    Tick,
    Observe(RpcReplyPort<RouterSnapshot>),
    /// This router's own live bookings and reservations (snapshots, digests).
    OwnState(RpcReplyPort<OwnState>),
    /// What the ledger holds under one owner (a peer's, to check its heartbeat digest).
    StateOf {
        owner: RouterId,
        reply: RpcReplyPort<OwnState>,
    },
    /// The digest of what the ledger holds under one owner (heartbeats, and checking them).
    DigestOf {
        owner: RouterId,
        reply: RpcReplyPort<OwnerDigest>,
    },
    /// Fault injection for supervision tests: the handler fails. Test builds only.
    #[cfg(feature = "testsuite")]
    InjectFault(String),
}

#[derive(Debug, Clone, Copy)]
pub struct RouterActor;

impl Actor for RouterActor {
    type Msg = RouterMsg;
    type State = RouterState;
    type Arguments = RouterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RouterMsg>,
        args: RouterArgs,
    ) -> Result<RouterState, ActorProcessingErr> {
        let router = match args.kv_index {
            Some(index) => PoolRouter::with_index(args.config, args.profile, index),
            None => PoolRouter::new(args.config, args.profile),
        };
        let restore = args
            .inflight
            .as_ref()
            .map(InflightRegistry::snapshot)
            .unwrap_or_default();
        let workers = args
            .inflight
            .as_ref()
            .map(InflightRegistry::workers)
            .unwrap_or_default();
        let mut state = RouterState::new(
            router,
            args.clock,
            args.room_out,
            args.paired,
            args.deltas,
            args.inflight,
        );
        for spec in workers {
            state.upsert_worker(spec);
        }
        if let Some(credits) = &args.credits {
            state.start_credits(credits);
            spawn_peers_listener(myself.clone(), credits.peers.clone());
        }
        state.restore(restore);
        state.apply_recorded_releases();
        if !args.recheck_every.is_zero() {
            myself.send_interval(args.recheck_every, || RouterMsg::Tick);
        }
        if let Some(paired) = &state.paired {
            spawn_room_listener(myself.clone(), paired.room.signals());
        }
        if let Some(gate) = args.admit_when {
            state.set_admitting(*gate.borrow());
            spawn_admission_listener(myself.clone(), gate);
        }
        state.after_change(&myself);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<RouterMsg>,
        msg: RouterMsg,
        state: &mut RouterState,
    ) -> Result<(), ActorProcessingErr> {
        // Releases recorded by handles first (one sent while this actor was starting).
        state.apply_recorded_releases();
        match msg {
            RouterMsg::Route {
                request,
                arrival,
                reply,
            } => state.route(request, arrival, reply),
            RouterMsg::PrefillDone(id) => state.prefill_done(id),
            RouterMsg::Release(id) => state.release(id),
            RouterMsg::Cancel(id) => state.cancel(id),
            RouterMsg::UpsertWorker(spec) => state.upsert_worker(spec),
            RouterMsg::RemoveWorker(id) => state.remove_worker(id),
            RouterMsg::SetAdapters(id, adapters) => state.router.set_adapters(id, adapters),
            RouterMsg::Reserve(res) => state.reserve(res),
            RouterMsg::Unreserve(id) => state.unreserve(id),
            RouterMsg::Peer {
                owner,
                delta,
                sent_at_us,
            } => {
                state.apply_peer(owner, delta);
                if let Some(sent_at_us) = sent_at_us {
                    state.peer_lag.record(sent_at_us, crate::wire::now_us());
                }
            }
            RouterMsg::PeerReplace { owner, state: held } => state.replace_peer(owner, held),
            RouterMsg::PeerGone(owner) => state.peer_gone(owner),
            RouterMsg::RoomChanged => state.drain(),
            RouterMsg::WantRoom(wants) => state.want_room(wants),
            RouterMsg::Credit { from, msg } => state.credit_message(from, msg),
            RouterMsg::Peers(peers) => state.credit_peers(peers),
            RouterMsg::Admitting(yes) => state.set_admitting(yes),
            RouterMsg::Tick => state.tick(),
            RouterMsg::Observe(reply) => {
                let _ = reply.send(state.snapshot());
            }
            RouterMsg::OwnState(reply) => {
                let _ = reply.send(state.own_state());
            }
            RouterMsg::StateOf { owner, reply } => {
                let _ = reply.send(state.state_of(owner));
            }
            RouterMsg::DigestOf { owner, reply } => {
                let _ = reply.send(state.digest_of(owner));
            }
            #[cfg(feature = "testsuite")]
            RouterMsg::InjectFault(why) => return Err(why.into()),
        }
        state.after_change(&myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<RouterMsg>,
        state: &mut RouterState,
    ) -> Result<(), ActorProcessingErr> {
        state.disarm();
        Ok(())
    }
}

/// Forwards the node's readiness to admit. Ends when either side goes away.
fn spawn_admission_listener(
    actor: ActorRef<RouterMsg>,
    mut gate: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        while gate.changed().await.is_ok() {
            let yes = *gate.borrow_and_update();
            if actor.cast(RouterMsg::Admitting(yes)).is_err() {
                break;
            }
        }
    });
}

/// Forwards the pool's live peers (from peer sync) as `Peers`. Ends when either side goes
/// away.
fn spawn_peers_listener(
    actor: ActorRef<RouterMsg>,
    mut peers: tokio::sync::watch::Receiver<Vec<RouterId>>,
) {
    tokio::spawn(async move {
        while peers.changed().await.is_ok() {
            let now = peers.borrow_and_update().clone();
            if actor.cast(RouterMsg::Peers(now)).is_err() {
                break;
            }
        }
    });
}

/// Forwards the decode pool's room signal to the prefill actor as `RoomChanged`. Ends when
/// either side goes away.
fn spawn_room_listener(actor: ActorRef<RouterMsg>, mut signals: tokio::sync::watch::Receiver<u64>) {
    tokio::spawn(async move {
        while signals.changed().await.is_ok() {
            if actor.cast(RouterMsg::RoomChanged).is_err() {
                break;
            }
        }
    });
}

/// A supervisor child that (re)starts a RouterActor from `args` and points `slot` at it. On a
/// restart the actor books this router's in-flight requests again from `args.inflight`.
pub fn router_child(
    name: impl Into<String>,
    args: RouterArgs,
    slot: crate::supervisor::ActorSlot<RouterMsg>,
) -> crate::supervisor::ChildSpec {
    crate::supervisor::linked_child(name, RouterActor, args, slot)
}
