//! PeerSyncActor: one per pool per node. It keeps every router replica's ledger holding the
//! same bookings: it publishes this router's own booking deltas (sequenced per sender) and a
//! periodic heartbeat with a digest on `router.<pool>.bookings`, applies peers' deltas to the
//! local RouterActor, repairs by snapshot whatever it finds missing (a sequence gap, a first
//! message that is not the sender's first, or a digest that keeps disagreeing), serves its
//! own snapshot on `router.<pool>.snapshot`, and expires a peer silent for its lease.
//!
//! Exactness: a heartbeat digest, and a snapshot, are taken from the RouterActor's own
//! state together with the count of own deltas it had handed over by then (each delta
//! carries its index in that count); this actor publishes them right after sequencing the
//! delta of that index (own deltas go out batched, `Deltas` messages of what is queued, and a
//! batch is cut there), so a digest or snapshot at sequence `n` reflects exactly the
//! messages before `n`. A receiver that applied every message up to
//! `n` holds exactly that digest; a mismatch means something was lost (a delta dropped
//! before it was sequenced, a lost message), never a race.
//!
//! Overlap is harmless: every ledger operation a delta carries is idempotent per request
//! (book-if-absent, prefill-done, release, reserve-if-absent, unreserve), and request ids are
//! never reused, so replaying a suffix of a sender's deltas on top of a snapshot that already
//! reflects some of them ends in the same state. The deltas buffered during a repair rely on
//! this. The starting snapshot (sequence 1) reflects the own deltas handed over before it was
//! read; those still queued are skipped, so what follows it is exactly the later ones.
//!
//! Backpressure and bounds: bus messages and own deltas reach the actor through forwarding
//! tasks that wait for each message to be handled, so backlog stays in the bus subscription
//! (bounded; overflow counted by the bus) and in the router's delta queue (bounded; overflow
//! counted by the router as `dropped_deltas`, then seen here as digest drift and repaired).
//! Repair buffers and deferred heartbeats are capped; overflow is counted in `dropped`.
//!
//! Restarts: the node supervises this actor like every other child ([`peer_sync_child`]). A
//! new incarnation takes over the router's delta queue ([`DeltaFeed`]), starts its sequence
//! again at 1 with its full state (peers replace what they held under its id) and asks every
//! peer for theirs (its fresh tracker also repairs from each peer's next message).
//!
//! Files: `mod.rs` (args, messages, the actor, the handle, the supervisor child), `feed.rs`
//! (the own-delta queue shared across restarts), `state.rs` (publishing, timers, expiry,
//! serving snapshots), `inbound.rs` (receiving, sequence tracking, repair), `observe.rs`
//! (counters and the serialisable snapshot).

mod feed;
mod inbound;
mod membership;
mod observe;
mod state;

#[cfg(test)]
mod tests;

pub use feed::DeltaFeed;
pub use observe::{DecodeErrors, PeerSyncCounters, PeerSyncSnapshot, PeerView};

use crate::bus::{Bus, BusMessage};
use crate::router::{OwnDelta, RouterHandle};
use crate::supervisor::{
    ActorSlot, CallError, ChildSpec, DEFAULT_CALL_TIMEOUT, OwnedTasks, linked_child,
};
use crate::wire::{SnapshotReply, Subjects};
use futures::StreamExt;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr};
use router_core::{PoolRole, RouterId};
use state::PeerSyncState;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Own deltas forwarded to the actor in one message, at most.
const DELTA_BATCH: usize = 256;
/// Own deltas published in one `Deltas` bus message, at most (a few kB of msgpack).
const MAX_DELTAS_PER_MESSAGE: usize = 64;
/// How long a starting incarnation waits for the previous one's task to let go of the queue.
const FEED_TAKEOVER: Duration = Duration::from_secs(1);

/// Timing and bounds of peer sync.
#[derive(Debug, Clone)]
pub struct PeerSyncConfig {
    /// How often a heartbeat (with digest) is published and silent peers are swept.
    pub heartbeat_every: Duration,
    /// A peer silent this long is expired. Sent in heartbeats; peers use the sender's value.
    pub lease: Duration,
    /// How long a starting router waits for peers' snapshots before it reports ready.
    pub snapshot_window: Duration,
    /// How long a repair waits for the owner's snapshot reply.
    pub snapshot_timeout: Duration,
    /// Consecutive mismatching heartbeat digests that trigger a snapshot repair.
    pub mismatch_threshold: u32,
    /// Messages buffered per peer while its snapshot is on the way.
    pub repair_buffer: usize,
    /// Heartbeats / snapshot answers waiting for their deltas to be sequenced.
    pub max_deferred: usize,
}

