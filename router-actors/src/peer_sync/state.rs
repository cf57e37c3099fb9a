//! The PeerSyncActor's state and its outbound side: sequencing own deltas, heartbeats and
//! snapshots published right after the deltas they reflect, answering snapshot requests,
//! the expiry sweep and readiness.

use super::observe::{DecodeErrors, PeerSyncCounters, PeerSyncSnapshot, PeerView};
use super::{MAX_DELTAS_PER_MESSAGE, PeerSyncArgs, PeerSyncConfig, PeerSyncMsg};
use crate::bus::{Bus, BusMessage};
use crate::router::{OwnDelta, OwnState, RouterHandle, RouterMsg};
use crate::supervisor::OwnedTasks;
use crate::vigil::Vigil;
use crate::wire::{
    self, BookingDelta, BookingMsg, Digest, Envelope, Outbox, SeqTracker, SnapshotReply,
    SnapshotRequest, WIRE_VERSION, WireCounters,
};
use ractor::ActorRef;
use router_core::{PoolRole, RouterId};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What to publish once the own deltas it reflects have been sequenced.
#[derive(Debug)]
enum Answer {
    Heartbeat(Digest),
    /// A `BookingMsg::Snapshot` on the bookings subject (answer to a broadcast ask).
    Broadcast(OwnState),
    /// A `SnapshotReply` to a targeted request's reply subject.
    Reply(String, OwnState),
}

/// Which snapshot answer to defer.
#[derive(Debug)]
enum Target {
    Broadcast,
    Reply(String),
}

#[derive(Debug)]
struct Deferred {
    /// Publish once this many own deltas have been sequenced.
    after: u64,
    /// When it was read: one that waited a whole heartbeat period is published anyway.
    at: Instant,
    answer: Answer,
}

/// A targeted snapshot on the way, and what arrived from that peer meanwhile.
#[derive(Debug)]
pub(super) struct Repair {
    pub(super) generation: u64,
    /// (sequence, publication time, deltas) of every message received since the request;
    /// no deltas for messages that carry none (heartbeats). Replayed deltas' lag counts
    /// from their publication, so it includes the repair.
    pub(super) buffer: Vec<(u64, u64, Vec<BookingDelta>)>,
    pub(super) overflowed: bool,
}

#[derive(Debug)]
pub(super) struct Peer {
    pub(super) last_seen: Instant,
    pub(super) lease: Duration,
    pub(super) mismatches: u32,
    pub(super) repair: Option<Repair>,
    /// The last repair failed: try again on its next heartbeat.
    pub(super) needs_repair: bool,
}

pub struct PeerSyncState {
    pub(super) bus: Arc<dyn Bus>,
    cluster: String,
    pub(super) bookings_subject: String,
    pub(super) snapshot_subject: String,
    pool: PoolRole,
    pub(super) me: RouterId,
    pub(super) router: RouterHandle,
    pub(super) config: PeerSyncConfig,
    ready: watch::Sender<bool>,
    /// The live peers, for the router's room credits.
    pub(super) peers_out: watch::Sender<Vec<RouterId>>,
    pub(super) myself: ActorRef<PeerSyncMsg>,
    pub(super) outbox: Outbox,
    /// Index of the last own delta sequenced (the router's count of deltas handed over).
    sequenced: u64,
    deferred: VecDeque<Deferred>,
    pub(super) tracker: SeqTracker,
    pub(super) peers: HashMap<RouterId, Peer>,
    pub(super) generation: u64,
    pub(super) counters: PeerSyncCounters,
    pub(super) wire: WireCounters,
    /// Forwarders of the subscriptions and of the delta queue; aborted with this state.
    pub(super) tasks: OwnedTasks,
    /// When this router's bus connection was first seen down (`None`: up).
    bus_down_since: Option<Instant>,
    /// Notices when this node did not run (peers' leases count only the time it listened).
    pub(super) vigil: Vigil,
}

