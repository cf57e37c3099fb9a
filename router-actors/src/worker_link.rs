//! The worker side of the bus, for simulated engines and the links of real ones: announce
//! yourself every heartbeat period on `workers.<pool>.announce`, publish KV events on
//! `kv.<pool>.events` and engine load on `workers.<pool>.load`, all sealed in versioned
//! envelopes under one sender id.
//!
//! The first announcement goes out before [`WorkerLink::start`] returns; then a tokio task
//! repeats it every period (the announcement's `heartbeat_ms` is set to the period). The task
//! stops on [`WorkerLink::leave`] (a last announcement marked `leaving`, on which routers
//! remove the worker at once), on [`WorkerLink::shutdown`] or when the link is dropped (the
//! routers then drop the worker when its lease runs out). A failed heartbeat publish is counted and retried at the
//! next period.

use crate::bus::{Bus, BusError};
use crate::wire::{EncodeError, Outbox, Subjects, WorkerAnnounce, WorkerLoad};
use router_core::{KvEvent, PoolRole, WorkerId};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("heartbeat period must be above zero")]
    ZeroPeriod,
    /// The bus did not take what was queued in time (it is down): a stopping worker does not
    /// wait for it to come back.
    #[error("the bus did not flush within {0:?}")]
    FlushTimeout(Duration),
}

/// How long [`WorkerLink::shutdown`] waits for the bus to take what is queued.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Counts of what the link sent, shared with its heartbeat task.
#[derive(Debug, Default)]
pub struct LinkCounters {
    pub announcements: AtomicU64,
    pub announce_failures: AtomicU64,
    pub kv_batches: AtomicU64,
    pub load_reports: AtomicU64,
}

/// One worker's connection to the routers.
pub struct WorkerLink {
    bus: Arc<dyn Bus>,
    pool: PoolRole,
    worker: WorkerId,
    sender: Uuid,
    kv_subject: String,
    /// Seal and publish under one lock, so sequence order is publish order.
    kv_outbox: Mutex<Outbox>,
    load_subject: String,
    load_outbox: Mutex<Outbox>,
    announce_subject: String,
    /// Shared with the heartbeat task, so the leaving announcement follows its sequence.
    announce_outbox: Arc<Mutex<Outbox>>,
    announce: watch::Sender<WorkerAnnounce>,
    counters: Arc<LinkCounters>,
    heartbeat: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WorkerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerLink")
            .field("pool", &self.pool)
            .field("worker", &self.worker)
            .field("sender", &self.sender)
            .finish_non_exhaustive()
    }
}

impl WorkerLink {
    /// Publishes `announce` now and then every `period` (its pool is the announcement's).
    pub async fn start(
        bus: Arc<dyn Bus>,
        subjects: &Subjects,
        mut announce: WorkerAnnounce,
        period: Duration,
    ) -> Result<Self, LinkError> {
        if period.is_zero() {
            return Err(LinkError::ZeroPeriod);
        }
        announce.heartbeat_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
        let sender = Uuid::new_v4();
        let pool = announce.pool;
        let worker = announce.spec.id;
        let announce_subject = subjects.announce(pool);
        let mut outbox = Outbox::new(subjects.cluster(), sender);
        let first = outbox.seal(&announce_subject, &announce)?;
        let outbox = Arc::new(Mutex::new(outbox));
        bus.publish(announce_subject.clone(), first).await?;
        let counters = Arc::new(LinkCounters::default());
        counters.announcements.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(announce);
        let heartbeat = tokio::spawn(heartbeat(
            bus.clone(),
            announce_subject.clone(),
            outbox.clone(),
            rx,
            period,
            counters.clone(),
        ));
        Ok(Self {
            bus,
            pool,
            worker,
            sender,
            kv_subject: subjects.kv_events(pool),
            kv_outbox: Mutex::new(Outbox::new(subjects.cluster(), sender)),
            load_subject: subjects.load(pool),
            load_outbox: Mutex::new(Outbox::new(subjects.cluster(), sender)),
            announce_subject: announce_subject.clone(),
            announce_outbox: outbox,
            announce: tx,
            counters,
            heartbeat: Some(heartbeat),
        })
    }

