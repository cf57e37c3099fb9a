//! The frontend's Prometheus metrics (prometheus-client), served as text at `/metrics`.
//!
//! Label values are bounded: `class` is a configured class name (or `unknown` for a request
//! whose class could not be resolved), `endpoint` is one of the two OpenAI routes and
//! `reason` is a fixed label from `ApiError` / `RejectReason::label()`.
//!
//! - `switchyard_http_requests_total{endpoint,class}`: requests that reached admission or
//!   failed before it.
//! - `switchyard_http_rejections_total{class,reason}`: every error answer.
//! - `switchyard_admission_latency_seconds{class}`: from the `route` call to its outcome
//!   (queue wait included).
//! - `switchyard_http_inflight`: admitted requests still being proxied.
//! - `switchyard_queue_wait_seconds{class}`: an admission's time in its class queue, as the
//!   router measured it (`Admission::waited`), observed for **every** admission of the
//!   aggregated path: a direct one counts as 0, so `_count` is the admissions and the buckets
//!   show the share that waited. (The disaggregated path, `disagg.rs`, still observes only
//!   `admission_latency_seconds`.)
//! - `switchyard_route_seconds{class}`: an admission's latency minus its queue wait: the
//!   router's own time (mailbox round trip, gate, selection, booking). Admissions only.
//!   `admission_latency_seconds` is the sum of both (gate + wait + select + book).
//! - `switchyard_scrape_errors_total{component}`: node actors (`router`, `peer_sync`,
//!   `kv_events`, `registry`) that were gone or slower than the scrape timeout, and so left
//!   out of a scrape.
//!
//! With a node attached ([`Metrics::with_node`]), every scrape also observes the node's
//! actors (`crate::node_metrics`) and renders, fresh each time (a worker or class that is gone
//! leaves no stale series):
//!
//! - gauges `switchyard_queue_depth{pool,class}`, `switchyard_queue_tokens{pool,class}`;
//!   `switchyard_booked_prefill_tokens`, `switchyard_booked_decode_blocks`,
//!   `switchyard_reserved_decode_blocks`, `switchyard_worker_requests`, each
//!   `{pool,worker,dp_rank}`; `switchyard_registered_workers{pool}`;
//!   `switchyard_peer_sync_lag_seconds{pool,quantile="0.5"|"0.99"}` (since the router actor
//!   started; 0 until a peer's delta was measured, see `peer_sync_lag_samples_total`);
//! - counters, from the actors' own monotonic counters (they restart from 0 with a restarted
//!   actor): `switchyard_admissions_total{pool,outcome}` (`admitted`, `queued`, `rejected`,
//!   `admitted_upstream`), `switchyard_room_queries_total{pool}`,
//!   `switchyard_peer_sync_lag_samples_total{pool}`,
//!   `switchyard_room_changed_published_total`, `switchyard_room_changed_publish_errors_total`,
//!   `switchyard_room_changed_received_total`, `switchyard_kv_events_total{pool,kind}`
//!   (`stored`, `removed`, `cleared`: events forwarded to the router),
//!   `switchyard_peer_sync_gaps_total{pool}`, `switchyard_peer_sync_snapshots_applied_total{pool}`,
//!   `switchyard_peer_sync_expired_peers_total{pool}`,
//!   `switchyard_wire_decode_errors_total{component,kind}` (`component`: `peer_sync`,
//!   `kv_events`, `registry`, `room`; `kind`: `malformed`, `unknown_version`,
//!   `foreign_cluster`; summed over pools).
//!
//! Every label is bounded: pools and kinds are fixed sets, classes come from the profile,
//! `worker`/`dp_rank` are the registered workers' ranks. No request ids.

use crate::node_metrics::{NodeScrape, NodeSources, pool_label};
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

