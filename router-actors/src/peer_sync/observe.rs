//! What the PeerSyncActor answers to `Observe`: the peers it knows (last seen, last
//! sequence, whether a repair is on the way) and its counters, serialisable for
//! `/debug/state` and asserted on by tests.

use router_core::{PoolRole, RouterId};
use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PeerSyncCounters {
    /// Messages published on the bookings subject (deltas, heartbeats, snapshots).
    pub published: u64,
    pub publish_errors: u64,
    /// Own deltas sequenced and published.
    pub own_deltas: u64,
    pub heartbeats_sent: u64,
    /// Peers' deltas forwarded to the local router (including replays after a repair).
    pub applied: u64,
    /// Deltas that arrived while a repair was on the way, applied again on its snapshot.
    pub replayed: u64,
    /// Sequence gaps seen, and the messages they skipped.
    pub gaps: u64,
    pub missed: u64,
    /// Duplicates or messages older than the last one from their sender: dropped.
    pub stale: u64,
    /// Our own messages seen on the subject: ignored.
    pub echoes: u64,
    /// Targeted snapshot requests sent (repairs), and the broadcast asks at start.
    pub snapshots_requested: u64,
    pub snapshots_served: u64,
    /// Peers' snapshots applied (targeted replies and broadcasts).
    pub snapshots_applied: u64,
    /// Repairs that got no usable answer (retried on the peer's next heartbeat).
    pub snapshot_failures: u64,
    /// Heartbeats whose digest disagreed with what our ledger holds for their sender.
    pub digest_mismatches: u64,
    pub expired_peers: u64,
    /// Peers that said goodbye (a replica stopping): dropped at once.
    pub goodbyes: u64,
    /// Times this router's bus connection was seen down (peers are not expired meanwhile).
    pub bus_outages: u64,
    /// Times this node was found to have been stopped (nothing ran: a paused VM or process,
    /// a starved machine) while it had peers: their leases were extended by the stop.
    pub leases_kept_stopped: u64,
    /// Given up on: encode failures, deferred heartbeats or answers over the cap, repair
    /// buffer overflow (the repair then repeats).
    pub dropped: u64,
    /// Heartbeats / answers published without the own deltas they wait for (see
    /// `force_stuck`): a delta went missing between the router and this actor.
    pub deferred_forced: u64,
    /// The local router did not answer (it is stopping).
    pub router_gone: u64,
}

/// Payloads refused at the edge, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DecodeErrors {
    pub malformed: u64,
    pub unknown_version: u64,
    pub foreign_cluster: u64,
}

impl DecodeErrors {
    pub fn total(&self) -> u64 {
        self.malformed + self.unknown_version + self.foreign_cluster
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerView {
    pub id: RouterId,
    /// Time since any message from it, in ms.
    pub last_seen_ms: u64,
    /// Its lease (its own advertised value once a heartbeat arrived).
    pub lease_ms: u64,
    pub last_seq: u64,
    /// A targeted snapshot is on the way.
    pub repairing: bool,
    /// Consecutive mismatching digests.
    pub mismatches: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerSyncSnapshot {
    pub me: RouterId,
    pub pool: PoolRole,
    pub ready: bool,
    /// This router's bus connection is up (false: peers are kept, not expired, until it is
    /// back; then every peer gets a fresh lease and is asked for its snapshot).
    pub bus_connected: bool,
    /// Our last sequence on the bookings subject.
    pub last_seq: u64,
    /// Heartbeats / snapshot answers waiting for their deltas to be sequenced.
    pub deferred: usize,
    /// Sorted by id.
    pub peers: Vec<PeerView>,
    pub counters: PeerSyncCounters,
    pub decode_errors: DecodeErrors,
}