impl Default for PeerSyncConfig {
    fn default() -> Self {
        Self {
            heartbeat_every: Duration::from_millis(500),
            lease: Duration::from_secs(3),
            snapshot_window: Duration::from_secs(1),
            snapshot_timeout: Duration::from_secs(1),
            mismatch_threshold: 2,
            repair_buffer: 4096,
            max_deferred: 64,
        }
    }
}

#[derive(Clone)]
pub struct PeerSyncArgs {
    pub bus: Arc<dyn Bus>,
    pub subjects: Subjects,
    pub pool: PoolRole,
    /// This router's id: the owner of its bookings and the sender of its envelopes.
    pub me: RouterId,
    pub router: RouterHandle,
    /// The RouterActor's own deltas (`RouterArgs::deltas`'s other end), shared by restarts.
    pub deltas: DeltaFeed,
    pub config: PeerSyncConfig,
    /// Set to true once the starting snapshot window has passed.
    pub ready: watch::Sender<bool>,
    /// The live peers (router ids, sorted), for the router's room credits.
    pub peers: watch::Sender<Vec<RouterId>>,
}

impl PeerSyncArgs {
    /// Arguments with the default config, and the readiness receiver (for `/ready`).
    pub fn new(
        bus: Arc<dyn Bus>,
        subjects: Subjects,
        pool: PoolRole,
        me: RouterId,
        router: RouterHandle,
        deltas: mpsc::Receiver<OwnDelta>,
    ) -> (Self, watch::Receiver<bool>) {
        let (ready, ready_rx) = watch::channel(false);
        let args = Self {
            bus,
            subjects,
            pool,
            me,
            router,
            deltas: DeltaFeed::new(deltas),
            config: PeerSyncConfig::default(),
            ready,
            peers: watch::channel(Vec::new()).0,
        };
        (args, ready_rx)
    }
}

impl std::fmt::Debug for PeerSyncArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerSyncArgs")
            .field("pool", &self.pool)
            .field("me", &self.me)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub enum PeerSyncMsg {
    /// Own deltas from the router, in order; the reply paces the forwarder.
    OwnDeltas(Vec<OwnDelta>, RpcReplyPort<()>),
    /// A raw message from the bookings subject.
    Bookings(BusMessage, RpcReplyPort<()>),
    /// A raw message from the snapshot subject.
    SnapshotAsk(BusMessage, RpcReplyPort<()>),
    /// A targeted repair's answer (or why there was none).
    Repaired {
        owner: RouterId,
        generation: u64,
        result: Result<SnapshotReply, String>,
    },
    /// Heartbeat and expiry sweep.
    Tick,
    /// The starting snapshot window has passed: report ready.
    WindowElapsed,
    Observe(RpcReplyPort<PeerSyncSnapshot>),
    /// The node is stopping: tell peers, so they drop this router's bookings at once.
    Goodbye(RpcReplyPort<()>),
    /// Fault injection for supervision tests: the handler fails. Test builds only.
    #[cfg(feature = "testsuite")]
    InjectFault(String),
}

#[derive(Debug, Clone, Copy)]
pub struct PeerSyncActor;

impl PeerSyncActor {
    /// Spawns the actor and returns its handle.
    pub async fn start(
        name: Option<String>,
        args: PeerSyncArgs,
    ) -> Result<(PeerSyncHandle, tokio::task::JoinHandle<()>), SpawnErr> {
        let ready = args.ready.subscribe();
        let (actor, join) = Actor::spawn(name, PeerSyncActor, args).await?;
        Ok((
            PeerSyncHandle::from_slot(ActorSlot::new(actor), ready),
            join,
        ))
    }
}

