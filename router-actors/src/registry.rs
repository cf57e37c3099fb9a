//! WorkerRegistryActor: one per node. It keeps the set of live workers of every pool the node
//! serves from their announcements on `workers.<pool>.announce`.
//!
//! - Every announcement is upserted on that pool's router (a no-op when nothing changed, and
//!   how a restarted router learns its workers back); a changed spec is counted as an update.
//! - Every accepted announcement renews the worker's lease (`lease_ms` from the announcement,
//!   clamped to [`RegistryConfig::min_lease`] ..= [`RegistryConfig::max_lease`]).
//! - A worker whose lease runs out leaves its pool's router (`remove_worker`: its index
//!   entries and bookings go). One tokio timer is armed for the earliest lease end.
//! - A known worker announcing from a new sender id is a restarted process (a new
//!   incarnation): it is removed and added again, so its stale index entries go.
//! - Refused and counted, never applied: undecodable payloads (by kind), announcements naming
//!   a pool this node does not serve or another pool than their subject's, invalid specs,
//!   stale (reordered or duplicated) announcements.
//!
//! The frontend reads worker endpoints without a message: the actor publishes a
//! [`Directory`] through an `ArcSwap` whenever the set of workers or an endpoint changes, and
//! the number of known workers through a `watch` channel (`/ready`). Both live in
//! [`RegistryShared`], which survives a restart of the actor, and so does the table of known
//! workers with their leases: the actor's state hands it back when it is dropped (after a
//! failure too), and a restarted actor starts from it, so a worker that dies meanwhile still
//! expires and the directory never empties.

use crate::bus::Bus;
use crate::edge::{EdgeCounts, Inbox, spawn_forwarder};
use crate::router::RouterHandle;
use crate::supervisor::{ActorSlot, CallError, ChildSpec, DEFAULT_CALL_TIMEOUT, OwnedTasks};
use crate::wire::{Envelope, SeqEvent, SeqTracker, Subjects, WorkerAnnounce, pool_token};
use arc_swap::ArcSwap;
use ractor::concurrency::JoinHandle as TimerHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, MessagingErr, RpcReplyPort};
use router_core::{PoolRole, WorkerId, WorkerSpec};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
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

/// Live workers' endpoints per pool, sorted by worker id. Published whole on every change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Directory {
    pub pools: Vec<(PoolRole, Vec<(WorkerId, String)>)>,
}

impl Directory {
    pub fn workers(&self, pool: PoolRole) -> &[(WorkerId, String)] {
        self.pools
            .iter()
            .find(|(p, _)| *p == pool)
            .map_or(&[], |(_, w)| w.as_slice())
    }

    pub fn endpoint_in(&self, pool: PoolRole, worker: WorkerId) -> Option<&str> {
        let workers = self.workers(pool);
        workers
            .binary_search_by_key(&worker, |(w, _)| *w)
            .ok()
            .and_then(|i| workers.get(i))
            .map(|(_, e)| e.as_str())
    }

    /// The endpoint of `worker` in the first pool that has it.
    pub fn endpoint(&self, worker: WorkerId) -> Option<&str> {
        self.pools
            .iter()
            .find_map(|(pool, _)| self.endpoint_in(*pool, worker))
    }

