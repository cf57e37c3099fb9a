//! The node's families: built fresh for each scrape from what the actors answered
//! (`record.rs`), then registered in that scrape's registry, so a worker or class that is
//! gone leaves no series behind.

use super::{CountedHistogram, Counters, Gauges};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// One scrape's node families, filled by `record.rs` and then registered.
#[derive(Debug, Default)]
pub(in crate::metrics) struct NodeFamilies {
    /// The model of the pool being recorded (`None`: the default pool): a `model` label on
    /// its series.
    pub model: Option<String>,
    pub queue_depth: Gauges,
    pub queue_tokens: Gauges,
    pub booked_prefill: Gauges,
    pub booked_decode: Gauges,
    pub reserved_decode: Gauges,
    pub worker_requests: Gauges,
    pub registered_workers: Gauges,
    pub engine_running: Gauges,
    pub engine_waiting: Gauges,
    pub engine_kv_used: Gauges,
    pub engine_kv_total: Gauges,
    pub engine_link_up: Gauges,
    pub engine_kv_events_silent: Gauges,
    pub credits_held: Gauges,
    pub bus_connected: Gauges,
    pub peer_goodbyes: Counters,
    pub bus_outages: Counters,
    pub leases_kept_stopped: Counters,
    pub credits_used: Gauges,
    pub credits_outstanding: Gauges,
    pub prefill_credits_held: Gauges,
    pub prefill_credits_used: Gauges,
    pub prefill_credits_outstanding: Gauges,
    pub credit_messages: Counters,
    pub lag: Family<super::Labels, CountedHistogram>,
    pub admissions: Counters,
    pub room_queries: Counters,
    pub room_published: Counter,
    pub room_publish_errors: Counter,
    pub room_received: Counter,
    pub kv_events: Counters,
    pub gaps: Counters,
    pub snapshots_applied: Counters,
    pub expired_peers: Counters,
    pub decode_errors: Counters,
    pub registry_refused: Counters,
}

impl NodeFamilies {
    /// A registry (prefix `switchyard`) holding every family.
    pub fn into_registry(self) -> Registry {
        let mut registry = Registry::with_prefix("switchyard");
        self.register_gauges(&mut registry);
        self.register_counters(&mut registry);
        registry.register(
            "peer_sync_lag_seconds",
            "Peer-sync lag (a peer's delta from its publication to its application here, both wall clocks), by pool",
            self.lag.clone(),
        );
        registry
    }

    fn register_gauges(&self, r: &mut Registry) {
        r.register(
            "queue_depth",
            "Requests waiting in a class queue, by pool and policy class",
            self.queue_depth.clone(),
        );
        r.register(
            "queue_tokens",
            "Prompt tokens waiting in a class queue, by pool and policy class",
            self.queue_tokens.clone(),
        );
        r.register(
            "booked_prefill_tokens",
            "Prefill tokens booked on a worker rank (all routers' bookings), by pool, worker and dp rank",
            self.booked_prefill.clone(),
        );
        r.register(
            "booked_decode_blocks",
            "KV blocks booked for decode on a worker rank, by pool, worker and dp rank",
            self.booked_decode.clone(),
        );
        r.register(
            "reserved_decode_blocks",
            "KV blocks reserved for pending decode legs on a worker rank, by pool, worker and dp rank",
            self.reserved_decode.clone(),
        );
        r.register(
            "worker_requests",
            "Requests booked on a worker rank, by pool, worker and dp rank",
            self.worker_requests.clone(),
        );
        r.register(
            "registered_workers",
            "Workers the registry holds a live lease for, by pool",
            self.registered_workers.clone(),
        );
        r.register(
            "engine_requests_running",
            "Requests the engine itself reports running (its own metrics, not router bookings), by pool, worker and dp rank",
            self.engine_running.clone(),
        );
        r.register(
            "engine_requests_waiting",
            "Requests the engine itself reports waiting in its queue, by pool, worker and dp rank",
            self.engine_waiting.clone(),
        );
        r.register(
            "engine_kv_used_blocks",
            "KV blocks the engine itself reports in use, by pool, worker and dp rank",
            self.engine_kv_used.clone(),
        );
        r.register(
            "engine_kv_total_blocks",
            "KV blocks per rank the worker announced, by pool, worker and dp rank",
            self.engine_kv_total.clone(),
        );
        r.register(
            "engine_link_up",
            "1 when this node's engine link has its engine in the fleet, else 0, by engine URL",
            self.engine_link_up.clone(),
        );
        r.register(
            "engine_kv_events_silent",
            "1 while this node's engine prefills but no KV event reaches its link, else 0, by engine URL",
            self.engine_kv_events_silent.clone(),
        );
        r.register(
            "bus_connected",
            "1 while this replica's bus (NATS) connection is up, as its peer sync last saw it, by pool",
            self.bus_connected.clone(),
        );
        r.register(
            "room_credits_held_blocks",
            "Decode room credits this replica holds on a rank (granted by the rank's owner), by pool, worker and dp rank",
            self.credits_held.clone(),
        );
        r.register(
            "room_credits_used_blocks",
            "Held room credits that this replica's own reservations and bookings use, by pool, worker and dp rank",
            self.credits_used.clone(),
        );
        r.register(
            "room_credits_outstanding_blocks",
            "Room credits out on a rank this replica owns (all holders), by pool, worker and dp rank",
            self.credits_outstanding.clone(),
        );
        r.register(
            "room_prefill_credits_held_tokens",
            "Prefill room credits (prompt tokens) this replica holds on a rank of an aggregated or prefill pool, by pool, worker and dp rank",
            self.prefill_credits_held.clone(),
        );
        r.register(
            "room_prefill_credits_used_tokens",
            "Held prefill credits that this replica's own bookings still in prefill use, by pool, worker and dp rank",
            self.prefill_credits_used.clone(),
        );
        r.register(
            "room_prefill_credits_outstanding_tokens",
            "Prefill credits out on a rank this replica owns (all holders), by pool, worker and dp rank",
            self.prefill_credits_outstanding.clone(),
        );
    }

