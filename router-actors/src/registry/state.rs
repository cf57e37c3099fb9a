//! The WorkerRegistryActor's state: the worker table with one lease deadline per worker,
//! announcements applied to the pools' routers, expiry, the published directory, and the
//! hand-back of the table to [`RegistryShared`] when the state is dropped.

use super::{
    Directory, RankLoadView, RegistryConfig, RegistryCounters, RegistryMsg, RegistryShared,
    RegistrySnapshot, ServedModel, WorkerView,
};
use crate::edge::Inbox;
use crate::router::RouterHandle;
use crate::supervisor::OwnedTasks;
use crate::vigil::{VIGIL_EVERY, Vigil};
use crate::wire::{Envelope, SeqEvent, SeqTracker, WorkerAnnounce, WorkerLoad, pool_token};
use ractor::concurrency::JoinHandle as TimerHandle;
use ractor::{ActorRef, MessagingErr};
use router_core::{PoolRole, WorkerId, WorkerSpec};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// A worker's key: its pool's subject token and its id.
pub(super) type Key = (&'static str, WorkerId);
/// The one armed lease timer and when it fires.
type Timer = (Instant, TimerHandle<Result<(), MessagingErr<RegistryMsg>>>);

#[derive(Debug)]
pub(super) struct Entry {
    pool: PoolRole,
    spec: WorkerSpec,
    endpoint: String,
    sender: Uuid,
    lease: Duration,
    pub(super) expires: Instant,
    announcements: u64,
    /// The engine's own load by dp rank, as last reported on `workers.<pool>.load`.
    load: BTreeMap<u32, RankLoadView>,
}

pub struct RegistryState {
    pub(super) pools: Vec<(PoolRole, RouterHandle)>,
    pub(super) config: RegistryConfig,
    pub(super) workers: HashMap<Key, Entry>,
    /// Lease ends in order; exactly one item per entry of `workers`.
    pub(super) deadlines: BTreeSet<(Instant, Key)>,
    /// One sequence tracker per announce subject.
    pub(super) seqs: HashMap<&'static str, SeqTracker>,
    pub(super) armed: Option<Timer>,
    pub(super) shared: RegistryShared,
    pub(super) directory_dirty: bool,
    pub(super) inbox: Arc<Inbox>,
    /// One forwarder per announce subscription; aborted with this state.
    pub(super) forwarders: OwnedTasks,
    pub(super) counters: RegistryCounters,
    /// To tell a silent bus from silent workers.
    pub(super) bus: Arc<dyn crate::bus::Bus>,
    pub(super) allowed_endpoints: Arc<super::EndpointAllowList>,
    /// Refused (worker, endpoint) pairs already logged (bounded by [`WARNED_CAP`]).
    pub(super) warned: HashSet<(WorkerId, String)>,
    /// Notices when this node did not run (leases count only the time it was listening).
    pub(super) vigil: Vigil,
}

/// Refused endpoints remembered so that each is logged once, not at every heartbeat; past
/// this many, every refusal is logged.
const WARNED_CAP: usize = 1024;

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

    pub(super) fn announce(&mut self, subject_pool: PoolRole, envelope: Envelope<WorkerAnnounce>) {
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
        if body.leaving {
            let key = (token, body.spec.id);
            // A goodbye from an older incarnation must not remove the current one.
            if self.workers.get(&key).is_some_and(|e| e.sender == sender) {
                tracing::info!(worker = %body.spec.id, pool = token, "worker left");
                self.counters.left += 1;
                self.remove(key);
            }
            return;
        }
        if let Err(error) = self.allowed_endpoints.check(&body.endpoint) {
            self.counters.endpoint_refused += 1;
            let first = !self.warned.contains(&(body.spec.id, body.endpoint.clone()));
            if first && self.warned.len() < WARNED_CAP {
                self.warned.insert((body.spec.id, body.endpoint.clone()));
            }
            if first {
                tracing::warn!(
                    worker = %body.spec.id,
                    endpoint = %body.endpoint,
                    %sender,
                    %error,
                    "worker announcement refused: endpoint not allowed by registry.allowed_endpoints",
                );
            }
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
                        load: BTreeMap::new(),
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
                if entry.endpoint != body.endpoint
                    || entry.spec.model != body.spec.model
                    || entry.spec.loras != body.spec.loras
                    || entry.spec.max_model_len != body.spec.max_model_len
                {
                    self.directory_dirty = true;
                }
                self.deadlines.remove(&(entry.expires, key));
                self.deadlines.insert((expires, key));
                let load = if entry.sender == sender {
                    std::mem::take(&mut entry.load)
                } else {
                    BTreeMap::new()
                };
                *entry = Entry {
                    pool: body.pool,
                    spec: body.spec,
                    endpoint: body.endpoint,
                    sender,
                    lease,
                    expires,
                    announcements: entry.announcements + 1,
                    load,
                };
            }
        }
        if gone {
            self.counters.router_gone += 1;
        }
    }

    pub(super) fn expire(&mut self) {
        let now = Instant::now();
        if !self.bus.connected() {
            // Workers cannot be heard while this node's bus is down: keep the fleet as last
            // known (every lease starts again), and expire on silence only once the bus is back.
            if self.deadlines.first().is_some_and(|(at, _)| *at <= now) {
                self.counters.leases_kept_bus_down += 1;
                tracing::warn!("bus connection down: worker leases renewed, not run out");
                self.renew_all(now);
            }
            return;
        }
        while let Some(&(at, key)) = self.deadlines.first() {
            if at > now {
                break;
            }
            if let Some(entry) = self.workers.get(&key) {
                tracing::info!(worker = %entry.spec.id, pool = key.0, "worker lease expired");
                self.counters.expired += 1;
            }
            self.remove(key);
        }
    }

    /// The actor runs at `now`: after a stop of this node (nothing ran, so nothing could be
    /// heard), every lease is extended by the time it was stopped.
    pub(super) fn running(&mut self, now: Instant) {
        let Some(stopped) = self.vigil.ran_holding(now, self.workers.len(), "worker") else {
            return;
        };
        self.counters.leases_kept_stopped += 1;
        self.deadlines.clear();
        for (key, entry) in &mut self.workers {
            entry.expires += stopped;
            self.deadlines.insert((entry.expires, *key));
        }
    }

    /// Every worker's lease starts again at `now`.
    fn renew_all(&mut self, now: Instant) {
        self.deadlines.clear();
        for (key, entry) in &mut self.workers {
            entry.expires = now + entry.lease;
            self.deadlines.insert((entry.expires, *key));
        }
    }

    /// Removes a worker: from the table, its lease, its sender's sequence and its router (its
    /// index entries and bookings go).
    fn remove(&mut self, key: Key) {
        let Some(entry) = self.workers.remove(&key) else {
            return;
        };
        self.deadlines.remove(&(entry.expires, key));
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

    /// An engine's own load report: kept beside its worker (never in the ledger).
    pub(super) fn load(&mut self, subject_pool: PoolRole, envelope: Envelope<WorkerLoad>) {
        let key = (pool_token(subject_pool), envelope.body.worker);
        let Some(entry) = self.workers.get_mut(&key) else {
            self.counters.load_unknown += 1;
            return;
        };
        if entry.sender != envelope.sender {
            self.counters.load_unknown += 1;
            return;
        }
        self.counters.load_reports += 1;
        let mut body = envelope.body;
        entry.load.insert(
            body.dp_rank,
            RankLoadView {
                dp_rank: body.dp_rank,
                kv_used_blocks: body.kv_used_blocks,
                waiting: body.waiting,
                running: body.running,
            },
        );
        // The engine's adapter slots: a placement hint for its pool's router.
        if let Some(adapters) = body.adapters.take()
            && let Some(router) = self.router(subject_pool)
        {
            let _ = router.set_adapters(body.worker, adapters);
        }
    }

    /// After every message: publish the directory if it changed, and keep one timer armed
    /// no later than the earliest lease end (an early wake-up finds nothing due and re-arms).
    pub(super) fn after_change(&mut self, myself: &ActorRef<RegistryMsg>) {
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
        // Woken at least every VIGIL_EVERY while it holds leases, to notice its own stops.
        let next = self
            .deadlines
            .first()
            .map(|(at, _)| (*at).min(Instant::now() + VIGIL_EVERY));
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

    pub(super) fn disarm(&mut self) {
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
        let max_model_len = self
            .workers
            .values()
            .filter_map(|e| e.spec.max_model_len)
            .min();
        let mut models: BTreeMap<&str, ServedModel> = BTreeMap::new();
        for entry in self.workers.values() {
            let spec = &entry.spec;
            let base = spec.model.iter().map(|m| (m, None));
            let adapters = spec.loras.iter().map(|l| (l, spec.model.clone()));
            for (id, parent) in base.chain(adapters) {
                let adapter = parent.is_some() || spec.model.as_ref() != Some(id);
                models
                    .entry(id.as_str())
                    .or_insert_with(|| ServedModel {
                        id: id.clone(),
                        parent,
                        adapter,
                        workers: 0,
                    })
                    .workers += 1;
            }
        }
        Directory {
            pools,
            max_model_len,
            models: models.into_values().collect(),
        }
    }

    pub(super) fn snapshot(&self) -> RegistrySnapshot {
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
                total_kv_blocks: e.spec.total_kv_blocks,
                block_size: e.spec.block_size,
                load: e.load.values().copied().collect(),
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