    pub fn len(&self) -> usize {
        self.pools.iter().map(|(_, w)| w.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the registry publishes for lock-free readers, and its worker table between two
/// incarnations; survives actor restarts.
#[derive(Debug, Clone)]
pub struct RegistryShared {
    directory: Arc<ArcSwap<Directory>>,
    known: Arc<watch::Sender<usize>>,
    /// The last incarnation's workers, handed back when its state was dropped.
    kept: Arc<Mutex<HashMap<Key, Entry>>>,
}

impl Default for RegistryShared {
    fn default() -> Self {
        Self {
            directory: Arc::new(ArcSwap::from_pointee(Directory::default())),
            known: Arc::new(watch::channel(0).0),
            kept: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl RegistryShared {
    pub fn new() -> Self {
        Self::default()
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
    pub unserved_pool: u64,
    /// The announcement names another (served) pool than its subject's.
    pub pool_mismatch: u64,
    pub invalid_spec: u64,
    /// Older than the last announcement of the same sender (reordered or duplicated).
    pub stale: u64,
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegistrySnapshot {
    pub pools: Vec<PoolRole>,
    /// Sorted by (pool, worker).
    pub workers: Vec<WorkerView>,
    pub counters: RegistryCounters,
    pub edge: EdgeCounts,
}

/// A worker's key: its pool's subject token and its id.
type Key = (&'static str, WorkerId);
/// The one armed lease timer and when it fires.
type Timer = (Instant, TimerHandle<Result<(), MessagingErr<RegistryMsg>>>);

#[derive(Debug)]
struct Entry {
    pool: PoolRole,
    spec: WorkerSpec,
    endpoint: String,
    sender: Uuid,
    lease: Duration,
    expires: Instant,
    announcements: u64,
}

pub struct RegistryState {
    pools: Vec<(PoolRole, RouterHandle)>,
    config: RegistryConfig,
    workers: HashMap<Key, Entry>,
    /// Lease ends in order; exactly one item per entry of `workers`.
    deadlines: BTreeSet<(Instant, Key)>,
    /// One sequence tracker per announce subject.
    seqs: HashMap<&'static str, SeqTracker>,
    armed: Option<Timer>,
    shared: RegistryShared,
    directory_dirty: bool,
    inbox: Arc<Inbox>,
    /// One forwarder per announce subscription; aborted with this state.
    forwarders: OwnedTasks,
    counters: RegistryCounters,
}

impl std::fmt::Debug for RegistryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryState")
            .field("workers", &self.workers.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// The worker table goes back to the shared slot for the next incarnation.
impl Drop for RegistryState {
    fn drop(&mut self) {
        let workers = std::mem::take(&mut self.workers);
        *self
            .shared
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = workers;
    }
}

impl RegistryState {
    fn router(&self, pool: PoolRole) -> Option<&RouterHandle> {
        self.pools.iter().find(|(p, _)| *p == pool).map(|(_, r)| r)
    }

    fn announce(&mut self, subject_pool: PoolRole, envelope: Envelope<WorkerAnnounce>) {
        self.counters.announcements += 1;
        let Envelope {
            sender, seq, body, ..
        } = envelope;
        let Some(router) = self.router(body.pool).cloned() else {
            self.counters.unserved_pool += 1;
            return;
        };
        if body.pool != subject_pool {
            self.counters.pool_mismatch += 1;
            return;
        }
        let token = pool_token(body.pool);
        let tracker = self.seqs.entry(token).or_default();
        if tracker.observe(sender, seq) == SeqEvent::Stale {
            self.counters.stale += 1;
            return;
        }
        if let Err(error) = body.spec.validate() {
            self.counters.invalid_spec += 1;
            tracing::warn!(%error, "worker announcement refused");
            return;
        }
        let lease = self.config.clamp_lease(body.lease_ms);
        if lease != Duration::from_millis(body.lease_ms) {
            self.counters.lease_clamped += 1;
        }
        let key = (token, body.spec.id);
        let expires = Instant::now() + lease;
        let mut gone = false;
        match self.workers.get_mut(&key) {
            None => {
                gone |= router.upsert_worker(body.spec.clone()).is_err();
                self.counters.joined += 1;
                self.directory_dirty = true;
                self.deadlines.insert((expires, key));
                self.workers.insert(
                    key,
                    Entry {
                        pool: body.pool,
                        spec: body.spec,
                        endpoint: body.endpoint,
                        sender,
                        lease,
                        expires,
                        announcements: 1,
                    },
                );
            }
            Some(entry) => {
                if entry.sender != sender {
                    // A restarted process: what the old one cached and held is gone.
                    gone |= router.remove_worker(entry.spec.id).is_err();
                    gone |= router.upsert_worker(body.spec.clone()).is_err();
                    self.counters.incarnations += 1;
                    if let Some(t) = self.seqs.get_mut(token) {
                        t.forget(entry.sender);
                    }
                } else {
                    // Unchanged specs are re-sent too (a no-op for a router that has the
                    // worker): a router restarted by its supervisor learns its workers back
                    // within one heartbeat.
                    gone |= router.upsert_worker(body.spec.clone()).is_err();
                    if entry.spec != body.spec {
                        self.counters.updated += 1;
                    }
                }
                if entry.endpoint != body.endpoint {
                    self.directory_dirty = true;
                }
                self.deadlines.remove(&(entry.expires, key));
                self.deadlines.insert((expires, key));
                *entry = Entry {
                    pool: body.pool,
                    spec: body.spec,
                    endpoint: body.endpoint,
                    sender,
                    lease,
                    expires,
                    announcements: entry.announcements + 1,
                };
            }
        }
        if gone {
            self.counters.router_gone += 1;
        }
    }

    fn expire(&mut self) {
        let now = Instant::now();
        while let Some(&(at, key)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.remove(&(at, key));
            let Some(entry) = self.workers.remove(&key) else {
                continue;
            };
            tracing::info!(worker = %entry.spec.id, pool = key.0, "worker lease expired");
            self.counters.expired += 1;
            self.directory_dirty = true;
            if let Some(t) = self.seqs.get_mut(key.0) {
                t.forget(entry.sender);
            }
            if self
                .router(entry.pool)
                .is_none_or(|r| r.remove_worker(entry.spec.id).is_err())
            {
                self.counters.router_gone += 1;
            }
        }
    }

    /// After every message: publish the directory if it changed, and keep one timer armed
    /// no later than the earliest lease end (an early wake-up finds nothing due and re-arms).
    fn after_change(&mut self, myself: &ActorRef<RegistryMsg>) {
        if self.directory_dirty {
            self.directory_dirty = false;
            let directory = self.directory();
            let count = directory.len();
            self.shared.directory.store(Arc::new(directory));
            self.shared.known.send_if_modified(|known| {
                let changed = *known != count;
                *known = count;
                changed
            });
        }
        let next = self.deadlines.first().map(|(at, _)| *at);
        match (next, &self.armed) {
            (Some(at), Some((armed_at, _))) if *armed_at <= at => {}
            (Some(at), _) => {
                self.disarm();
                let delay = at.saturating_duration_since(Instant::now());
                let handle = myself.send_after(delay, || RegistryMsg::Expire);
                self.armed = Some((at, handle));
            }
            (None, Some(_)) => self.disarm(),
            (None, None) => {}
        }
    }

    fn disarm(&mut self) {
        if let Some((_, handle)) = self.armed.take() {
            handle.abort();
        }
    }

    fn directory(&self) -> Directory {
        let pools = self
            .pools
            .iter()
            .map(|(pool, _)| {
                let token = pool_token(*pool);
                let mut workers: Vec<(WorkerId, String)> = self
                    .workers
                    .iter()
                    .filter(|((t, _), _)| *t == token)
                    .map(|((_, id), e)| (*id, e.endpoint.clone()))
                    .collect();
                workers.sort_by_key(|(id, _)| *id);
                (*pool, workers)
            })
            .collect();
        Directory { pools }
    }

    fn snapshot(&self) -> RegistrySnapshot {
        let now = Instant::now();
        let mut workers: Vec<WorkerView> = self
            .workers
            .values()
            .map(|e| WorkerView {
                pool: e.pool,
                worker: e.spec.id,
                endpoint: e.endpoint.clone(),
                sender: e.sender,
                dp_size: e.spec.dp_size,
                lease_ms: millis(e.lease),
                expires_in_ms: millis(e.expires.saturating_duration_since(now)),
                announcements: e.announcements,
            })
            .collect();
        workers.sort_by_key(|w| (pool_token(w.pool), w.worker));
        RegistrySnapshot {
            pools: self.pools.iter().map(|(p, _)| *p).collect(),
            workers,
            counters: self.counters.clone(),
            edge: self.inbox.counts(),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Debug)]
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
        match msg {
            RegistryMsg::Announce {
                subject_pool,
                envelope,
            } => {
                state.inbox.done();
                state.announce(subject_pool, envelope);
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

/// The typed handle: lock-free endpoint reads for the frontend, `/ready`, and `Observe`. It
/// follows the actor in its slot across restarts.
#[derive(Debug, Clone)]
pub struct RegistryHandle {
    slot: ActorSlot<RegistryMsg>,
    shared: RegistryShared,
    call_timeout: Duration,
}

impl RegistryHandle {
    pub fn new(actor: ActorRef<RegistryMsg>, shared: RegistryShared) -> Self {
        Self::from_slot(ActorSlot::new(actor), shared)
    }

    /// A handle on the actor in `slot`, reading what it publishes through `shared`.
    pub fn from_slot(slot: ActorSlot<RegistryMsg>, shared: RegistryShared) -> Self {
        Self {
            slot,
            shared,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// The same handle, waiting at most `timeout` for `observe`.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Spawns the actor and returns its handle.
    pub async fn spawn(
        name: Option<String>,
        args: RegistryArgs,
    ) -> Result<(Self, ractor::concurrency::JoinHandle<()>), ractor::SpawnErr> {
        let shared = args.shared.clone();
        let (actor, join) = Actor::spawn(name, WorkerRegistryActor, args).await?;
        Ok((Self::new(actor, shared), join))
    }

    /// The current actor (none between a failure and its restart).
    pub fn actor(&self) -> Option<ActorRef<RegistryMsg>> {
        self.slot.get()
    }

    /// The current directory of live workers (one atomic load).
    pub fn directory(&self) -> Arc<Directory> {
        self.shared.directory.load_full()
    }

    /// The base URL of `worker` (first pool that has it).
    pub fn endpoint(&self, worker: WorkerId) -> Option<String> {
        self.shared
            .directory
            .load()
            .endpoint(worker)
            .map(str::to_owned)
    }

    pub fn endpoint_in(&self, pool: PoolRole, worker: WorkerId) -> Option<String> {
        self.shared
            .directory
            .load()
            .endpoint_in(pool, worker)
            .map(str::to_owned)
    }

    /// Live workers of `pool` and their endpoints, by worker id.
    pub fn workers(&self, pool: PoolRole) -> Vec<(WorkerId, String)> {
        self.shared.directory.load().workers(pool).to_vec()
    }

    /// The number of known workers; `/ready` is ready once it is above zero.
    pub fn known_workers(&self) -> watch::Receiver<usize> {
        self.shared.known.subscribe()
    }

    pub async fn observe(&self) -> Result<RegistrySnapshot, CallError> {
        self.slot
            .call(RegistryMsg::Observe, self.call_timeout)
            .await
    }
}

/// A supervisor child that (re)starts a WorkerRegistryActor linked to the supervisor from
/// `args` and points `slot` at it. A restarted registry carries on with the workers and
/// leases kept in `args.shared`.
pub fn registry_child(
    name: impl Into<String>,
    args: RegistryArgs,
    slot: ActorSlot<RegistryMsg>,
) -> ChildSpec {
    ChildSpec::new(name, move |supervisor| {
        let args = args.clone();
        let slot = slot.clone();
        Box::pin(async move {
            let (actor, _) =
                Actor::spawn_linked(None, WorkerRegistryActor, args, supervisor).await?;
            slot.set(actor.clone());
            Ok(actor.get_cell())
        })
    })
}