    fn register_counters(&self, r: &mut Registry) {
        r.register(
            "admissions",
            "Scheduler admission outcomes, by pool and outcome",
            self.admissions.clone(),
        );
        r.register(
            "room_queries",
            "Times the paired decode pool was asked for room, by pool",
            self.room_queries.clone(),
        );
        r.register(
            "room_changed_published",
            "RoomChanged signals published on the bus",
            self.room_published.clone(),
        );
        r.register(
            "room_changed_publish_errors",
            "RoomChanged signals that could not be published",
            self.room_publish_errors.clone(),
        );
        r.register(
            "room_changed_received",
            "RoomChanged signals received from the bus",
            self.room_received.clone(),
        );
        r.register(
            "peer_sync_goodbyes",
            "Peers that said goodbye when stopping (dropped at once), by pool",
            self.peer_goodbyes.clone(),
        );
        r.register(
            "peer_sync_bus_outages",
            "Times this replica's bus connection was seen down (peers kept, not expired), by pool",
            self.bus_outages.clone(),
        );
        r.register(
            "leases_kept_after_stop",
            "Times this node was found stopped (nothing ran: a paused VM or process, a starved machine) while it held leases, which were extended by the stop instead of run out; by component (registry: workers, peer_sync: peers) and pool",
            self.leases_kept_stopped.clone(),
        );
        r.register(
            "room_credit_messages",
            "Room-credit exchanges of this replica, by pool and kind (ask_sent, grant_received, denial_received, local_grant, grant_given, denial_given)",
            self.credit_messages.clone(),
        );
        r.register(
            "kv_events",
            "KV cache events forwarded to the router, by pool and kind",
            self.kv_events.clone(),
        );
        r.register(
            "peer_sync_gaps",
            "Sequence gaps seen in peers' booking streams, by pool",
            self.gaps.clone(),
        );
        r.register(
            "peer_sync_snapshots_applied",
            "Peers' ledger snapshots applied, by pool",
            self.snapshots_applied.clone(),
        );
        r.register(
            "peer_sync_expired_peers",
            "Peers dropped after their lease ran out, by pool",
            self.expired_peers.clone(),
        );
        r.register(
            "wire_decode_errors",
            "Bus payloads refused at decoding, by component and kind",
            self.decode_errors.clone(),
        );
        r.register(
            "registry_announcements_refused",
            "Worker announcements refused by the registry, by reason (endpoint_not_allowed, invalid_spec, unserved_pool, pool_mismatch, stale)",
            self.registry_refused.clone(),
        );
    }
}
