//! One router node: the actor tree for an aggregated or a disaggregated fleet, on any bus.
//!
//! ```text
//! NodeSupervisor
//!  ├─ RouterActor(pool)        one per pool; restarted with its in-flight bookings
//!  ├─ PeerSyncActor(pool)      own deltas out, peers' in; restarted on the same delta queue
//!  ├─ KvEventsActor(pool)      workers' KV events into the pool's shared index
//!  └─ WorkerRegistryActor      announcements and leases for every pool
//! + room tasks (disaggregated): the decode pool's RoomChanged out on the bus, other nodes'
//!   RoomChanged into the prefill actor
//! ```
//!
//! Every child is a [`ChildSpec`](crate::supervisor::ChildSpec) made by
//! [`linked_child`](crate::supervisor::linked_child): it spawns its actor linked to the
//! supervisor from arguments it clones for every start, and points the child's
//! [`ActorSlot`] at it; the node keeps only slot-backed handles, so every handle follows a
//! restart. A child that fails too often makes the supervisor escalate: it stops, and
//! [`Node::alive`] turns to `Failed` (`/health` fails; the process supervisor — e.g.
//! Kubernetes — restarts the process, and peers expire its bookings after its lease). So
//! does a child gone and not restarted within `liveness_grace`, or a room or credit courier
//! task that ended (`liveness.rs`).

use crate::bus::Bus;
use crate::clock::Clock;
use crate::couriers::{Couriers, spawn_couriers};
use crate::credit_bus::CreditBusCounters;
use crate::kv_events::{KvEventsArgs, KvEventsConfig, KvEventsHandle, kv_events_child};
use crate::liveness::{Liveness, Watched, readiness, watch_alive};
use crate::peer_sync::{PeerSyncArgs, PeerSyncConfig, PeerSyncHandle, peer_sync_child};
use crate::registry::{
    EndpointAllowList, RegistryArgs, RegistryConfig, RegistryHandle, RegistryShared, registry_child,
};
use crate::room_bus::RoomBusCounters;
use crate::room_view::room_channel;
use crate::router::{CreditsArgs, OwnDelta, Paired, RouterArgs, RouterHandle, router_child};
use crate::supervisor::{
    ActorSlot, ChildBoard, DEFAULT_CALL_TIMEOUT, InflightRegistry, NodeSupervisor, RestartPolicy,
    SupervisorArgs, SupervisorMsg,
};
use crate::wire::Subjects;
use ractor::{Actor, ActorRef, SpawnErr};
use router_core::credits::CreditAgent;
use router_core::{
    PolicyProfile, PoolRole, PoolRouterConfig, PrefixMode, RouterId, SchedulerConfig,
    SelectionConfig, SharedKvIndex,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// How long a child may stay down past its restart's due time before the node is not alive.
pub const DEFAULT_LIVENESS_GRACE: Duration = Duration::from_secs(10);

/// Room-credit messages waiting for the courier; past this they are dropped and counted
/// (periodic reports repair the loss).
const CREDIT_QUEUE: usize = 4096;

/// Aggregated workers, or a prefill pool and a decode pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Aggregated,
    Disaggregated,
}

