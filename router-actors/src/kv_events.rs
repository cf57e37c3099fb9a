//! KvEventsActor: one per pool. It reads workers' KV events from `kv.<pool>.events`
//! (`Envelope<KvEventBatch>`, decoded at the edge, failures counted by kind), applies every
//! batch to the pool's prefix index itself (the [`SharedKvIndex`] the pool's router reads
//! lock-free, so the router's lookups never wait behind a burst of events, and events never
//! queue behind requests in the router's mailbox), and counts what went by: events by kind,
//! events the index refused, and per publisher the sequence gaps (lost batches) and stale
//! batches (duplicated or reordered: dropped, since applying a batch twice would only be
//! refused).
//!
//! A gap is counted, not repaired: the index keeps what it has, and the blocks of a lost
//! `Stored` batch are simply not matched (a later `Stored` under a missing parent is refused by
//! the index and counted here).

use crate::bus::Bus;
use crate::edge::{EdgeCounts, Inbox, spawn_forwarder};
use crate::supervisor::{
    ActorSlot, CallError, ChildSpec, DEFAULT_CALL_TIMEOUT, OwnedTasks, linked_child,
};
use crate::wire::{Envelope, KvEventBatch, SeqEvent, SeqTracker, Subjects};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use router_core::index::{EventKind, IndexStats};
use router_core::{PoolRole, SharedKvIndex};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvEventsConfig {
    /// Batches that may wait in the mailbox; newer ones are dropped and counted.
    pub inbox: usize,
    /// Publishers tracked for sequence gaps; beyond it the least recently heard one is
    /// forgotten (counted), so the table stays bounded as workers come and go.
    pub max_publishers: usize,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            inbox: 4096,
            max_publishers: 4096,
        }
    }
}

#[derive(Clone)]
pub struct KvEventsArgs {
    pub bus: Arc<dyn Bus>,
    pub subjects: Subjects,
    pub pool: PoolRole,
    /// The pool's event-fed index, shared with its router.
    pub index: SharedKvIndex,
    pub config: KvEventsConfig,
}

