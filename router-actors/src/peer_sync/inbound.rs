//! The inbound side: peers' booking streams decoded at the edge, sequence tracking per
//! sender, digest checks on heartbeats, and repair by snapshot.
//!
//! Per message from sender S with sequence n:
//! - own echo: ignored; undecodable: counted by kind, dropped;
//! - a `Snapshot` at n = 1 from a sender we track: S restarted; start over from it;
//! - Stale: counted, dropped (last-seen is not refreshed: a restarted sender whose first
//!   message was lost expires after its lease and is then learnt afresh);
//! - otherwise: last-seen refreshed; each delta of a `Deltas` message is forwarded, in
//!   order, as `RouterMsg::Peer`; a snapshot
//!   replaces S's state (`PeerReplace`) and the tracker continues from n; a heartbeat's
//!   digest is compared with what our ledger holds under S;
//! - Gap: counted and repaired; First with n > 1 (we missed S's history): repaired;
//!   `mismatch_threshold` consecutive digest mismatches: repaired.
//!
//! A repair asks S alone (`SnapshotRequest { owner: Some(S) }`, request/reply) and buffers
//! what arrives from S meanwhile. The reply reflects exactly S's messages up to its
//! `last_seq` L; it replaces S's state, the buffered deltas after L are applied again in
//! order, and the tracker continues from the later of L and the last sequence received.
//! Sequences after L missing from the buffer mean another loss: the repair repeats.

use super::PeerSyncMsg;
use super::state::{Peer, PeerSyncState, Repair};
use crate::bus::BusMessage;
use crate::router::RouterMsg;
use crate::wire::{self, BookingMsg, SeqEvent, SnapshotReply, SnapshotRequest};
use router_core::Holdings;
use router_core::RouterId;
use tokio::time::Instant;

/// A peer's advertised lease is honoured up to this many times our own (a bad value must
/// not keep a dead peer's bookings forever).
const MAX_LEASE_FACTOR: u32 = 10;

impl PeerSyncState {
    pub(super) async fn inbound(&mut self, message: &BusMessage) {
        // Our own messages come back on the subject: drop them by their first bytes, before
        // reading them (one that slipped through is dropped after decoding, below).
        if self.outbox.sealed_here(&message.payload) {
            self.counters.echoes += 1;
            return;
        }
        let envelope = match wire::decode::<BookingMsg>(&message.payload, self.cluster()) {
            Ok(envelope) => envelope,
            Err(error) => {
                self.wire.count(&error);
                return;
            }
        };
        let owner = RouterId(envelope.sender);
        if owner == self.me {
            self.counters.echoes += 1;
            return;
        }
        let seq = envelope.seq;
        let sent_at_us = envelope.sent_at_us;
        if seq == 1
            && matches!(envelope.body, BookingMsg::Snapshot(_))
            && self.tracker.last(owner.0).is_some()
        {
            // The sender restarted: its sequence starts again with its full state.
            self.tracker.forget(owner.0);
            if let Some(peer) = self.peers.get_mut(&owner) {
                peer.repair = None;
            }
        }
        let event = self.tracker.observe(owner.0, seq);
        if event == SeqEvent::Stale {
            self.counters.stale += 1;
            return;
        }
        let lease = self.config.lease;
        if let std::collections::hash_map::Entry::Vacant(entry) = self.peers.entry(owner) {
            entry.insert(Peer {
                last_seen: Instant::now(),
                lease,
                mismatches: 0,
                repair: None,
                needs_repair: false,
            });
            self.publish_peers();
        }
        let Some(peer) = self.peers.get_mut(&owner) else {
            return;
        };
        peer.last_seen = Instant::now();
        if let SeqEvent::Gap { missed } = event {
            self.counters.gaps += 1;
            self.counters.missed += missed;
        }
        let limit = self.config.repair_buffer;
        let max_lease = self.config.lease.saturating_mul(MAX_LEASE_FACTOR);
        let mut heartbeat = None;
        match envelope.body {
            BookingMsg::Goodbye => {
                self.peer_left(owner);
                return;
            }
            BookingMsg::Snapshot(reply) => {
                // A full state: whatever was missed before it no longer matters.
                self.apply_snapshot(owner, reply, seq);
                return;
            }
            BookingMsg::Deltas(deltas) => {
                if let Some(repair) = &mut peer.repair {
                    buffer(repair, limit, seq, sent_at_us, deltas.clone());
                }
                for delta in deltas {
                    self.forward(
                        owner,
                        RouterMsg::Peer {
                            owner,
                            delta,
                            sent_at_us: Some(sent_at_us),
                        },
                    );
                }
            }
            BookingMsg::Heartbeat { digest, lease_ms } => {
                if lease_ms > 0 {
                    peer.lease = std::time::Duration::from_millis(lease_ms).min(max_lease);
                }
                match &mut peer.repair {
                    Some(repair) => buffer(repair, limit, seq, sent_at_us, Vec::new()),
                    None => heartbeat = Some(digest),
                }
            }
        }
        match event {
            SeqEvent::Gap { .. } => self.start_repair(owner),
            SeqEvent::First if seq > 1 => self.start_repair(owner),
            _ => {}
        }
        if let Some(digest) = heartbeat {
            self.check_digest(owner, digest).await;
        }
    }

    fn forward(&mut self, owner: RouterId, msg: RouterMsg) {
        if matches!(msg, RouterMsg::Peer { .. }) {
            self.counters.applied += 1;
        }
        if self.router.cast(msg).is_err() {
            self.counters.router_gone += 1;
            tracing::debug!(peer = %owner, "router gone; peer message not applied");
        }
    }