type Labels = Vec<(&'static str, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

fn wait_histogram() -> Histogram {
    // 1 ms .. ~33 s; a direct admission (0) lands in the first bucket.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The node components a scrape observes (the `component` label of scrape errors).
const SCRAPED: [&str; 4] = ["router", "peer_sync", "kv_events", "registry"];

/// The frontend's metric set and its registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    rejections: Family<Labels, Counter>,
    admission_latency: HistogramFamily,
    queue_wait: HistogramFamily,
    route: HistogramFamily,
    inflight: Gauge,
    scrape_errors: Family<Labels, Counter>,
    /// The node observed at each scrape, if any.
    node: Option<NodeSources>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("inflight", &self.inflight.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("switchyard");
        let requests = Family::<Labels, Counter>::default();
        let rejections = Family::<Labels, Counter>::default();
        let admission_latency: HistogramFamily =
            Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        let queue_wait: HistogramFamily =
            Family::new_with_constructor(wait_histogram as fn() -> Histogram);
        let route: HistogramFamily =
            Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        let inflight = Gauge::default();
        let scrape_errors = Family::<Labels, Counter>::default();
        registry.register(
            "http_requests",
            "OpenAI requests received, by endpoint and policy class",
            requests.clone(),
        );
        registry.register(
            "http_rejections",
            "Requests answered with an error, by policy class and reason",
            rejections.clone(),
        );
        registry.register(
            "admission_latency_seconds",
            "Time from the route call to its admission outcome, by policy class",
            admission_latency.clone(),
        );
        registry.register(
            "http_inflight",
            "Admitted requests still being proxied",
            inflight.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "Time an admitted request spent in its class queue (0 when admitted directly), by policy class",
            queue_wait.clone(),
        );
        registry.register(
            "route_seconds",
            "Admission latency minus queue wait (router round trip, gate, selection, booking), by policy class",
            route.clone(),
        );
        registry.register(
            "scrape_errors",
            "Node actors gone or too slow to answer a scrape, left out of it, by component",
            scrape_errors.clone(),
        );
        Self {
            registry,
            requests,
            rejections,
            admission_latency,
            queue_wait,
            route,
            inflight,
            scrape_errors,
            node: None,
        }
    }

    /// The node observed at each scrape, if one is attached.
    pub fn node(&self) -> Option<&NodeSources> {
        self.node.as_ref()
    }

    /// Observes `node`'s actors at every scrape ([`Metrics::scrape`]).
    pub fn with_node(mut self, node: NodeSources) -> Self {
        for component in SCRAPED {
            // Present at 0 from the start.
            drop(
                self.scrape_errors
                    .get_or_create(&vec![("component", component.to_owned())]),
            );
        }
        self.node = Some(node);
        self
    }

    pub fn request(&self, endpoint: &'static str, class: &str) {
        self.requests
            .get_or_create(&vec![
                ("endpoint", endpoint.to_owned()),
                ("class", class.to_owned()),
            ])
            .inc();
    }

    pub fn rejection(&self, class: &str, reason: &'static str) {
        self.rejections
            .get_or_create(&vec![
                ("class", class.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    pub fn admission_latency(&self, class: &str, took: Duration) {
        self.admission_latency
            .get_or_create(&vec![("class", class.to_owned())])
            .observe(took.as_secs_f64());
    }

    /// An admission after `took` from the route call, `waited` of it in the class queue:
    /// admission latency, queue wait (0 on the direct path) and route time.
    pub fn admitted(&self, class: &str, took: Duration, waited: Duration) {
        let labels = vec![("class", class.to_owned())];
        self.admission_latency
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.queue_wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
        self.route
            .get_or_create(&labels)
            .observe(took.saturating_sub(waited).as_secs_f64());
    }

    pub fn inflight_inc(&self) {
        self.inflight.inc();
    }

    pub fn inflight_dec(&self) {
        self.inflight.dec();
    }

    pub fn inflight(&self) -> i64 {
        self.inflight.get()
    }

    /// The Prometheus text exposition of the frontend's own metrics (no node state).
    pub fn render(&self) -> String {
        self.render_with(None)
    }

    /// Observes the attached node (each actor within its timeout; one that does not answer
    /// is counted in `scrape_errors_total` and left out) and renders every metric.
    pub async fn scrape(&self) -> String {
        let scraped = match &self.node {
            Some(node) => Some(node.gather().await),
            None => None,
        };
        if let Some(scraped) = &scraped {
            for component in &scraped.failed {
                self.scrape_errors
                    .get_or_create(&vec![("component", (*component).to_owned())])
                    .inc();
            }
        }
        self.render_with(scraped.as_ref())
    }

    /// The text exposition of the frontend's metrics and, given one, a node scrape's.
    pub fn render_with(&self, node: Option<&NodeScrape>) -> String {
        let mut out = String::new();
        let encoded = encode_registry(&mut out, &self.registry)
            .and_then(|()| match node {
                Some(node) => encode_registry(&mut out, &node_registry(node)),
                None => Ok(()),
            })
            .and_then(|()| encode_eof(&mut out));
        if encoded.is_err() {
            out.clear();
        }
        out
    }
}

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
fn node_registry(node: &NodeScrape) -> Registry {
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