impl Actor for PeerSyncActor {
    type Msg = PeerSyncMsg;
    type State = PeerSyncState;
    type Arguments = PeerSyncArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<PeerSyncMsg>,
        args: PeerSyncArgs,
    ) -> Result<PeerSyncState, ActorProcessingErr> {
        let bookings = args
            .bus
            .subscribe(args.subjects.bookings(args.pool))
            .await?;
        let asks = args
            .bus
            .subscribe(args.subjects.snapshot(args.pool))
            .await?;
        let every = args.config.heartbeat_every;
        let window = args.config.snapshot_window;
        let mut deltas = args
            .deltas
            .take(FEED_TAKEOVER)
            .await
            .ok_or("the router's delta queue is still held by a previous peer sync")?;
        let mut state = PeerSyncState::new(args, myself.clone());
        // Before any forwarded message: our sequence 1 is our full state (a restart tells
        // peers to replace what they held); the deltas it reflects are not sent again. Then
        // ask every peer for theirs.
        if let Some(reflected) = state.announce().await {
            deltas.skip_through(reflected);
            state.sequenced_through(reflected);
        }
        state.ask_everyone().await;
        state.tasks = OwnedTasks::new(vec![
            forward(bookings, myself.clone(), PeerSyncMsg::Bookings),
            forward(asks, myself.clone(), PeerSyncMsg::SnapshotAsk),
            feed::forward_deltas(deltas, myself.clone()),
        ]);
        if !every.is_zero() {
            myself.send_interval(every, || PeerSyncMsg::Tick);
        }
        myself.send_after(window, || PeerSyncMsg::WindowElapsed);
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<PeerSyncMsg>,
        msg: PeerSyncMsg,
        state: &mut PeerSyncState,
    ) -> Result<(), ActorProcessingErr> {
        state.running(tokio::time::Instant::now());
        match msg {
            PeerSyncMsg::OwnDeltas(batch, done) => {
                state.own_deltas(batch).await;
                let _ = done.send(());
            }
            PeerSyncMsg::Bookings(message, done) => {
                state.inbound(&message).await;
                let _ = done.send(());
            }
            PeerSyncMsg::SnapshotAsk(message, done) => {
                state.snapshot_ask(message).await;
                let _ = done.send(());
            }
            PeerSyncMsg::Repaired {
                owner,
                generation,
                result,
            } => state.repaired(owner, generation, result),
            PeerSyncMsg::Tick => state.tick().await,
            PeerSyncMsg::WindowElapsed => state.set_ready(),
            PeerSyncMsg::Observe(reply) => {
                let _ = reply.send(state.observe());
            }
            PeerSyncMsg::Goodbye(reply) => {
                state.goodbye().await;
                let _ = reply.send(());
            }
            #[cfg(feature = "testsuite")]
            PeerSyncMsg::InjectFault(why) => return Err(why.into()),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<PeerSyncMsg>,
        state: &mut PeerSyncState,
    ) -> Result<(), ActorProcessingErr> {
        state.tasks.abort_all();
        Ok(())
    }
}

/// Feeds a bus subscription to the actor one message at a time; ends with either side.
fn forward(
    mut subscription: crate::bus::Subscription,
    actor: ActorRef<PeerSyncMsg>,
    wrap: fn(BusMessage, RpcReplyPort<()>) -> PeerSyncMsg,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            match actor.call(|done| wrap(message, done), None).await {
                Ok(CallResult::Success(())) => {}
                _ => break,
            }
        }
    })
}

/// The typed handle: observe, readiness, stop. It follows the actor in its slot across
/// restarts.
#[derive(Debug, Clone)]
pub struct PeerSyncHandle {
    slot: ActorSlot<PeerSyncMsg>,
    ready: watch::Receiver<bool>,
    call_timeout: Duration,
}

impl PeerSyncHandle {
    /// A handle on the actor in `slot`; `ready` is its readiness (`PeerSyncArgs::ready`).
    pub fn from_slot(slot: ActorSlot<PeerSyncMsg>, ready: watch::Receiver<bool>) -> Self {
        Self {
            slot,
            ready,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// The same handle, waiting at most `timeout` for `observe`.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The current actor (none between a failure and its restart).
    pub fn actor(&self) -> Option<ActorRef<PeerSyncMsg>> {
        self.slot.get()
    }

    pub fn slot(&self) -> &ActorSlot<PeerSyncMsg> {
        &self.slot
    }

    /// Becomes true once the starting snapshot window has passed (for `/ready`).
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.clone()
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    pub async fn observe(&self) -> Result<PeerSyncSnapshot, CallError> {
        self.slot
            .call(PeerSyncMsg::Observe, self.call_timeout)
            .await
    }

    /// Says goodbye to peers (the node is stopping): they drop this router's bookings and
    /// room credits at once rather than at the end of its lease.
    pub async fn goodbye(&self) -> Result<(), CallError> {
        self.slot
            .call(PeerSyncMsg::Goodbye, self.call_timeout)
            .await
    }

    /// Stops the current actor (under a supervisor: it is restarted like a failed one).
    pub fn stop(&self) {
        if let Some(actor) = self.slot.get() {
            actor.stop(None);
        }
    }

    /// Casts `msg` to the current actor; `false` if there is none.
    pub fn cast(&self, msg: PeerSyncMsg) -> bool {
        self.slot.cast(msg)
    }
}

/// A supervisor child that (re)starts a PeerSyncActor linked to the supervisor from `args`
/// and points `slot` at it. Every incarnation takes over the same delta queue (`args.deltas`).
pub fn peer_sync_child(
    name: impl Into<String>,
    args: PeerSyncArgs,
    slot: ActorSlot<PeerSyncMsg>,
) -> ChildSpec {
    linked_child(name, PeerSyncActor, args, slot)
}