impl std::fmt::Debug for KvEventsArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvEventsArgs")
            .field("pool", &self.pool)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub enum KvEventsMsg {
    Batch(Envelope<KvEventBatch>),
    Observe(RpcReplyPort<KvEventsSnapshot>),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EventCounts {
    pub stored: u64,
    pub removed: u64,
    pub cleared: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KvEventsCounters {
    /// Batches applied to the index.
    pub batches: u64,
    pub events: EventCounts,
    /// Batches that arrived after a skipped sequence, and how many were skipped in all.
    pub gaps: u64,
    pub missed: u64,
    /// Duplicated or reordered batches: dropped.
    pub stale: u64,
    /// Events the index refused (unknown worker or parent, duplicate, bad event id): see
    /// the index's own counts by status.
    pub refused: u64,
    pub forgotten_publishers: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PublisherView {
    pub sender: Uuid,
    pub last_seq: u64,
    pub batches: u64,
    pub gaps: u64,
    pub missed: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvEventsSnapshot {
    pub pool: PoolRole,
    pub counters: KvEventsCounters,
    /// The pool's prefix index: workers, ranks, distinct blocks, (rank, block) entries, and
    /// what it made of the events.
    pub index: IndexStats,
    /// Sorted by sender.
    pub publishers: Vec<PublisherView>,
    pub edge: EdgeCounts,
}

#[derive(Debug, Clone, Copy)]
struct Publisher {
    last_seq: u64,
    batches: u64,
    gaps: u64,
    missed: u64,
    /// The value of `KvEventsCounters::batches` when last heard (recency for eviction).
    heard: u64,
}

#[derive(Debug)]
pub struct KvEventsState {
    pool: PoolRole,
    index: SharedKvIndex,
    config: KvEventsConfig,
    seqs: SeqTracker,
    publishers: HashMap<Uuid, Publisher>,
    counters: KvEventsCounters,
    inbox: Arc<Inbox>,
    /// The subscription's forwarder; aborted with this state.
    forwarder: OwnedTasks,
}

impl KvEventsState {
    fn batch(&mut self, envelope: Envelope<KvEventBatch>) {
        let Envelope {
            sender, seq, body, ..
        } = envelope;
        let event = self.seqs.observe(sender, seq);
        if event == SeqEvent::Stale {
            self.counters.stale += 1;
            return;
        }
        if !self.publishers.contains_key(&sender) {
            self.make_room();
        }
        let heard = self.counters.batches;
        let publisher = self.publishers.entry(sender).or_insert(Publisher {
            last_seq: 0,
            batches: 0,
            gaps: 0,
            missed: 0,
            heard,
        });
        publisher.last_seq = seq;
        publisher.batches += 1;
        publisher.heard = heard;
        if let SeqEvent::Gap { missed } = event {
            publisher.gaps += 1;
            publisher.missed += missed;
            self.counters.gaps += 1;
            self.counters.missed += missed;
            tracing::debug!(%sender, missed, pool = ?self.pool, "kv event gap");
        }
        for event in &body {
            match event.data.kind() {
                EventKind::Stored => self.counters.events.stored += 1,
                EventKind::Removed => self.counters.events.removed += 1,
                EventKind::Cleared => self.counters.events.cleared += 1,
            }
        }
        self.counters.batches += 1;
        self.counters.refused += self.index.apply_all(&body);
    }

    /// Forgets the least recently heard publisher when the table is full.
    fn make_room(&mut self) {
        if self.publishers.len() < self.config.max_publishers.max(1) {
            return;
        }
        let oldest = self
            .publishers
            .iter()
            .min_by_key(|(_, p)| p.heard)
            .map(|(s, _)| *s);
        if let Some(sender) = oldest {
            self.publishers.remove(&sender);
            self.seqs.forget(sender);
            self.counters.forgotten_publishers += 1;
        }
    }

    fn snapshot(&self) -> KvEventsSnapshot {
        let mut publishers: Vec<PublisherView> = self
            .publishers
            .iter()
            .map(|(sender, p)| PublisherView {
                sender: *sender,
                last_seq: p.last_seq,
                batches: p.batches,
                gaps: p.gaps,
                missed: p.missed,
            })
            .collect();
        publishers.sort_by_key(|p| p.sender);
        KvEventsSnapshot {
            pool: self.pool,
            counters: self.counters.clone(),
            index: self.index.stats(),
            publishers,
            edge: self.inbox.counts(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct KvEventsActor;

impl Actor for KvEventsActor {
    type Msg = KvEventsMsg;
    type State = KvEventsState;
    type Arguments = KvEventsArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<KvEventsMsg>,
        args: KvEventsArgs,
    ) -> Result<KvEventsState, ActorProcessingErr> {
        let inbox = Inbox::new(args.config.inbox);
        let subscription = args
            .bus
            .subscribe(args.subjects.kv_events(args.pool))
            .await?;
        let forwarder = spawn_forwarder(
            subscription,
            args.subjects.cluster().to_owned(),
            inbox.clone(),
            myself,
            KvEventsMsg::Batch,
        );
        Ok(KvEventsState {
            pool: args.pool,
            index: args.index,
            config: args.config,
            seqs: SeqTracker::default(),
            publishers: HashMap::new(),
            counters: KvEventsCounters::default(),
            inbox,
            forwarder: OwnedTasks::new(vec![forwarder]),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<KvEventsMsg>,
        msg: KvEventsMsg,
        state: &mut KvEventsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            KvEventsMsg::Batch(envelope) => {
                state.inbox.done();
                state.batch(envelope);
            }
            KvEventsMsg::Observe(reply) => {
                let _ = reply.send(state.snapshot());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<KvEventsMsg>,
        state: &mut KvEventsState,
    ) -> Result<(), ActorProcessingErr> {
        state.forwarder.abort_all();
        Ok(())
    }
}

/// The typed handle of a KvEventsActor; it follows the actor in its slot across restarts.
#[derive(Debug, Clone)]
pub struct KvEventsHandle {
    slot: ActorSlot<KvEventsMsg>,
    call_timeout: Duration,
}

impl KvEventsHandle {
    pub fn new(actor: ActorRef<KvEventsMsg>) -> Self {
        Self::from_slot(ActorSlot::new(actor))
    }

    /// A handle on the actor in `slot`.
    pub fn from_slot(slot: ActorSlot<KvEventsMsg>) -> Self {
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

    /// Spawns the actor unsupervised (subscribed before this returns) and returns its handle.
    pub async fn spawn(
        name: Option<String>,
        args: KvEventsArgs,
    ) -> Result<(Self, ractor::concurrency::JoinHandle<()>), ractor::SpawnErr> {
        let (actor, join) = Actor::spawn(name, KvEventsActor, args).await?;
        Ok((Self::new(actor), join))
    }

    /// The current actor (none between a failure and its restart).
    pub fn actor(&self) -> Option<ActorRef<KvEventsMsg>> {
        self.slot.get()
    }

    pub async fn observe(&self) -> Result<KvEventsSnapshot, CallError> {
        self.slot
            .call(KvEventsMsg::Observe, self.call_timeout)
            .await
    }
}

/// A supervisor child that (re)starts a KvEventsActor linked to the supervisor from `args`
/// and points `slot` at it. The index lives in `args.index`, so a restart keeps it.
pub fn kv_events_child(
    name: impl Into<String>,
    args: KvEventsArgs,
    slot: ActorSlot<KvEventsMsg>,
) -> ChildSpec {
    linked_child(name, KvEventsActor, args, slot)
}
