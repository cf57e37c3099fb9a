//! The node's state as Prometheus families, built fresh from one scrape of its actors
//! (`crate::node_metrics`) and encoded after the frontend's own metrics by
//! [`super::Metrics::scrape`]. The families and their labels are listed in `metrics.rs`.

use super::metrics::Labels;
use crate::node_metrics::{NodeScrape, pool_label};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

type FloatGauge = Gauge<f64, AtomicU64>;

/// A counter or gauge value from a `u64` (saturating at `i64::MAX` for a gauge).
fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

/// Microseconds as seconds.
fn us_to_secs(us: u64) -> f64 {
    Duration::from_micros(us).as_secs_f64()
}

/// One scrape's node families, in a registry of their own (built fresh each scrape, so a
/// worker or pool that is gone leaves no series behind).
pub(super) fn node_registry(node: &NodeScrape) -> Registry {
    let mut registry = Registry::with_prefix("switchyard");
    let queue_depth = Family::<Labels, Gauge>::default();
    let queue_tokens = Family::<Labels, Gauge>::default();
    let booked_prefill = Family::<Labels, Gauge>::default();
    let booked_decode = Family::<Labels, Gauge>::default();
    let reserved_decode = Family::<Labels, Gauge>::default();
    let worker_requests = Family::<Labels, Gauge>::default();
    let registered_workers = Family::<Labels, Gauge>::default();
    let lag = Family::<Labels, FloatGauge>::default();
    let lag_samples = Family::<Labels, Counter>::default();
    let admissions = Family::<Labels, Counter>::default();
    let room_queries = Family::<Labels, Counter>::default();
    let room_published = Counter::<u64>::default();
    let room_publish_errors = Counter::<u64>::default();
    let room_received = Counter::<u64>::default();
    let kv_events = Family::<Labels, Counter>::default();
    let gaps = Family::<Labels, Counter>::default();
    let snapshots_applied = Family::<Labels, Counter>::default();
    let expired_peers = Family::<Labels, Counter>::default();
    let decode_errors = Family::<Labels, Counter>::default();

    for (pool, snapshot) in &node.routers {
        let pool = pool_label(*pool);
        let scheduler = &snapshot.scheduler;
        for class in &scheduler.queue.classes {
            let l = labels([
                ("pool", pool),
                ("class", node.class_name(class.class.index())),
            ]);
            queue_depth
                .get_or_create(&l)
                .set(gauge_value(class.len as u64));
            queue_tokens
                .get_or_create(&l)
                .set(gauge_value(class.tokens));
        }
        for rank in &scheduler.ledger.ranks {
            let worker = rank.rank.worker.0.to_string();
            let dp_rank = rank.rank.dp_rank.to_string();
            let l = labels([("pool", pool), ("worker", &worker), ("dp_rank", &dp_rank)]);
            booked_prefill
                .get_or_create(&l)
                .set(gauge_value(rank.prefill_tokens));
            booked_decode
                .get_or_create(&l)
                .set(gauge_value(rank.decode_blocks));
            reserved_decode
                .get_or_create(&l)
                .set(gauge_value(rank.reserved_blocks));
            worker_requests
                .get_or_create(&l)
                .set(i64::from(rank.requests));
        }
        let stats = &scheduler.stats;
        for (outcome, value) in [
            ("admitted", stats.admitted),
            ("queued", stats.queued),
            ("rejected", stats.rejected),
            ("admitted_upstream", stats.admitted_upstream),
        ] {
            admissions
                .get_or_create(&labels([("pool", pool), ("outcome", outcome)]))
                .inc_by(value);
        }
        room_queries
            .get_or_create(&labels([("pool", pool)]))
            .inc_by(stats.room_queries);
        let peer_lag = &snapshot.peer_lag_us;
        for (quantile, us) in [("0.5", peer_lag.p50_us), ("0.99", peer_lag.p99_us)] {
            lag.get_or_create(&labels([("pool", pool), ("quantile", quantile)]))
                .set(us_to_secs(us));
        }
        lag_samples
            .get_or_create(&labels([("pool", pool)]))
            .inc_by(peer_lag.count);
    }

    let decode_error = |component: &str, kind: &str, value: u64| {
        decode_errors
            .get_or_create(&labels([("component", component), ("kind", kind)]))
            .inc_by(value);
    };
    for (pool, snapshot) in &node.peer_syncs {
        let l = labels([("pool", pool_label(*pool))]);
        let counters = &snapshot.counters;
        gaps.get_or_create(&l).inc_by(counters.gaps);
        snapshots_applied
            .get_or_create(&l)
            .inc_by(counters.snapshots_applied);
        expired_peers
            .get_or_create(&l)
            .inc_by(counters.expired_peers);
        let errors = &snapshot.decode_errors;
        decode_error("peer_sync", "malformed", errors.malformed);
        decode_error("peer_sync", "unknown_version", errors.unknown_version);
        decode_error("peer_sync", "foreign_cluster", errors.foreign_cluster);
    }
    for (pool, snapshot) in &node.kv_events {
        let pool = pool_label(*pool);
        let events = &snapshot.counters.events;
        for (kind, value) in [
            ("stored", events.stored),
            ("removed", events.removed),
            ("cleared", events.cleared),
        ] {
            kv_events
                .get_or_create(&labels([("pool", pool), ("kind", kind)]))
                .inc_by(value);
        }
        let edge = &snapshot.edge;
        decode_error("kv_events", "malformed", edge.malformed);
        decode_error("kv_events", "unknown_version", edge.unknown_version);
        decode_error("kv_events", "foreign_cluster", edge.foreign_cluster);
    }
    if let Some(snapshot) = &node.registry {
        for pool in &snapshot.pools {
            let count = snapshot.workers.iter().filter(|w| w.pool == *pool).count();
            registered_workers
                .get_or_create(&labels([("pool", pool_label(*pool))]))
                .set(gauge_value(count as u64));
        }
        let edge = &snapshot.edge;
        decode_error("registry", "malformed", edge.malformed);
        decode_error("registry", "unknown_version", edge.unknown_version);
        decode_error("registry", "foreign_cluster", edge.foreign_cluster);
    }
    let room = &node.room;
    decode_error("room", "malformed", room.malformed);
    decode_error("room", "unknown_version", room.unknown_version);
    decode_error("room", "foreign_cluster", room.foreign_cluster);
    room_published.inc_by(room.published);
    room_publish_errors.inc_by(room.publish_errors);
    room_received.inc_by(room.received);

    registry.register(
        "queue_depth",
        "Requests waiting in a class queue, by pool and policy class",
        queue_depth,
    );
    registry.register(
        "queue_tokens",
        "Prompt tokens waiting in a class queue, by pool and policy class",
        queue_tokens,
    );
    registry.register(
        "booked_prefill_tokens",
        "Prefill tokens booked on a worker rank (all routers' bookings), by pool, worker and dp rank",
        booked_prefill,
    );
    registry.register(
        "booked_decode_blocks",
        "KV blocks booked for decode on a worker rank, by pool, worker and dp rank",
        booked_decode,
    );
    registry.register(
        "reserved_decode_blocks",
        "KV blocks reserved for pending decode legs on a worker rank, by pool, worker and dp rank",
        reserved_decode,
    );
    registry.register(
        "worker_requests",
        "Requests booked on a worker rank, by pool, worker and dp rank",
        worker_requests,
    );
    registry.register(
        "registered_workers",
        "Workers the registry holds a live lease for, by pool",
        registered_workers,
    );
    registry.register(
        "peer_sync_lag_seconds",
        "Peer-sync lag (a peer's delta from publication to application here), by pool and quantile",
        lag,
    );
    registry.register(
        "peer_sync_lag_samples",
        "Peer deltas whose lag was measured, by pool",
        lag_samples,
    );
    registry.register(
        "admissions",
        "Scheduler admission outcomes, by pool and outcome",
        admissions,
    );
    registry.register(
        "room_queries",
        "Times the paired decode pool was asked for room, by pool",
        room_queries,
    );
    registry.register(
        "room_changed_published",
        "RoomChanged signals published on the bus",
        room_published,
    );
    registry.register(
        "room_changed_publish_errors",
        "RoomChanged signals that could not be published",
        room_publish_errors,
    );
    registry.register(
        "room_changed_received",
        "RoomChanged signals received from the bus",
        room_received,
    );
    registry.register(
        "kv_events",
        "KV cache events forwarded to the router, by pool and kind",
        kv_events,
    );
    registry.register(
        "peer_sync_gaps",
        "Sequence gaps seen in peers' booking streams, by pool",
        gaps,
    );
    registry.register(
        "peer_sync_snapshots_applied",
        "Peers' ledger snapshots applied, by pool",
        snapshots_applied,
    );
    registry.register(
        "peer_sync_expired_peers",
        "Peers dropped after their lease ran out, by pool",
        expired_peers,
    );
    registry.register(
        "wire_decode_errors",
        "Bus payloads refused at decoding, by component and kind",
        decode_errors,
    );
    registry
}
