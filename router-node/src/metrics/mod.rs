//! The node's Prometheus metrics (prometheus-client), served as text at the frontend's
//! `/metrics`: the frontend's own families, recorded as requests go, and the node's actors'
//! state, observed at each scrape.
//!
//! - `families.rs`: every family's declaration (name, help, type).
//! - `scrape.rs`: [`NodeSources`] observes the node's actors at scrape time ([`NodeScrape`]).
//! - `record.rs`: a [`NodeScrape`] written into that scrape's families, per kind of actor.
//!
//! Label values are bounded: `class` is a configured class name (or `unknown` for a request
//! that failed before its class was known: an unreadable or unknown class header and, with
//! classifiers, a body or parse error or a refusal), `rule` a configured classifier rule (or
//! `none`), `endpoint` is one of the two OpenAI routes and `reason` is a fixed label from
//! `ApiError` / `RejectReason::label()`.
//!
//! - `switchyard_http_requests_total{endpoint,class}`: requests that reached admission or
//!   failed before it.
//! - `switchyard_http_rejections_total{class,reason}`: every error answer.
//! - `switchyard_classified_requests_total{class,rule}`: requests classified at the frontend,
//!   by the class chosen and the `[[classifiers]]` rule that chose it (`none`: no rule
//!   matched, or the profile has none). Refusals are rejections (`reason="refused_by_rule"`).
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
//! - `switchyard_http_retries_total{class}`: requests placed again on another worker because
//!   theirs refused the connection (once per request at most).
//! - `switchyard_scrape_errors_total{component}`: node actors (`router`, `peer_sync`,
//!   `kv_events`, `registry`, `engine_link`) that were gone or slower than the scrape timeout, and so left
//!   out of a scrape.
//!
//! With a node attached ([`Metrics::with_node`]), every scrape also observes the node's
//! actors (`scrape.rs`) and renders, fresh each time (a worker or class that is gone
//! leaves no stale series):
//!
//! - gauges `switchyard_queue_depth{pool,class}`, `switchyard_queue_tokens{pool,class}`;
//!   `switchyard_booked_prefill_tokens`, `switchyard_booked_decode_blocks`,
//!   `switchyard_reserved_decode_blocks`, `switchyard_worker_requests`, each
//!   `{pool,worker,dp_rank}`; `switchyard_registered_workers{pool}`;
//!   the engines' own load as they report it (real engines through their links, simulated
//!   workers directly), never mixed with bookings: `switchyard_engine_requests_running`,
//!   `switchyard_engine_requests_waiting`, `switchyard_engine_kv_used_blocks`,
//!   `switchyard_engine_kv_total_blocks`, each `{pool,worker,dp_rank}`;
//!   `switchyard_engine_link_up{engine}` for this node's own `[[engines]]` links;
//!   `switchyard_peer_sync_lag_seconds{pool,quantile="0.5"|"0.99"}` (since the router actor
//!   started; 0 until a peer's delta was measured, see `peer_sync_lag_samples_total`);
//!   `switchyard_bus_connected{pool}` (1 while the replica's NATS connection is up);
//!   with room credits: `switchyard_room_credits_held_blocks`,
//!   `switchyard_room_credits_used_blocks`, `switchyard_room_credits_outstanding_blocks`, each
//!   `{worker,dp_rank}` of the decode pool;
//! - counters, from the actors' own monotonic counters (they restart from 0 with a restarted
//!   actor): `switchyard_admissions_total{pool,outcome}` (`admitted`, `queued`, `rejected`,
//!   `admitted_upstream`), `switchyard_room_queries_total{pool}`,
//!   `switchyard_peer_sync_lag_samples_total{pool}`,
//!   `switchyard_room_changed_published_total`, `switchyard_room_changed_publish_errors_total`,
//!   `switchyard_room_changed_received_total`, `switchyard_kv_events_total{pool,kind}`
//!   (`stored`, `removed`, `cleared`: events forwarded to the router),
//!   `switchyard_peer_sync_gaps_total{pool}`, `switchyard_peer_sync_snapshots_applied_total{pool}`,
//!   `switchyard_peer_sync_expired_peers_total{pool}`,
//!   `switchyard_peer_sync_goodbyes_total{pool}`, `switchyard_peer_sync_bus_outages_total{pool}`,
//!   `switchyard_room_credit_messages_total{kind}` (`ask_sent`, `grant_received`,
//!   `denial_received`, `local_grant`, `grant_given`, `denial_given`),
//!   `switchyard_wire_decode_errors_total{component,kind}` (`component`: `peer_sync`,
//!   `kv_events`, `registry`, `room`; `kind`: `malformed`, `unknown_version`,
//!   `foreign_cluster`; summed over pools),
//!   `switchyard_registry_announcements_refused_total{reason}` (`endpoint_not_allowed`: the
//!   endpoint is outside `registry.allowed_endpoints`; `invalid_spec`, `unserved_pool`,
//!   `pool_mismatch`, `stale`).
//!
//! Every label is bounded: pools and kinds are fixed sets, classes come from the profile,
//! `worker`/`dp_rank` are the registered workers' ranks. No request ids.

