//! WorkerRegistryActor: one per node. It keeps the set of live workers of every pool the node
//! serves from their announcements on `workers.<pool>.announce`.
//!
//! - Every announcement is upserted on that pool's router (a no-op when nothing changed, and
//!   how a restarted router learns its workers back); a changed spec is counted as an update.
//! - Every accepted announcement renews the worker's lease (`lease_ms` from the announcement,
//!   clamped to [`RegistryConfig::min_lease`] ..= [`RegistryConfig::max_lease`]).
//! - A worker whose lease runs out leaves its pool's router (`remove_worker`: its index
//!   entries and bookings go). One tokio timer is armed for the earliest lease end.
//! - An announcement marked `leaving` removes its worker at once (only from the sender that
//!   announced it: a late goodbye of an older incarnation is ignored).
//! - Engine load reports on `workers.<pool>.load` are kept beside their worker (shown in the
//!   snapshot and exported by the node), never applied to bookings.
//! - A known worker announcing from a new sender id is a restarted process (a new
//!   incarnation): it is removed and added again, so its stale index entries go.
//! - Refused and counted, never applied: undecodable payloads (by kind), announcements naming
//!   a pool this node does not serve or another pool than their subject's, invalid specs,
//!   stale (reordered or duplicated) announcements, and endpoints outside the node's
//!   allow-list (`allow.rs`; logged as a warning naming the worker and the endpoint, once per
//!   worker and endpoint). A known worker whose new endpoint is refused keeps its old one
//!   until its lease runs out.
//!
//! The frontend reads worker endpoints without a message: the actor publishes a
//! [`Directory`] through an `ArcSwap` whenever the set of workers or an endpoint changes, and
//! the number of known workers through a `watch` channel (`/ready`). Both live in
//! [`RegistryShared`], which survives a restart of the actor, and so does the table of known
//! workers with their leases: the actor's state hands it back when it is dropped (after a
//! failure too), and a restarted actor starts from it, so a worker that dies meanwhile still
//! expires and the directory never empties.
//!
//! Files: `mod.rs` (config, args, messages, counters, the actor), `state.rs` (the worker
//! table, leases, announcements and expiry), `handle.rs` (the directory, what survives a
//! restart, the typed handle and the supervisor child), `allow.rs` (the endpoint allow-list).

mod allow;
mod handle;
mod state;

pub use allow::{AllowListError, EndpointAllowList, EndpointRefused};
pub use handle::{Directory, RegistryHandle, RegistryShared, ServedModel, registry_child};
pub use state::RegistryState;

use crate::bus::Bus;
use crate::edge::{EdgeCounts, Inbox, spawn_forwarder};
use crate::router::RouterHandle;
use crate::supervisor::OwnedTasks;
use crate::vigil::{VIGIL_EVERY, Vigil};
use crate::wire::{Envelope, Subjects, WorkerAnnounce, WorkerLoad};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use router_core::{PoolRole, WorkerId};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryConfig {
    /// Shortest lease honoured; shorter announced leases are raised to it (and counted).
    pub min_lease: Duration,
    /// Longest lease honoured; longer announced leases are cut to it (and counted).
    pub max_lease: Duration,
    /// Announcements that may wait in the mailbox; newer ones are dropped and counted.
    pub inbox: usize,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            min_lease: Duration::from_millis(100),
            max_lease: Duration::from_secs(300),
            inbox: 4096,
        }
    }
}

impl RegistryConfig {
    pub fn clamp_lease(&self, lease_ms: u64) -> Duration {
        let max = self.max_lease.max(self.min_lease);
        Duration::from_millis(lease_ms).clamp(self.min_lease, max)
    }
}

#[derive(Clone)]
pub struct RegistryArgs {
    pub bus: Arc<dyn Bus>,
    pub subjects: Subjects,
    /// The pools this node serves and their routers (a pool listed twice: the first wins).
    pub pools: Vec<(PoolRole, RouterHandle)>,
    pub config: RegistryConfig,
    pub shared: RegistryShared,
    /// Hosts a worker's endpoint may name (empty: any).
    pub allowed_endpoints: Arc<EndpointAllowList>,
}