impl Topology {
    pub fn pools(self) -> &'static [PoolRole] {
        match self {
            Topology::Aggregated => &[PoolRole::Aggregated],
            Topology::Disaggregated => &[PoolRole::Decode, PoolRole::Prefill],
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub cluster: String,
    pub router_id: RouterId,
    pub topology: Topology,
    pub profile: PolicyProfile,
    /// Tokens per KV block of every worker.
    pub block_size: u32,
    pub selection: SelectionConfig,
    pub prefix: PrefixMode,
    pub reservation_lease: Duration,
    /// How long an own booking may live before the router releases it as leaked
    /// (`SchedulerConfig::booking_lease`; `None`: as long as it is booked). A router node sets
    /// it past its request deadline, which every booking's release precedes.
    pub booking_lease: Option<Duration>,
    pub recheck_every: Duration,
    /// Own deltas waiting for peer sync, per pool; overflow is dropped and counted.
    pub delta_queue: usize,
    pub peer_sync: PeerSyncConfig,
    pub registry: RegistryConfig,
    /// Hosts a worker's announced endpoint may name; empty: any (see `registry/allow.rs`).
    pub allowed_endpoints: EndpointAllowList,
    pub kv_events: KvEventsConfig,
    pub restart: RestartPolicy,
    /// How long a child of the supervisor may be without a running actor past its restart's
    /// due time before the node stops being alive (`/health` fails naming it).
    pub liveness_grace: Duration,
    /// How long a handle waits for an actor's answer to a call (`observe` and the like;
    /// not `route`): a stuck actor is then an error, never a hang.
    pub call_timeout: Duration,
    pub seed: u64,
    /// More children for the node's supervisor, started after its own actors and restarted
    /// under the same policy (a router node's engine links).
    pub extra_children: Vec<crate::supervisor::ChildSpec>,
    /// Every pool's decode room and prefill line are shared among replicas through room
    /// credits (`router_core::credits`), one agent per pool, so replicas admit as one gate.
    /// Off: each replica admits against its own view (replicas may overshoot a class line
    /// together).
    pub room_credits: bool,
    /// Prefill pool: hold decode room at admission (`SchedulerConfig::decode_reservations`).
    pub decode_reservations: bool,
}

impl NodeConfig {
    pub fn new(
        cluster: impl Into<String>,
        router_id: RouterId,
        topology: Topology,
        profile: PolicyProfile,
    ) -> Self {
        Self {
            cluster: cluster.into(),
            router_id,
            topology,
            profile,
            block_size: 16,
            selection: SelectionConfig::default(),
            prefix: PrefixMode::Events,
            reservation_lease: Duration::from_secs(30),
            booking_lease: None,
            recheck_every: Duration::from_secs(1),
            delta_queue: 100_000,
            peer_sync: PeerSyncConfig::default(),
            registry: RegistryConfig::default(),
            allowed_endpoints: EndpointAllowList::default(),
            kv_events: KvEventsConfig::default(),
            restart: RestartPolicy::default(),
            liveness_grace: DEFAULT_LIVENESS_GRACE,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            seed: 0,
            extra_children: Vec::new(),
            room_credits: true,
            decode_reservations: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("starting an actor: {0}")]
    Spawn(#[from] SpawnErr),
    #[error("subscribing on the bus: {0}")]
    Bus(#[from] crate::bus::BusError),
}

/// A running node.
pub struct Node {
    pub config: NodeConfig,
    supervisor: ActorRef<SupervisorMsg>,
    /// Alive while the supervisor runs and every required part is there.
    alive: watch::Receiver<Liveness>,
    routers: Vec<(PoolRole, RouterHandle)>,
    peer_syncs: Vec<(PoolRole, PeerSyncHandle)>,
    kv_events: Vec<(PoolRole, KvEventsHandle)>,
    registry: RegistryHandle,
    inflight: Vec<(PoolRole, InflightRegistry)>,
    pub room_counters: Arc<RoomBusCounters>,
    pub credit_counters: Arc<CreditBusCounters>,
    bus: Arc<dyn Bus>,
    tasks: Vec<JoinHandle<()>>,
    ready: watch::Receiver<bool>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("router_id", &self.config.router_id)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Starts the node's actors on `bus`.
    pub async fn start(config: NodeConfig, bus: Arc<dyn Bus>) -> Result<Node, NodeError> {
        let clock = Clock::start();
        let subjects = Subjects::new(config.cluster.clone());
        let room_counters = Arc::new(RoomBusCounters::default());
        let credit_counters = Arc::new(CreditBusCounters::default());
        // Room credits among replicas, one link per pool (its courier and its peers).
        let mut credit_links = Vec::new();
        let (room_out, room_in) = room_channel();
        let mut children = Vec::new();
        let mut routers = Vec::new();
        // One prefix index per pool: the KvEventsActor writes it, the router reads it.
        let mut kv_indexes = Vec::new();
        let mut receivers = Vec::new();
        let mut inflight = Vec::new();
        for &pool in config.topology.pools() {
            let slot = ActorSlot::empty();
            let registry = InflightRegistry::default();
            // A route call waits at most the longest class wait, plus a call's timeout.
            // Releases are recorded in the registry every incarnation restores from.
            let kv_index = SharedKvIndex::default();
            let handle = RouterHandle::from_slot(slot.clone(), clock)
                .with_block_size(config.block_size)
                .with_index(kv_index.clone())
                .with_call_timeout(config.call_timeout)
                .with_route_timeout(config.profile.longest_wait() + config.call_timeout)
                .with_inflight(registry.clone());
            let (tx, rx) = mpsc::channel::<OwnDelta>(config.delta_queue.max(1));
            // Peer sync says when the starting snapshots are in; the router admits from then.
            let (ready_tx, ready_rx) = watch::channel(false);
            let mut scheduler = SchedulerConfig::new(pool, config.router_id);
            scheduler.reservation_lease = config.reservation_lease;
            scheduler.booking_lease = config.booking_lease;
            scheduler.selection = config.selection;
            scheduler.seed = config.seed;
            scheduler.decode_reservations = config.decode_reservations;
            let paired = (pool == PoolRole::Prefill).then(|| {
                let decode = routers
                    .iter()
                    .find(|(p, _)| *p == PoolRole::Decode)
                    .map(|(_, h): &(PoolRole, RouterHandle)| h.clone());
                decode.map(|decode| Paired {
                    room: room_in.clone(),
                    decode,
                })
            });
            let credits = config.room_credits.then(|| {
                let (out, outgoing) = mpsc::channel(CREDIT_QUEUE);
                let (peers_tx, peers) = watch::channel(Vec::new());
                credit_links.push((pool, outgoing, peers_tx));
                let settle = config.peer_sync.heartbeat_every.saturating_mul(2);
                CreditsArgs {
                    agent: Arc::new(std::sync::Mutex::new(CreditAgent::new(
                        config.router_id,
                        settle,
                    ))),
                    out,
                    peers,
                    bus: Arc::clone(&bus),
                }
            });
            let args = RouterArgs {
                config: PoolRouterConfig {
                    scheduler,
                    block_size: config.block_size,
                    prefix: config.prefix.clone(),
                },
                profile: config.profile.clone(),
                clock,
                room_out: (pool == PoolRole::Decode).then(|| room_out.clone()),
                paired: paired.flatten(),
                deltas: Some(tx),
                recheck_every: config.recheck_every,
                inflight: Some(registry.clone()),
                admit_when: Some(ready_rx),
                kv_index: Some(kv_index.clone()),
                credits,
            };
            children.push(router_child(
                format!("router-{}", crate::wire::pool_token(pool)),
                args,
                slot,
            ));
            routers.push((pool, handle));
            kv_indexes.push((pool, kv_index));
            receivers.push((pool, rx, ready_tx));
            inflight.push((pool, registry));
        }
        let mut peer_syncs = Vec::new();
        for (pool, rx, ready_tx) in receivers {
            let Some(router) = routers
                .iter()
                .find(|(p, _)| *p == pool)
                .map(|(_, h)| h.clone())
            else {
                continue;
            };
            let (mut args, _ready) = PeerSyncArgs::new(
                Arc::clone(&bus),
                subjects.clone(),
                pool,
                config.router_id,
                router,
                rx,
            );
            args.config = config.peer_sync.clone();
            if let Some((_, _, peers_tx)) = credit_links.iter().find(|(p, _, _)| *p == pool) {
                args.peers = peers_tx.clone();
            }
            let slot = ActorSlot::empty();
            let handle = PeerSyncHandle::from_slot(slot.clone(), ready_tx.subscribe())
                .with_call_timeout(config.call_timeout);
            args.ready = ready_tx;
            let name = format!("peer-sync-{}", crate::wire::pool_token(pool));
            children.push(peer_sync_child(name, args, slot));
            peer_syncs.push((pool, handle));
        }
        let mut kv_events = Vec::new();
        for (pool, kv_index) in &kv_indexes {
            let args = KvEventsArgs {
                bus: Arc::clone(&bus),
                subjects: subjects.clone(),
                pool: *pool,
                index: kv_index.clone(),
                config: config.kv_events,
            };
            let slot = ActorSlot::empty();
            let name = format!("kv-events-{}", crate::wire::pool_token(*pool));
            children.push(kv_events_child(name, args, slot.clone()));
            let handle = KvEventsHandle::from_slot(slot).with_call_timeout(config.call_timeout);
            kv_events.push((*pool, handle));
        }
        let shared = RegistryShared::new();
        let registry_args = RegistryArgs {
            bus: Arc::clone(&bus),
            subjects: subjects.clone(),
            pools: routers.clone(),
            config: config.registry,
            shared: shared.clone(),
            allowed_endpoints: Arc::new(config.allowed_endpoints.clone()),
        };
        let slot = ActorSlot::empty();
        children.push(registry_child(
            "worker-registry",
            registry_args,
            slot.clone(),
        ));
        let registry =
            RegistryHandle::from_slot(slot, shared).with_call_timeout(config.call_timeout);
        children.extend(config.extra_children.iter().cloned());
        let board = ChildBoard::new();
        let (supervisor, supervisor_done) = Actor::spawn(
            None,
            NodeSupervisor,
            SupervisorArgs {
                children,
                policy: config.restart,
                board: board.clone(),
            },
        )
        .await?;
        let couriers = spawn_couriers(Couriers {
            router_id: config.router_id,
            room_bridge: config.topology == Topology::Disaggregated,
            bus: &bus,
            subjects: &subjects,
            routers: &routers,
            room_in: &room_in,
            room_counters: &room_counters,
            credit_counters: &credit_counters,
            credit_links: credit_links
                .into_iter()
                .map(|(pool, outgoing, _)| (pool, outgoing))
                .collect(),
        })
        .await?;
        let alive = watch_alive(Watched {
            supervisor_done,
            board,
            tasks: couriers
                .iter()
                .map(|(name, task)| (name.clone(), task.abort_handle()))
                .collect(),
            grace: config.liveness_grace,
        });
        let mut tasks: Vec<JoinHandle<()>> = couriers.into_iter().map(|(_, t)| t).collect();
        let ready = readiness(&peer_syncs, registry.known_workers(), &mut tasks);
        Ok(Node {
            config,
            supervisor,
            alive,
            routers,
            peer_syncs,
            kv_events,
            registry,
            inflight,
            room_counters,
            credit_counters,
            bus: Arc::clone(&bus),
            tasks,
            ready,
        })
    }

    pub fn router(&self, pool: PoolRole) -> Option<&RouterHandle> {
        self.routers
            .iter()
            .find(|(p, _)| *p == pool)
            .map(|(_, h)| h)
    }

    pub fn routers(&self) -> &[(PoolRole, RouterHandle)] {
        &self.routers
    }

    pub fn peer_sync(&self, pool: PoolRole) -> Option<&PeerSyncHandle> {
        self.peer_syncs
            .iter()
            .find(|(p, _)| *p == pool)
            .map(|(_, h)| h)
    }

    pub fn kv_events(&self, pool: PoolRole) -> Option<&KvEventsHandle> {
        self.kv_events
            .iter()
            .find(|(p, _)| *p == pool)
            .map(|(_, h)| h)
    }

    pub fn registry(&self) -> &RegistryHandle {
        &self.registry
    }

    pub fn inflight(&self, pool: PoolRole) -> Option<&InflightRegistry> {
        self.inflight
            .iter()
            .find(|(p, _)| *p == pool)
            .map(|(_, r)| r)
    }

    /// Whether the node's bus connection is up now (always true on the in-process bus).
    pub fn bus_connected(&self) -> bool {
        self.bus.connected()
    }

    /// The node's bus.
    pub fn bus(&self) -> Arc<dyn Bus> {
        Arc::clone(&self.bus)
    }

    pub fn supervisor(&self) -> &ActorRef<SupervisorMsg> {
        &self.supervisor
    }

    /// `Alive` while the node's supervisor runs, every child of it is running or being
    /// restarted, and every courier task runs. `Failed`, with a reason naming what is gone,
    /// once the supervisor escalated (a child failed past its restart budget) or stopped, a
    /// child has been down `liveness_grace` past its restart's due time, or a courier ended;
    /// the node then cannot route (`/health` answers 503).
    pub fn alive(&self) -> watch::Receiver<Liveness> {
        self.alive.clone()
    }

    pub fn is_alive(&self) -> bool {
        self.alive.borrow().is_alive()
    }

    /// Ready once every pool's peer sync has its starting snapshots and a worker is known.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.clone()
    }

    /// Says goodbye to peers, then stops every actor and task of the node and waits for the
    /// supervisor to finish.
    pub async fn shutdown(self) {
        // Peers drop this router's bookings (and the room credits it held) at once.
        for (_, sync) in &self.peer_syncs {
            let _ = sync.goodbye().await;
        }
        self.stop_silently().await;
    }

    /// Stops every actor and task without telling peers, as a killed process would: they
    /// drop its bookings only when its lease runs out (fault tests).
    pub async fn kill(self) {
        self.stop_silently().await;
    }

    async fn stop_silently(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        self.supervisor.stop(Some("node shutdown".into()));
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.alive.wait_for(|alive| !alive.is_alive()),
        )
        .await;
    }
}