    /// A full state in the sender's own stream: it reflects exactly its messages before `seq`.
    fn apply_snapshot(&mut self, owner: RouterId, reply: SnapshotReply, seq: u64) {
        if reply.owner != owner.0 {
            self.wire
                .malformed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        self.forward(
            owner,
            RouterMsg::PeerReplace {
                owner,
                state: Holdings {
                    bookings: reply.bookings,
                    reservations: reply.reservations,
                },
            },
        );
        self.tracker.reset(owner.0, seq);
        if let Some(peer) = self.peers.get_mut(&owner) {
            // Whatever a repair in flight would bring is older than this.
            peer.repair = None;
            peer.needs_repair = false;
            peer.mismatches = 0;
        }
        self.counters.snapshots_applied += 1;
    }

    async fn check_digest(&mut self, owner: RouterId, digest: wire::Digest) {
        if self.peers.get(&owner).is_none_or(|p| p.repair.is_some()) {
            return; // a snapshot is on the way
        }
        let ours = match self.router.digest_of(owner).await {
            Ok(held) => held.digest,
            Err(_) => {
                self.counters.router_gone += 1;
                return;
            }
        };
        let threshold = self.config.mismatch_threshold.max(1);
        let Some(peer) = self.peers.get_mut(&owner) else {
            return;
        };
        let retry = std::mem::take(&mut peer.needs_repair);
        if ours == digest {
            peer.mismatches = 0;
        } else {
            self.counters.digest_mismatches += 1;
            peer.mismatches += 1;
            tracing::debug!(peer = %owner, ?ours, theirs = ?digest, "digest mismatch");
        }
        if retry || peer.mismatches >= threshold {
            peer.mismatches = 0;
            self.start_repair(owner);
        }
    }

    /// Asks `owner` alone for its snapshot, unless a request is already on the way.
    pub(super) fn start_repair(&mut self, owner: RouterId) {
        let Some(peer) = self.peers.get_mut(&owner) else {
            return;
        };
        if peer.repair.is_some() {
            return;
        }
        self.generation += 1;
        let generation = self.generation;
        peer.repair = Some(Repair {
            generation,
            buffer: Vec::new(),
            overflowed: false,
        });
        let ask = SnapshotRequest {
            owner: Some(owner.0),
        };
        let payload = match self.outbox.seal(&self.snapshot_subject, ask) {
            Ok(payload) => payload,
            Err(error) => {
                self.counters.dropped += 1;
                peer.repair = None;
                peer.needs_repair = true;
                tracing::warn!(%error, "snapshot request not encodable");
                return;
            }
        };
        self.counters.snapshots_requested += 1;
        let bus = self.bus.clone();
        let subject = self.snapshot_subject.clone();
        let cluster = self.cluster().to_owned();
        let timeout = self.config.snapshot_timeout;
        let actor = self.myself.clone();
        tokio::spawn(async move {
            let result = match bus.request(subject, payload, timeout).await {
                Ok(bytes) => wire::decode::<SnapshotReply>(&bytes, &cluster)
                    .map(|envelope| envelope.body)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            // The actor may have stopped meanwhile; nothing to do then.
            let _ = actor.cast(PeerSyncMsg::Repaired {
                owner,
                generation,
                result,
            });
        });
    }

    pub(super) fn repaired(
        &mut self,
        owner: RouterId,
        generation: u64,
        result: Result<SnapshotReply, String>,
    ) {
        let Some(peer) = self.peers.get_mut(&owner) else {
            return; // expired meanwhile
        };
        if peer.repair.as_ref().map(|r| r.generation) != Some(generation) {
            return; // superseded (a snapshot in its stream, a restart)
        }
        let Some(repair) = peer.repair.take() else {
            return;
        };
        let reply = match result {
            Ok(reply) if reply.owner == owner.0 => reply,
            Ok(_) | Err(_) => {
                self.counters.snapshot_failures += 1;
                peer.needs_repair = true;
                tracing::debug!(peer = %owner, "snapshot repair failed; retrying on its heartbeat");
                return;
            }
        };
        peer.mismatches = 0;
        let last_seq = reply.last_seq;
        self.forward(
            owner,
            RouterMsg::PeerReplace {
                owner,
                state: Holdings {
                    bookings: reply.bookings,
                    reservations: reply.reservations,
                },
            },
        );
        self.counters.snapshots_applied += 1;
        if repair.overflowed {
            self.counters.dropped += 1;
        }
        let mut next = last_seq.saturating_add(1);
        let mut complete = !repair.overflowed;
        for (seq, sent_at_us, deltas) in repair.buffer {
            if seq <= last_seq {
                continue;
            }
            if seq != next {
                complete = false;
            }
            next = seq.saturating_add(1);
            for delta in deltas {
                self.counters.replayed += 1;
                self.forward(
                    owner,
                    RouterMsg::Peer {
                        owner,
                        delta,
                        sent_at_us: Some(sent_at_us),
                    },
                );
            }
        }
        let last = self.tracker.last(owner.0).unwrap_or(0).max(last_seq);
        self.tracker.reset(owner.0, last);
        if !complete {
            self.start_repair(owner);
        }
    }
}

fn buffer(
    repair: &mut Repair,
    limit: usize,
    seq: u64,
    sent_at_us: u64,
    deltas: Vec<crate::wire::BookingDelta>,
) {
    if repair.buffer.len() < limit {
        repair.buffer.push((seq, sent_at_us, deltas));
    } else {
        repair.overflowed = true;
    }
}