impl std::fmt::Debug for PeerSyncState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerSyncState")
            .field("me", &self.me)
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl PeerSyncState {
    pub(super) fn new(args: PeerSyncArgs, myself: ActorRef<PeerSyncMsg>) -> Self {
        // After a restart, the peers known before stay members until their lease runs out
        // here too (room credits must not see live peers leave and come back).
        let known: HashMap<RouterId, Peer> = args
            .peers
            .borrow()
            .iter()
            .map(|id| {
                let peer = Peer {
                    last_seen: Instant::now(),
                    lease: args.config.lease,
                    mismatches: 0,
                    repair: None,
                    needs_repair: false,
                };
                (*id, peer)
            })
            .collect();
        let heartbeat_every = args.config.heartbeat_every;
        Self {
            bus: args.bus,
            cluster: args.subjects.cluster().to_owned(),
            bookings_subject: args.subjects.bookings(args.pool),
            snapshot_subject: args.subjects.snapshot(args.pool),
            pool: args.pool,
            me: args.me,
            router: args.router,
            config: args.config,
            ready: args.ready,
            peers_out: args.peers,
            myself,
            outbox: Outbox::new(args.subjects.cluster(), args.me.0),
            sequenced: 0,
            deferred: VecDeque::new(),
            tracker: SeqTracker::default(),
            peers: known,
            generation: 0,
            counters: PeerSyncCounters::default(),
            wire: WireCounters::default(),
            tasks: OwnedTasks::default(),
            bus_down_since: None,
            vigil: Vigil::new(heartbeat_every, Instant::now()),
        }
    }

    pub(super) fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Sequences and publishes one message on the bookings subject.
    pub(super) async fn publish(&mut self, body: BookingMsg) {
        let payload = match self.outbox.seal(&self.bookings_subject, body) {
            Ok(payload) => payload,
            Err(error) => {
                self.counters.dropped += 1;
                tracing::warn!(%error, "booking message not encodable");
                return;
            }
        };
        match self
            .bus
            .publish(self.bookings_subject.clone(), payload)
            .await
        {
            Ok(()) => self.counters.published += 1,
            Err(error) => {
                self.counters.publish_errors += 1;
                tracing::warn!(%error, "booking message not published");
            }
        }
    }

    fn reply_body(&self, state: OwnState) -> SnapshotReply {
        SnapshotReply {
            owner: self.me.0,
            last_seq: self.outbox.last_seq(&self.bookings_subject),
            bookings: state.bookings,
            reservations: state.reservations,
        }
    }

    /// Our sequence 1: our full state as it is now. Returns how many own deltas it reflects
    /// (the caller skips those still queued), or `None` when the router did not answer.
    pub(super) async fn announce(&mut self) -> Option<u64> {
        match self.router.own_state().await {
            Ok(state) => {
                let reflected = state.deltas_sent;
                let body = self.reply_body(state);
                self.publish(BookingMsg::Snapshot(body)).await;
                Some(reflected)
            }
            Err(_) => {
                self.counters.router_gone += 1;
                None
            }
        }
    }

    /// Own deltas up to index `n` count as sequenced (a published snapshot reflects them).
    pub(super) fn sequenced_through(&mut self, n: u64) {
        self.sequenced = self.sequenced.max(n);
    }

    /// Asks every peer for its snapshot; they broadcast it in their booking streams.
    pub(super) async fn ask_everyone(&mut self) {
        let ask = SnapshotRequest { owner: None };
        match self.outbox.seal(&self.snapshot_subject, ask) {
            Ok(payload) => {
                self.counters.snapshots_requested += 1;
                if self
                    .bus
                    .publish(self.snapshot_subject.clone(), payload)
                    .await
                    .is_err()
                {
                    self.counters.publish_errors += 1;
                }
            }
            Err(_) => self.counters.dropped += 1,
        }
    }

    /// Publishes own deltas as few messages as exactness allows: a run is cut where a
    /// deferred heartbeat or snapshot waits for it (the answer must follow exactly the deltas
    /// it reflects) and at `MAX_DELTAS_PER_MESSAGE`.
    pub(super) async fn own_deltas(&mut self, batch: Vec<OwnDelta>) {
        let mut run = Vec::with_capacity(batch.len().min(MAX_DELTAS_PER_MESSAGE));
        let mut last = self.sequenced;
        for OwnDelta { index, delta } in batch {
            run.push(delta);
            last = last.max(index);
            let answer_waits = self.deferred.front().is_some_and(|d| d.after <= last);
            if answer_waits || run.len() >= MAX_DELTAS_PER_MESSAGE {
                self.publish_run(&mut run, last).await;
            }
        }
        self.publish_run(&mut run, last).await;
    }

    /// One `Deltas` message of `run` (emptied), whose last delta has index `last`; then the
    /// answers waiting for it.
    async fn publish_run(&mut self, run: &mut Vec<BookingDelta>, last: u64) {
        if run.is_empty() {
            return;
        }
        self.counters.own_deltas += run.len() as u64;
        self.publish(BookingMsg::Deltas(std::mem::take(run))).await;
        self.sequenced = self.sequenced.max(last);
        self.flush_deferred().await;
    }

    /// Our digest, published right after the own deltas it reflects.
    async fn defer_heartbeat(&mut self) {
        match self.router.digest_of(self.me).await {
            Ok(d) => self.defer(d.deltas_sent, Answer::Heartbeat(d.digest)).await,
            Err(_) => self.counters.router_gone += 1,
        }
    }

    /// Our full state, sent right after the own deltas it reflects.
    async fn defer_snapshot(&mut self, target: Target) {
        match self.router.own_state().await {
            Ok(state) => {
                let after = state.deltas_sent;
                let answer = match target {
                    Target::Broadcast => Answer::Broadcast(state),
                    Target::Reply(inbox) => Answer::Reply(inbox, state),
                };
                self.defer(after, answer).await;
            }
            Err(_) => self.counters.router_gone += 1,
        }
    }

    async fn defer(&mut self, after: u64, answer: Answer) {
        if self.deferred.len() >= self.config.max_deferred {
            self.counters.dropped += 1;
            return;
        }
        self.deferred.push_back(Deferred {
            after,
            at: Instant::now(),
            answer,
        });
        self.flush_deferred().await;
    }

    async fn flush_deferred(&mut self) {
        while self
            .deferred
            .front()
            .is_some_and(|d| d.after <= self.sequenced)
        {
            let Some(Deferred { answer, .. }) = self.deferred.pop_front() else {
                break;
            };
            match answer {
                Answer::Heartbeat(digest) => {
                    let lease_ms = millis(self.config.lease);
                    self.publish(BookingMsg::Heartbeat { digest, lease_ms })
                        .await;
                    self.counters.heartbeats_sent += 1;
                }
                Answer::Broadcast(state) => {
                    let body = self.reply_body(state);
                    self.publish(BookingMsg::Snapshot(body)).await;
                    self.counters.snapshots_served += 1;
                }
                Answer::Reply(inbox, state) => {
                    let envelope = Envelope {
                        v: WIRE_VERSION,
                        cluster: self.cluster.clone(),
                        sender: self.me.0,
                        seq: 0,
                        sent_at_us: wire::now_us(),
                        body: self.reply_body(state),
                    };
                    let sent = match wire::encode(&envelope) {
                        Ok(payload) => self.bus.publish(inbox, payload).await.is_ok(),
                        Err(_) => false,
                    };
                    if sent {
                        self.counters.snapshots_served += 1;
                    } else {
                        self.counters.publish_errors += 1;
                    }
                }
            }
        }
    }

    /// The router counts a delta as handed over once it is in the queue, so every one of
    /// them reaches us, and a missing index is skipped over by the next delta's index.
    /// Should the last ones before an answer be missing, it is published once it has waited
    /// a whole heartbeat period (peers then see the digest drift and repair), rather than
    /// stalling heartbeats until peers expire us.
    async fn force_stuck(&mut self) {
        let now = Instant::now();
        let stuck = self.deferred.front().and_then(|d| {
            (now.saturating_duration_since(d.at) >= self.config.heartbeat_every).then_some(d.after)
        });
        if let Some(after) = stuck {
            self.counters.deferred_forced += 1;
            tracing::warn!(
                sequenced = self.sequenced,
                after,
                "own deltas missing; publishing without them"
            );
            self.sequenced = self.sequenced.max(after);
            self.flush_deferred().await;
        }
    }

    /// A request on the snapshot subject: a targeted one for us is answered on its reply
    /// subject; a broadcast one in our booking stream.
    pub(super) async fn snapshot_ask(&mut self, message: BusMessage) {
        let envelope = match wire::decode::<SnapshotRequest>(&message.payload, &self.cluster) {
            Ok(envelope) => envelope,
            Err(error) => {
                self.wire.count(&error);
                return;
            }
        };
        if envelope.sender == self.me.0 {
            return; // our own ask
        }
        match (envelope.body.owner, message.reply) {
            (None, _) => self.defer_snapshot(Target::Broadcast).await,
            (Some(owner), Some(inbox)) if owner == self.me.0 => {
                self.defer_snapshot(Target::Reply(inbox)).await;
            }
            (Some(owner), None) if owner == self.me.0 => {
                self.wire.malformed.fetch_add(1, Ordering::Relaxed);
            }
            (Some(_), _) => {} // someone else's
        }
    }

    /// Heartbeat, then expire peers silent for their lease.
    pub(super) async fn tick(&mut self) {
        self.force_stuck().await;
        self.defer_heartbeat().await;
        let now = Instant::now();
        // Silence is evidence only while this end hears the bus: with the connection down,
        // every peer is kept (with its bookings); when it is back, every peer gets a fresh
        // lease and is asked for its full state (what changed meanwhile was not heard).
        if !self.bus.connected() {
            if self.bus_down_since.is_none() {
                self.bus_down_since = Some(now);
                self.counters.bus_outages += 1;
                tracing::warn!(pool = ?self.pool, "bus connection down: peers are kept until it is back");
            }
            return;
        }
        if let Some(since) = self.bus_down_since.take() {
            tracing::info!(
                pool = ?self.pool,
                down_ms = millis(now.saturating_duration_since(since)),
                "bus connection back: peers' leases start again, their snapshots are asked for"
            );
            for peer in self.peers.values_mut() {
                peer.last_seen = now;
            }
            self.ask_everyone().await;
        }
        let expired: Vec<RouterId> = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.last_seen) >= p.lease)
            .map(|(id, _)| *id)
            .collect();
        let peers = &self.peers;
        self.tracker
            .retain(|sender| peers.contains_key(&RouterId(sender)));
        for owner in expired {
            self.peers.remove(&owner);
            self.tracker.forget(owner.0);
            self.counters.expired_peers += 1;
            tracing::info!(peer = %owner, "peer expired: its bookings are dropped");
            if self.router.cast(RouterMsg::PeerGone(owner)).is_err() {
                self.counters.router_gone += 1;
            }
        }
        self.publish_peers();
    }

    pub(super) fn set_ready(&mut self) {
        self.ready.send_replace(true);
    }

    pub(super) fn observe(&self) -> PeerSyncSnapshot {
        let now = Instant::now();
        let mut peers: Vec<PeerView> = self
            .peers
            .iter()
            .map(|(id, p)| PeerView {
                id: *id,
                last_seen_ms: millis(now.saturating_duration_since(p.last_seen)),
                lease_ms: millis(p.lease),
                last_seq: self.tracker.last(id.0).unwrap_or(0),
                repairing: p.repair.is_some(),
                mismatches: p.mismatches,
            })
            .collect();
        peers.sort_by_key(|p| p.id);
        PeerSyncSnapshot {
            me: self.me,
            pool: self.pool,
            ready: *self.ready.borrow(),
            bus_connected: self.bus_down_since.is_none(),
            last_seq: self.outbox.last_seq(&self.bookings_subject),
            deferred: self.deferred.len(),
            peers,
            counters: self.counters.clone(),
            decode_errors: DecodeErrors {
                malformed: self.wire.malformed.load(Ordering::Relaxed),
                unknown_version: self.wire.unknown_version.load(Ordering::Relaxed),
                foreign_cluster: self.wire.foreign_cluster.load(Ordering::Relaxed),
            },
        }
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