    pub fn pool(&self) -> PoolRole {
        self.pool
    }

    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// The sender id on every envelope of this link.
    pub fn sender(&self) -> Uuid {
        self.sender
    }

    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }

    /// Replaces the announcement (a changed capacity, say); it goes out at once and then
    /// with every heartbeat. Its pool and worker id are kept from the first one.
    pub fn update(&self, mut announce: WorkerAnnounce) {
        self.announce.send_modify(|current| {
            announce.pool = current.pool;
            announce.spec.id = current.spec.id;
            announce.heartbeat_ms = current.heartbeat_ms;
            *current = announce;
        });
    }

    /// Publishes one batch of KV events (the next sequence on the KV subject).
    pub async fn publish_kv_events(&self, events: Vec<KvEvent>) -> Result<(), LinkError> {
        let mut outbox = self.kv_outbox.lock().await;
        let payload = outbox.seal(&self.kv_subject, events)?;
        self.bus.publish(self.kv_subject.clone(), payload).await?;
        self.counters.kv_batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Publishes one rank's engine-reported load.
    pub async fn publish_load(&self, load: &WorkerLoad) -> Result<(), LinkError> {
        let mut outbox = self.load_outbox.lock().await;
        let payload = outbox.seal(&self.load_subject, load)?;
        self.bus.publish(self.load_subject.clone(), payload).await?;
        self.counters.load_reports.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Leaves the fleet: stops heart-beating, publishes a last announcement marked
    /// `leaving` (routers remove the worker, its bookings and its index entries at once) and
    /// flushes. The last announcement is sealed in the heartbeat's own sequence, after every
    /// heartbeat already sent.
    pub async fn leave(mut self) -> Result<(), LinkError> {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
        let mut last = self.announce.borrow().clone();
        last.leaving = true;
        let payload = self
            .announce_outbox
            .lock()
            .await
            .seal(&self.announce_subject, &last)?;
        self.bus
            .publish(self.announce_subject.clone(), payload)
            .await?;
        match tokio::time::timeout(FLUSH_TIMEOUT, self.bus.flush()).await {
            Ok(flushed) => Ok(flushed?),
            Err(_) => Err(LinkError::FlushTimeout(FLUSH_TIMEOUT)),
        }
    }

    /// Stops heart-beating (the routers drop the worker after its lease) and flushes.
    pub async fn shutdown(mut self) -> Result<(), LinkError> {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
        match tokio::time::timeout(FLUSH_TIMEOUT, self.bus.flush()).await {
            Ok(flushed) => Ok(flushed?),
            Err(_) => Err(LinkError::FlushTimeout(FLUSH_TIMEOUT)),
        }
    }
}

impl Drop for WorkerLink {
    fn drop(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }
}

/// Publishes the current announcement every `period`, and at once when it changes.
async fn heartbeat(
    bus: Arc<dyn Bus>,
    subject: String,
    outbox: Arc<Mutex<Outbox>>,
    mut announce: watch::Receiver<WorkerAnnounce>,
    period: Duration,
    counters: Arc<LinkCounters>,
) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut updates = true;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            changed = announce.changed(), if updates => {
                if changed.is_err() {
                    updates = false;
                    continue;
                }
            }
        }
        let body = announce.borrow_and_update().clone();
        let sealed = outbox.lock().await.seal(&subject, &body);
        let sent = match sealed {
            Ok(payload) => bus.publish(subject.clone(), payload).await.is_ok(),
            Err(_) => false,
        };
        if sent {
            counters.announcements.fetch_add(1, Ordering::Relaxed);
        } else {
            counters.announce_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}