impl std::fmt::Debug for RegistryArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryArgs")
            .field("subjects", &self.subjects)
            .field(
                "pools",
                &self.pools.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub enum RegistryMsg {
    /// A decoded announcement read from the subject of `subject_pool`.
    Announce {
        subject_pool: PoolRole,
        envelope: Envelope<WorkerAnnounce>,
    },
    /// A decoded engine load report read from the load subject of `subject_pool`.
    Load {
        subject_pool: PoolRole,
        envelope: Envelope<WorkerLoad>,
    },
    /// The lease timer: remove every worker whose lease has run out.
    Expire,
    Observe(RpcReplyPort<RegistrySnapshot>),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RegistryCounters {
    /// Decoded announcements handled (accepted or not).
    pub announcements: u64,
    pub joined: u64,
    /// Known workers whose spec changed (upserted again).
    pub updated: u64,
    /// Known workers announcing from a new sender id (a restarted process).
    pub incarnations: u64,
    pub expired: u64,
    /// Lease sweeps that found this node's bus connection down: leases were renewed instead
    /// (a silent bus is no evidence that a worker is gone).
    pub leases_kept_bus_down: u64,
    /// Times this node was found to have been stopped (nothing ran: a paused VM or process,
    /// a starved machine) while it held leases: they were extended by the stop's length.
    pub leases_kept_stopped: u64,
    /// Workers that said they were leaving (removed at once).
    pub left: u64,
    /// Engine load reports kept, and those naming no known worker (or an older incarnation).
    pub load_reports: u64,
    pub load_unknown: u64,
    pub unserved_pool: u64,
    /// The announcement names another (served) pool than its subject's.
    pub pool_mismatch: u64,
    pub invalid_spec: u64,
    /// Older than the last announcement of the same sender (reordered or duplicated).
    pub stale: u64,
    /// The endpoint is not in the allow-list (or not a plain http(s) URL).
    pub endpoint_refused: u64,
    /// Leases outside the configured range, clamped.
    pub lease_clamped: u64,
    /// Upserts or removals that could not reach a router (it was gone).
    pub router_gone: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerView {
    pub pool: PoolRole,
    pub worker: WorkerId,
    pub endpoint: String,
    pub sender: Uuid,
    pub dp_size: u32,
    pub lease_ms: u64,
    pub expires_in_ms: u64,
    pub announcements: u64,
    pub total_kv_blocks: Option<u64>,
    pub block_size: u32,
    /// The engine's own load by dp rank (empty until it reports one).
    pub load: Vec<RankLoadView>,
}

/// One rank's engine-reported load, as last heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RankLoadView {
    pub dp_rank: u32,
    pub kv_used_blocks: u64,
    pub waiting: u64,
    pub running: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegistrySnapshot {
    pub pools: Vec<PoolRole>,
    /// Sorted by (pool, worker).
    pub workers: Vec<WorkerView>,
    pub counters: RegistryCounters,
    pub edge: EdgeCounts,
}

#[derive(Debug, Clone, Copy)]
pub struct WorkerRegistryActor;

impl Actor for WorkerRegistryActor {
    type Msg = RegistryMsg;
    type State = RegistryState;
    type Arguments = RegistryArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RegistryMsg>,
        args: RegistryArgs,
    ) -> Result<RegistryState, ActorProcessingErr> {
        let mut pools: Vec<(PoolRole, RouterHandle)> = Vec::new();
        for (pool, router) in args.pools {
            if !pools.iter().any(|(p, _)| *p == pool) {
                pools.push((pool, router));
            }
        }
        let inbox = Inbox::new(args.config.inbox);
        let mut forwarders = Vec::with_capacity(pools.len());
        for (pool, _) in &pools {
            let subject_pool = *pool;
            let subscription = args
                .bus
                .subscribe(args.subjects.announce(subject_pool))
                .await?;
            forwarders.push(spawn_forwarder(
                subscription,
                args.subjects.cluster().to_owned(),
                inbox.clone(),
                myself.clone(),
                move |envelope| RegistryMsg::Announce {
                    subject_pool,
                    envelope,
                },
            ));
            let loads = args.bus.subscribe(args.subjects.load(subject_pool)).await?;
            forwarders.push(spawn_forwarder(
                loads,
                args.subjects.cluster().to_owned(),
                inbox.clone(),
                myself.clone(),
                move |envelope| RegistryMsg::Load {
                    subject_pool,
                    envelope,
                },
            ));
        }
        // A restart carries on with the workers (and leases) the failed incarnation knew.
        let workers = std::mem::take(
            &mut *args
                .shared
                .kept
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let deadlines = workers.iter().map(|(k, e)| (e.expires, *k)).collect();
        let mut state = RegistryState {
            pools,
            config: args.config,
            workers,
            deadlines,
            seqs: HashMap::new(),
            armed: None,
            shared: args.shared,
            // Publish what we start with (nothing at first, the kept workers after a restart).
            directory_dirty: true,
            inbox,
            forwarders: OwnedTasks::new(forwarders),
            counters: RegistryCounters::default(),
            bus: Arc::clone(&args.bus),
            allowed_endpoints: args.allowed_endpoints,
            warned: std::collections::HashSet::new(),
            vigil: Vigil::new(VIGIL_EVERY, Instant::now()),
        };
        state.after_change(&myself);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<RegistryMsg>,
        msg: RegistryMsg,
        state: &mut RegistryState,
    ) -> Result<(), ActorProcessingErr> {
        state.running(Instant::now());
        match msg {
            RegistryMsg::Announce {
                subject_pool,
                envelope,
            } => {
                state.inbox.done();
                state.announce(subject_pool, envelope);
            }
            RegistryMsg::Load {
                subject_pool,
                envelope,
            } => {
                state.inbox.done();
                state.load(subject_pool, envelope);
            }
            RegistryMsg::Expire => {
                state.armed = None;
                state.expire();
            }
            RegistryMsg::Observe(reply) => {
                let _ = reply.send(state.snapshot());
            }
        }
        state.after_change(&myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<RegistryMsg>,
        state: &mut RegistryState,
    ) -> Result<(), ActorProcessingErr> {
        state.disarm();
        state.forwarders.abort_all();
        Ok(())
    }
}
