//! One scrape's node state written into its metric families, one small function per kind
//! of actor: routers (queues, ledgers, admission counters, peer-sync lag), peer-sync actors,
//! KV-events actors, the worker registry and the room bus. The peer-sync lag comes as the
//! router's own bucket counts and is rendered as a histogram (`CountedHistogram`). Every
//! label is bounded: pools and kinds are fixed sets, classes come from the profile,
//! `worker`/`dp_rank` are registered workers' ranks.

use super::families::{Labels, NodeFamilies};
use super::scrape::{NodeScrape, RoomCounts, pool_label};
use router_actors::kv_events::KvEventsSnapshot;
use router_actors::lag::LAG_BUCKETS_US;
use router_actors::peer_sync::PeerSyncSnapshot;
use router_actors::registry::RegistrySnapshot;
use router_actors::router::RouterSnapshot;
use router_core::PoolRole;
use router_core::credits::CreditKind;
use std::time::Duration;

/// The node families of the scraped pools: the default pool's series as they always were,
/// a model's pool's with a `model` label.
pub(super) fn node_families(pools: &[(Option<&str>, &NodeScrape)]) -> NodeFamilies {
    let mut f = NodeFamilies::default();
    for (model, node) in pools {
        f.model = model.map(str::to_owned);
        record_pool(&f, node);
    }
    f
}

fn record_pool(f: &NodeFamilies, node: &NodeScrape) {
    for (pool, snapshot) in &node.routers {
        router(f, node, *pool, snapshot);
    }
    for (pool, snapshot) in &node.peer_syncs {
        peer_sync(f, *pool, snapshot);
    }
    for (pool, snapshot) in &node.kv_events {
        kv_events(f, *pool, snapshot);
    }
    if let Some(snapshot) = &node.registry {
        registry(f, snapshot);
    }
    for link in &node.engines {
        let up = matches!(link.phase, router_engine::LinkPhase::Serving);
        let engine = f.labels([("engine", &link.url)]);
        f.engine_link_up.get_or_create(&engine).set(i64::from(up));
        if link.kv_events.is_some() {
            let silent = matches!(
                link.kv_events_heard,
                router_engine::EventsHeard::Silent { .. }
            );
            f.engine_kv_events_silent
                .get_or_create(&engine)
                .set(i64::from(silent));
        }
    }
    room(f, &node.room);
}

