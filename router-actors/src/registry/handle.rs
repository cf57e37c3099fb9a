//! What the WorkerRegistryActor publishes for lock-free readers (the [`Directory`] and the
//! known-worker count) and keeps across its restarts ([`RegistryShared`]), its typed handle,
//! and its supervisor child.

use super::state::{Entry, Key};
use super::{RegistryArgs, RegistryMsg, RegistrySnapshot, WorkerRegistryActor};
use crate::supervisor::{ActorSlot, CallError, ChildSpec, DEFAULT_CALL_TIMEOUT, linked_child};
use arc_swap::ArcSwap;
use ractor::{Actor, ActorRef};
use router_core::{PoolRole, WorkerId};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Live workers' endpoints per pool, sorted by worker id, and the shortest context length
/// they announced. Published whole on every change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Directory {
    pub pools: Vec<(PoolRole, Vec<(WorkerId, String)>)>,
    /// The smallest `max_model_len` among the live workers that announced one (of every
    /// pool): the longest sequence every engine takes.
    pub max_model_len: Option<u64>,
    /// The models and LoRA adapters the live workers announced, sorted by name.
    pub models: Vec<ServedModel>,
}

/// A model or LoRA adapter the fleet serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedModel {
    pub id: String,
    /// An adapter's base model (`None`: a base model, or an adapter of a worker that did
    /// not name its model).
    pub parent: Option<String>,
    /// Whether it is a LoRA adapter.
    pub adapter: bool,
    /// Live workers that serve it.
    pub workers: usize,
}

impl Directory {
    /// Whether some live worker serves `name` (a base model or an adapter).
    pub fn serves(&self, name: &str) -> bool {
        self.models
            .binary_search_by(|m| m.id.as_str().cmp(name))
            .is_ok()
    }

    /// Whether `name` is a LoRA adapter some live worker serves.
    pub fn is_adapter(&self, name: &str) -> bool {
        self.models
            .binary_search_by(|m| m.id.as_str().cmp(name))
            .is_ok_and(|i| self.models[i].adapter)
    }

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
    pub(super) directory: Arc<ArcSwap<Directory>>,
    pub(super) known: Arc<watch::Sender<usize>>,
    /// The last incarnation's workers, handed back when its state was dropped.
    pub(super) kept: Arc<Mutex<HashMap<Key, Entry>>>,
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
    linked_child(name, WorkerRegistryActor, args, slot)
}
