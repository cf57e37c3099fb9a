//! EngineLinkActor: one per real engine. Its phases:
//!
//! - **Waiting**: the engine does not answer `/health` (or has not yet): every poll asks
//!   again. Nothing is announced.
//! - **Serving**: the engine answered; its capacity was read from it and announced (a
//!   [`WorkerLink`](router_actors::worker_link::WorkerLink) heart-beating on the bus), its KV
//!   event subscriber runs and every poll relays its load. Three failed health checks in a row
//!   (refused, or an error status; fifteen that only time out) make the link leave the fleet (a `leaving` announcement: routers
//!   drop the worker, its bookings and its index entries at once) and go back to waiting;
//!   when the engine answers again it joins as a new incarnation (a new sender id), so
//!   routers start it with an empty cache, as the restarted engine is.
//!   An engine that prefills with no KV event batch reaching the link for `silent_after` is
//!   reported silent (`silence.rs`): its publisher is not where the link listens.
//! - **Refused**: the engine's block size is not the routers' (only known when the link runs
//!   inside a router node): announcing it would make every lookup miss. The error names both
//!   values; the link keeps polling, in case the engine is restarted with the right one.
//!
//! Files: `mod.rs` (config, args, messages, the actor, its handle and supervisor child),
//! `state.rs` (what each message does; its KV event path in `state/events.rs`), `observe.rs`
//! (phase, counters, snapshot),
//! `silence.rs` (whether a publishing engine is heard).

mod observe;
mod silence;
mod state;

pub use observe::{EngineLinkSnapshot, LinkCounters, LinkPhase};
pub use silence::{EventsHeard, SilenceChange, SilenceWatch};
pub use state::{LinkState, Probed};

use crate::load::EngineKind;
use crate::zmq::SubscriberSide;
use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use router_actors::bus::Bus;
use router_actors::supervisor::{
    ActorSlot, CallError, ChildSpec, DEFAULT_CALL_TIMEOUT, linked_child,
};
use router_actors::wire::Subjects;
use router_core::{PoolRole, WorkerId};
use std::sync::Arc;
use std::time::Duration;

/// One engine and how to follow it.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineLinkConfig {
    pub kind: EngineKind,
    /// The engine's OpenAI base URL (`http://host:port`): announced as the worker's endpoint.
    pub url: String,
    /// The engine's KV event publisher (`tcp://host:5557`); `None`: the engine publishes no
    /// events (its pool's routers must run the approximate index).
    pub kv_events: Option<String>,
    /// Whether the link connects to `kv_events` (the engine binds it) or binds it (the
    /// engine connects).
    pub kv_events_side: SubscriberSide,
    /// An engine that prefills a few blocks' worth with no KV event batch for this long is
    /// reported silent (a warning, `/debug/state`, a metric).
    pub silent_after: Duration,
    /// The engine's replay service (`tcp://host:5558`), used to fill a lost batch.
    pub replay: Option<String>,
    /// The publisher's topic.
    pub topic: String,
    pub pool: PoolRole,
    pub worker: WorkerId,
    /// The routers' block size when known (inside a router node): a different engine block
    /// size is refused.
    pub expected_block_size: Option<u32>,
    /// The engine's token budget per step, when the operator gives it (engines do not report
    /// it): used for the prefill busy fraction.
    pub max_num_batched_tokens: Option<u64>,
    /// LoRA adapters the engine serves.
    pub loras: Vec<String>,
    /// How often the engine is probed (health, load) and the worker announced.
    pub poll_every: Duration,
    /// Failed health checks in a row (refused, or an error status) before the engine leaves
    /// the fleet; checks that only time out count a fifth each (a busy engine answers late).
    pub down_after: u32,
    /// Routers drop the worker after this long without an announcement.
    pub lease: Duration,
    /// Bound on each HTTP probe.
    pub probe_timeout: Duration,
    /// Bound on a replay request.
    pub replay_timeout: Duration,
}

impl EngineLinkConfig {
    /// A link to a `kind` engine at `url` with the defaults: a 1 s poll, out after 3 missed
    /// health checks in a row, a 5 s lease, 2 s probes (a busy engine answers slowly), 2 s
    /// replays, topic `kv-events`, connecting to the publisher, silent after 30 s, worker id
    /// from the URL.
    pub fn new(kind: EngineKind, url: impl Into<String>, pool: PoolRole) -> Self {
        let url = url.into().trim_end_matches('/').to_owned();
        Self {
            kind,
            worker: worker_id_for(&url),
            url,
            kv_events: None,
            kv_events_side: SubscriberSide::Connect,
            silent_after: Duration::from_secs(30),
            replay: None,
            topic: "kv-events".to_owned(),
            pool,
            expected_block_size: None,
            max_num_batched_tokens: None,
            loras: Vec::new(),
            poll_every: Duration::from_secs(1),
            down_after: 3,
            lease: Duration::from_secs(5),
            probe_timeout: Duration::from_secs(2),
            replay_timeout: Duration::from_secs(2),
        }
    }
}