/// A `u64` as a gauge value (saturating at `i64::MAX`).
fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl NodeFamilies {
    /// `pairs` as a series' labels, with the pool's `model` first when it is a model's pool.
    fn labels<const N: usize>(&self, pairs: [(&'static str, &str); N]) -> Labels {
        let model = self.model.iter().map(|m| ("model", m.clone()));
        model
            .chain(pairs.iter().map(|(k, v)| (*k, (*v).to_owned())))
            .collect()
    }
}

/// Microseconds as seconds.
fn us_to_secs(us: u64) -> f64 {
    Duration::from_micros(us).as_secs_f64()
}

/// A router's class queues, its view of the ledger per rank, its admission counters and
/// its peer-sync lag.
fn router(f: &NodeFamilies, node: &NodeScrape, role: PoolRole, snapshot: &RouterSnapshot) {
    let pool = pool_label(role);
    let scheduler = &snapshot.scheduler;
    for class in &scheduler.queue.classes {
        let l = f.labels([
            ("pool", pool),
            ("class", node.class_name(class.class.index())),
        ]);
        f.queue_depth
            .get_or_create(&l)
            .set(gauge_value(class.len as u64));
        f.queue_tokens
            .get_or_create(&l)
            .set(gauge_value(class.tokens));
    }
    for rank in &scheduler.ledger.ranks {
        let worker = rank.rank.worker.0.to_string();
        let dp_rank = rank.rank.dp_rank.to_string();
        let l = f.labels([("pool", pool), ("worker", &worker), ("dp_rank", &dp_rank)]);
        f.booked_prefill
            .get_or_create(&l)
            .set(gauge_value(rank.prefill_tokens));
        f.booked_decode
            .get_or_create(&l)
            .set(gauge_value(rank.decode_blocks));
        f.reserved_decode
            .get_or_create(&l)
            .set(gauge_value(rank.reserved_blocks));
        f.worker_requests
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
        f.admissions
            .get_or_create(&f.labels([("pool", pool), ("outcome", outcome)]))
            .inc_by(value);
    }
    f.room_queries
        .get_or_create(&f.labels([("pool", pool)]))
        .inc_by(stats.room_queries);
    let peer_lag = &snapshot.peer_lag_us;
    f.lag.get_or_create(&f.labels([("pool", pool)])).set(
        us_to_secs(peer_lag.sum_us),
        peer_lag.count,
        LAG_BUCKETS_US
            .iter()
            .zip(peer_lag.buckets)
            .map(|(&bound, n)| (us_to_secs(bound), n)),
    );
    if let Some(credits) = &snapshot.credits {
        room_credits(f, role, credits);
    }
}

/// A router's room credits: what it holds and uses per rank, what it has out on the ranks it
/// owns (decode blocks, and prefill tokens apart: a prefill pool has only those), and its
/// credit exchanges.
fn room_credits(f: &NodeFamilies, role: PoolRole, credits: &router_core::credits::CreditSnapshot) {
    let pool = pool_label(role);
    let rank_labels = |rank: router_core::RankId| {
        let worker = rank.worker.0.to_string();
        let dp_rank = rank.dp_rank.to_string();
        f.labels([("pool", pool), ("worker", &worker), ("dp_rank", &dp_rank)])
    };
    let prefill_pool = role == PoolRole::Prefill;
    for held in &credits.held {
        let l = rank_labels(held.rank);
        let (held_family, used_family) = match held.kind {
            CreditKind::Decode => (&f.credits_held, &f.credits_used),
            CreditKind::Prefill => (&f.prefill_credits_held, &f.prefill_credits_used),
        };
        held_family.get_or_create(&l).set(gauge_value(held.held));
        used_family.get_or_create(&l).set(gauge_value(held.used));
    }
    for owned in &credits.owned {
        let l = rank_labels(owned.rank);
        if !prefill_pool {
            f.credits_outstanding
                .get_or_create(&l)
                .set(gauge_value(owned.outstanding));
        }
        if owned.prefill_outstanding > 0 {
            f.prefill_credits_outstanding
                .get_or_create(&l)
                .set(gauge_value(owned.prefill_outstanding));
        }
    }
    let c = &credits.counters;
    for (kind, value) in [
        ("ask_sent", c.asks_sent),
        ("grant_received", c.grants_received),
        ("denial_received", c.denials_received),
        ("local_grant", c.local_grants),
        ("grant_given", c.grants_given),
        ("denial_given", c.denials_given),
    ] {
        f.credit_messages
            .get_or_create(&f.labels([("pool", pool), ("kind", kind)]))
            .inc_by(value);
    }
}

/// A component's wire decoding errors, by kind.
fn decode_errors(
    f: &NodeFamilies,
    component: &str,
    [malformed, unknown_version, foreign]: [u64; 3],
) {
    for (kind, value) in [
        ("malformed", malformed),
        ("unknown_version", unknown_version),
        ("foreign_cluster", foreign),
    ] {
        f.decode_errors
            .get_or_create(&f.labels([("component", component), ("kind", kind)]))
            .inc_by(value);
    }
}

fn peer_sync(f: &NodeFamilies, pool: PoolRole, snapshot: &PeerSyncSnapshot) {
    let l = f.labels([("pool", pool_label(pool))]);
    let counters = &snapshot.counters;
    f.gaps.get_or_create(&l).inc_by(counters.gaps);
    f.snapshots_applied
        .get_or_create(&l)
        .inc_by(counters.snapshots_applied);
    f.expired_peers
        .get_or_create(&l)
        .inc_by(counters.expired_peers);
    f.peer_goodbyes.get_or_create(&l).inc_by(counters.goodbyes);
    f.bus_outages.get_or_create(&l).inc_by(counters.bus_outages);
    f.leases_kept_stopped
        .get_or_create(&f.labels([("component", "peer_sync"), ("pool", pool_label(pool))]))
        .inc_by(counters.leases_kept_stopped);
    f.bus_connected
        .get_or_create(&l)
        .set(i64::from(snapshot.bus_connected));
    let e = &snapshot.decode_errors;
    decode_errors(
        f,
        "peer_sync",
        [e.malformed, e.unknown_version, e.foreign_cluster],
    );
}

fn kv_events(f: &NodeFamilies, pool: PoolRole, snapshot: &KvEventsSnapshot) {
    let pool = pool_label(pool);
    let events = &snapshot.counters.events;
    for (kind, value) in [
        ("stored", events.stored),
        ("removed", events.removed),
        ("cleared", events.cleared),
    ] {
        f.kv_events
            .get_or_create(&f.labels([("pool", pool), ("kind", kind)]))
            .inc_by(value);
    }
    let e = &snapshot.edge;
    decode_errors(
        f,
        "kv_events",
        [e.malformed, e.unknown_version, e.foreign_cluster],
    );
}

fn registry(f: &NodeFamilies, snapshot: &RegistrySnapshot) {
    for pool in &snapshot.pools {
        let count = snapshot.workers.iter().filter(|w| w.pool == *pool).count();
        f.registered_workers
            .get_or_create(&f.labels([("pool", pool_label(*pool))]))
            .set(gauge_value(count as u64));
    }
    for worker in &snapshot.workers {
        let id = worker.worker.0.to_string();
        for load in &worker.load {
            let dp_rank = load.dp_rank.to_string();
            let l = f.labels([
                ("pool", pool_label(worker.pool)),
                ("worker", &id),
                ("dp_rank", &dp_rank),
            ]);
            f.engine_running
                .get_or_create(&l)
                .set(gauge_value(load.running));
            f.engine_waiting
                .get_or_create(&l)
                .set(gauge_value(load.waiting));
            f.engine_kv_used
                .get_or_create(&l)
                .set(gauge_value(load.kv_used_blocks));
            if let Some(total) = worker.total_kv_blocks {
                f.engine_kv_total.get_or_create(&l).set(gauge_value(total));
            }
        }
    }
    let c = &snapshot.counters;
    f.leases_kept_stopped
        .get_or_create(&f.labels([("component", "registry"), ("pool", "all")]))
        .inc_by(c.leases_kept_stopped);
    for (reason, value) in [
        ("endpoint_not_allowed", c.endpoint_refused),
        ("invalid_spec", c.invalid_spec),
        ("unserved_pool", c.unserved_pool),
        ("pool_mismatch", c.pool_mismatch),
        ("stale", c.stale),
    ] {
        f.registry_refused
            .get_or_create(&f.labels([("reason", reason)]))
            .inc_by(value);
    }
    let e = &snapshot.edge;
    decode_errors(
        f,
        "registry",
        [e.malformed, e.unknown_version, e.foreign_cluster],
    );
}

fn room(f: &NodeFamilies, room: &RoomCounts) {
    decode_errors(
        f,
        "room",
        [room.malformed, room.unknown_version, room.foreign_cluster],
    );
    f.room_published.inc_by(room.published);
    f.room_publish_errors.inc_by(room.publish_errors);
    f.room_received.inc_by(room.received);
}