mod families;
mod record;
mod scrape;

pub use scrape::{DEFAULT_SCRAPE_TIMEOUT, NodeScrape, NodeSources, RoomCounts, pool_label};

use families::HttpFamilies;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// The node components a scrape observes (the `component` label of scrape errors).
const SCRAPED: [&str; 5] = [
    "router",
    "peer_sync",
    "kv_events",
    "registry",
    "engine_link",
];

/// The frontend's metric set and its registry.
pub struct Metrics {
    registry: Registry,
    http: HttpFamilies,
    /// The node observed at each scrape, if any.
    node: Option<NodeSources>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("inflight", &self.http.inflight.get())
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn class_label(class: &str) -> Vec<(&'static str, String)> {
    vec![("class", class.to_owned())]
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("switchyard");
        let http = HttpFamilies::register(&mut registry);
        Self {
            registry,
            http,
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
                self.http
                    .scrape_errors
                    .get_or_create(&vec![("component", component.to_owned())]),
            );
        }
        self.node = Some(node);
        self
    }

    pub fn request(&self, endpoint: &'static str, class: &str) {
        self.http
            .requests
            .get_or_create(&vec![
                ("endpoint", endpoint.to_owned()),
                ("class", class.to_owned()),
            ])
            .inc();
    }

    pub fn rejection(&self, class: &str, reason: &'static str) {
        self.http
            .rejections
            .get_or_create(&vec![
                ("class", class.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// A request placed again on another worker after its worker refused the connection.
    pub fn retried(&self, class: &str) {
        self.http
            .retries
            .get_or_create(&vec![("class", class.to_owned())])
            .inc();
    }

    /// A request classified into `class` by `rule` (`none`: no rule matched).
    pub fn classified(&self, class: &str, rule: &str) {
        self.http
            .classified
            .get_or_create(&vec![
                ("class", class.to_owned()),
                ("rule", rule.to_owned()),
            ])
            .inc();
    }

    pub fn admission_latency(&self, class: &str, took: Duration) {
        self.http
            .admission_latency
            .get_or_create(&class_label(class))
            .observe(took.as_secs_f64());
    }

    /// An admission after `took` from the route call, `waited` of it in the class queue:
    /// admission latency, queue wait (0 on the direct path) and route time.
    pub fn admitted(&self, class: &str, took: Duration, waited: Duration) {
        let labels = class_label(class);
        let http = &self.http;
        http.admission_latency
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        http.queue_wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
        http.route
            .get_or_create(&labels)
            .observe(took.saturating_sub(waited).as_secs_f64());
    }

    pub fn inflight_inc(&self) {
        self.http.inflight.inc();
    }

    pub fn inflight_dec(&self) {
        self.http.inflight.dec();
    }

    pub fn inflight(&self) -> i64 {
        self.http.inflight.get()
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
                self.http
                    .scrape_errors
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
                Some(node) => {
                    encode_registry(&mut out, &record::node_families(node).into_registry())
                }
                None => Ok(()),
            })
            .and_then(|()| encode_eof(&mut out));
        if encoded.is_err() {
            out.clear();
        }
        out
    }
}