/// Whether `value` is `<scheme>://<something>` for one of `schemes` (`http`, `tcp`, ...): the
/// shape of an engine's URL and of its ZMQ endpoints.
pub fn has_scheme(value: &str, schemes: &[&str]) -> bool {
    schemes.iter().any(|s| {
        value
            .strip_prefix(s)
            .and_then(|rest| rest.strip_prefix("://"))
            .is_some_and(|rest| !rest.is_empty())
    })
}

/// A worker id that every router and every link derive alike from the engine's URL, so a
/// sidecar restarted or run twice names the same worker.
pub fn worker_id_for(url: &str) -> WorkerId {
    WorkerId(xxhash_rust::xxh3::xxh3_64(url.as_bytes()) >> 1)
}

#[derive(Clone)]
pub struct EngineLinkArgs {
    pub bus: Arc<dyn Bus>,
    pub subjects: Subjects,
    pub config: EngineLinkConfig,
}

impl std::fmt::Debug for EngineLinkArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineLinkArgs")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub enum LinkMsg {
    /// Probe the engine (health, then capacity or load), off the mailbox.
    Poll,
    /// What the probe found.
    Probed(Probed),
    /// One message of the engine's KV event publisher.
    Frames {
        seq: u64,
        payload: Bytes,
    },
    /// A publisher message that is not `[topic, seq, payload]`.
    Malformed,
    /// The event subscriber's socket failed (it retries).
    SubscriberFailed(String),
    Observe(RpcReplyPort<EngineLinkSnapshot>),
}

impl crate::zmq::FrameSink for ActorRef<LinkMsg> {
    fn frames(&self, seq: u64, payload: Bytes) -> bool {
        self.cast(LinkMsg::Frames { seq, payload }).is_ok()
    }
    fn malformed(&self) -> bool {
        self.cast(LinkMsg::Malformed).is_ok()
    }
    fn failed(&self, error: crate::zmq::ZmqError) -> bool {
        self.cast(LinkMsg::SubscriberFailed(error.to_string()))
            .is_ok()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct EngineLinkActor;

impl Actor for EngineLinkActor {
    type Msg = LinkMsg;
    type State = LinkState;
    type Arguments = EngineLinkArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LinkMsg>,
        args: EngineLinkArgs,
    ) -> Result<LinkState, ActorProcessingErr> {
        let state = LinkState::new(args)?;
        // The first poll at once, then one per period (the timer stops with the actor).
        myself.cast(LinkMsg::Poll)?;
        myself.send_interval(state.config().poll_every, || LinkMsg::Poll);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<LinkMsg>,
        msg: LinkMsg,
        state: &mut LinkState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LinkMsg::Poll => state.poll(&myself),
            LinkMsg::Probed(outcome) => state.probed(outcome, &myself).await,
            LinkMsg::Frames { seq, payload } => state.frames(seq, payload).await,
            LinkMsg::Malformed => state.malformed(),
            LinkMsg::SubscriberFailed(error) => state.subscriber_failed(error),
            LinkMsg::Observe(reply) => {
                let _ = reply.send(state.snapshot());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<LinkMsg>,
        state: &mut LinkState,
    ) -> Result<(), ActorProcessingErr> {
        state.leave().await;
        Ok(())
    }
}

/// The typed handle of an EngineLinkActor; it follows the actor in its slot across restarts.
#[derive(Debug, Clone)]
pub struct EngineLinkHandle {
    slot: ActorSlot<LinkMsg>,
    call_timeout: Duration,
}

impl EngineLinkHandle {
    pub fn from_slot(slot: ActorSlot<LinkMsg>) -> Self {
        Self {
            slot,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// The same handle, waiting at most `timeout` for `observe`.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Spawns the actor unsupervised and returns its handle.
    pub async fn spawn(
        args: EngineLinkArgs,
    ) -> Result<(Self, ractor::concurrency::JoinHandle<()>), ractor::SpawnErr> {
        let (actor, join) = Actor::spawn(None, EngineLinkActor, args).await?;
        Ok((Self::from_slot(ActorSlot::new(actor)), join))
    }

    /// The current actor (none between a failure and its restart).
    pub fn actor(&self) -> Option<ActorRef<LinkMsg>> {
        self.slot.get()
    }

    pub async fn observe(&self) -> Result<EngineLinkSnapshot, CallError> {
        self.slot.call(LinkMsg::Observe, self.call_timeout).await
    }

    /// Stops the actor; it leaves the fleet on its way out. Resolves when it has stopped.
    pub async fn stop(&self) {
        if let Some(actor) = self.slot.get() {
            let _ = actor
                .stop_and_wait(Some("stopped".to_owned()), Some(Duration::from_secs(5)))
                .await;
        }
    }
}

/// A supervisor child that (re)starts an EngineLinkActor linked to the supervisor and points
/// `slot` at it. A restarted link joins as a new incarnation of the engine's worker.
pub fn engine_link_child(
    name: impl Into<String>,
    args: EngineLinkArgs,
    slot: ActorSlot<LinkMsg>,
) -> ChildSpec {
    linked_child(name, EngineLinkActor, args, slot)
}
