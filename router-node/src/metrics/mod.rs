//! The node's Prometheus metrics (prometheus-client), served as text at the admin
//! listener's `/metrics`: the frontend's own families, recorded as requests go, and the node's actors'
//! state, observed at each scrape. Every family, with its labels and what it counts, is in
//! `docs/metrics.md` (a system test compares that table with a live `/metrics`).
//!
//! - `families/`: every family's declaration (name, help, type, buckets) and the build info.
//! - `request.rs`: [`RequestObserver`], one OpenAI request's latencies (time to first token,
//!   inter-token gaps, duration by outcome) and tokens (prompt, cached, output), recorded as
//!   the frontend relays its stream, into its class's series (`class_series.rs`, looked up
//!   once per class).
//! - `scrape.rs`: [`NodeSources`] observes the node's actors at scrape time ([`NodeScrape`]).
//! - `record.rs`: a [`NodeScrape`] written into that scrape's families, per kind of actor.
//!
//! Label values are bounded: `class` is a configured class name (or `unknown` for a request
//! that failed before its class was known: an unreadable or unknown class header and, with
//! classifiers, a body or parse error or a refusal), `rule` a configured classifier rule (or
//! `none`), `endpoint` is one of the two OpenAI routes, `reason` is a fixed label from
//! `ApiError` / `RejectReason::label()`, `outcome` one of five words, `pool` one of three,
//! `listener` one of two, `worker`/`dp_rank` the registered workers' ranks, `key` an API
//! key's name from the keys file (or `none`). No request ids, no keys.
//!
//! With a node attached ([`Metrics::with_node`]), every scrape also observes the node's
//! actors (`scrape.rs`) and renders their families fresh each time (a worker or class that
//! is gone leaves no stale series). The frontend's per-worker counters
//! (`upstream_requests_total`, `upstream_errors_total`) keep a series per worker ever
//! called, as counters do.

mod class_series;
mod families;
mod record;
mod request;
mod scrape;
mod stages;

pub use families::BuildInfo;
pub use request::{RequestObserver, RequestOutcome};
pub use scrape::{DEFAULT_SCRAPE_TIMEOUT, NodeScrape, NodeSources, RoomCounts, pool_label};
pub use stages::{SHORT_PROMPT_TOKENS, Stage, StageClock};

use arc_swap::ArcSwap;
use families::{AuthFamilies, HttpFamilies};
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use router_core::{PrefixHit, WorkerId};
use router_tokenizer::TokenCacheStats;
use std::sync::{Arc, OnceLock};
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
    /// Each class's per-request series.
    classes: class_series::ClassSeriesCache,
    /// Each pool's prefix counters (matched, prompt blocks), in the order of [`POOLS`].
    pool_prefix: [OnceLock<(Counter, Counter)>; 3],
    auth: AuthFamilies,
    /// Every stage's histograms by prompt size, looked up once.
    stages: stages::StageSeries,
    /// The node observed at each scrape, if any.
    node: Option<NodeSources>,
    /// The nodes of the models' pools, by model, observed at each scrape too (their series
    /// labelled `model`); pools join as they start.
    pools: Arc<ArcSwap<Vec<(String, NodeSources)>>>,
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

/// The pools a leg runs on (the `pool` label).
const POOLS: [&str; 3] = ["aggregated", "prefill", "decode"];

/// The node's listeners (the `listener` label).
const LISTENERS: [&str; 2] = ["public", "admin"];

fn listener_label(listener: &str) -> Vec<(&'static str, String)> {
    vec![("listener", listener.to_owned())]
}

fn worker_labels(pool: &'static str, worker: WorkerId) -> Vec<(&'static str, String)> {
    vec![("pool", pool.to_owned()), ("worker", worker.0.to_string())]
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("switchyard");
        let http = HttpFamilies::register(&mut registry);
        let auth = AuthFamilies::register(&mut registry);
        for listener in LISTENERS {
            // Present at 0 from the start.
            drop(http.connections.get_or_create(&listener_label(listener)));
        }
        let stages = stages::StageSeries {
            by_stage: Stage::ALL.map(|stage| {
                stages::PROMPT_SIZES.map(|size| {
                    http.stages
                        .get_or_create(&vec![
                            ("stage", stage.label().to_owned()),
                            ("prompt", size.to_owned()),
                        ])
                        .clone()
                })
            }),
        };
        Self {
            registry,
            http,
            stages,
            classes: class_series::ClassSeriesCache::default(),
            pool_prefix: Default::default(),
            auth,
            node: None,
            pools: Arc::default(),
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

    /// Where a disaggregated request's prefill runs (conditional disaggregation on).
    pub fn prefill_place(&self, place: router_core::PrefillPlace) {
        let reason = match place {
            router_core::PrefillPlace::Remote => "rule",
            router_core::PrefillPlace::Local { reason } => reason.label(),
        };
        self.http
            .prefill_places
            .get_or_create(&vec![
                ("place", place.label().to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// Observes a model's pool at every scrape too, its series labelled `model`.
    pub fn add_pool(&self, model: String, node: NodeSources) {
        self.pools.rcu(|pools| {
            let mut pools = Vec::clone(pools);
            pools.push((model.clone(), node.clone()));
            pools
        });
    }

    /// Every model's pool observed at each scrape.
    pub fn pools(&self) -> Arc<Vec<(String, NodeSources)>> {
        self.pools.load_full()
    }

    /// `class`'s per-request series.
    pub(crate) fn class_series(&self, class: &str) -> std::sync::Arc<class_series::ClassSeries> {
        self.classes.get(class)
    }

    /// A request to `endpoint` (`completions` or `chat_completions`) of `class`.
    pub fn request(&self, endpoint: &'static str, class: &str) {
        self.classes.get(class).requests(&self.http, endpoint).inc();
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

    /// A connection or request refused on `listener` before reaching a handler, by `reason`
    /// (`connection_limit`: the listener stopped accepting at `max_connections`;
    /// `unauthorized`: an admin request without the token).
    pub fn refused(&self, listener: &'static str, reason: &'static str) {
        let mut labels = listener_label(listener);
        labels.push(("reason", reason.to_owned()));
        self.http.refused.get_or_create(&labels).inc();
    }

    /// A connection accepted on `listener`.
    pub fn connection_opened(&self, listener: &'static str) {
        self.http
            .connections
            .get_or_create(&listener_label(listener))
            .inc();
    }

    /// A connection of `listener` closed.
    pub fn connection_closed(&self, listener: &'static str) {
        self.http
            .connections
            .get_or_create(&listener_label(listener))
            .dec();
    }

    /// Connections open on `listener` now.
    pub fn connections(&self, listener: &'static str) -> i64 {
        self.http
            .connections
            .get_or_create(&listener_label(listener))
            .get()
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

    /// A request checked against the API keys: `key` is the key's name (`none`: no valid
    /// key), `outcome` one of the fixed words of `frontend::auth`.
    pub fn auth_request(&self, key: &str, outcome: &'static str) {
        self.auth
            .requests
            .get_or_create(&vec![
                ("key", key.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// The number of API keys in use.
    pub fn auth_keys(&self, keys: usize) {
        self.auth.keys.set(i64::try_from(keys).unwrap_or(i64::MAX));
    }

    /// A reload of the keys file: `ok` or `error`.
    pub fn auth_reload(&self, outcome: &'static str) {
        self.auth
            .reloads
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    pub fn admission_latency(&self, class: &str, took: Duration) {
        self.classes
            .get(class)
            .admission_latency(&self.http)
            .observe(took.as_secs_f64());
    }

    /// An admission after `took` from the route call, `waited` of it in the class queue:
    /// admission latency, queue wait (0 on the direct path) and route time.
    pub fn admitted(&self, class: &str, took: Duration, waited: Duration) {
        let series = self.classes.get(class);
        let http = &self.http;
        series.admission_latency(http).observe(took.as_secs_f64());
        series.queue_wait(http).observe(waited.as_secs_f64());
        series
            .route(http)
            .observe(took.saturating_sub(waited).as_secs_f64());
    }

    /// One admission's prefix reuse on `pool` (every leg, on its own pool).
    pub fn prefix_hit(&self, pool: &'static str, prefix: PrefixHit) {
        let (matched, prompt) = self.pool_prefix(pool);
        matched.inc_by(u64::from(prefix.matched_blocks));
        prompt.inc_by(u64::from(prefix.prompt_blocks));
    }

    /// `pool`'s prefix counters (matched, prompt blocks), kept for the three pools.
    fn pool_prefix(&self, pool: &'static str) -> (Counter, Counter) {
        let http = &self.http;
        let create = || {
            let labels = vec![("pool", pool.to_owned())];
            (
                http.prefix_matched.get_or_create_owned(&labels),
                http.prefix_prompt.get_or_create_owned(&labels),
            )
        };
        match POOLS.iter().position(|p| *p == pool) {
            Some(i) => self.pool_prefix[i].get_or_init(create).clone(),
            None => create(),
        }
    }

    /// A request (or one leg of it) sent to `worker` of `pool`.
    pub fn upstream_request(&self, pool: &'static str, worker: WorkerId) {
        self.http
            .upstream_requests
            .get_or_create(&worker_labels(pool, worker))
            .inc();
    }

    /// A request (or leg) that `worker` of `pool` failed, by the error's reason.
    pub fn upstream_error(&self, pool: &'static str, worker: WorkerId, reason: &'static str) {
        let mut labels = worker_labels(pool, worker);
        labels.push(("reason", reason.to_owned()));
        self.http.upstream_errors.get_or_create(&labels).inc();
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

    /// The tokenizer's state now: its token cache's totals (`None`: no cache) and the slots
    /// in use per lane (quick, bulk).
    pub fn tokenizer(&self, cache: Option<TokenCacheStats>, slots: [(&str, usize); 2]) {
        let http = &self.http;
        if let Some(cache) = cache {
            for (result, total) in [("hit", cache.hit_bytes), ("miss", cache.miss_bytes)] {
                let counter = http
                    .tokenizer_cache_bytes
                    .get_or_create(&vec![("result", result.to_owned())]);
                counter.inc_by(total.saturating_sub(counter.get()));
            }
            http.tokenizer_cache_held
                .set(i64::try_from(cache.held_bytes).unwrap_or(i64::MAX));
        }
        for (lane, in_use) in slots {
            http.tokenizer_slots
                .get_or_create(&vec![("lane", lane.to_owned())])
                .set(i64::try_from(in_use).unwrap_or(i64::MAX));
        }
    }

    /// The Prometheus text exposition of the frontend's own metrics (no node state).
    pub fn render(&self) -> String {
        self.render_with(&[])
    }

    /// Observes the attached node (each actor within its timeout; one that does not answer
    /// is counted in `scrape_errors_total` and left out) and renders every metric.
    pub async fn scrape(&self) -> String {
        let pools = self.pools();
        let gathered = futures::future::join_all(
            self.node
                .iter()
                .map(|node| (None, node))
                .chain(
                    pools
                        .iter()
                        .map(|(model, node)| (Some(model.as_str()), node)),
                )
                .map(|(model, node)| async move { (model, node.gather().await) }),
        )
        .await;
        for (_, scraped) in &gathered {
            for component in &scraped.failed {
                self.http
                    .scrape_errors
                    .get_or_create(&vec![("component", (*component).to_owned())])
                    .inc();
            }
        }
        let scraped: Vec<(Option<&str>, &NodeScrape)> = gathered
            .iter()
            .map(|(model, node)| (*model, node))
            .collect();
        self.render_with(&scraped)
    }

    /// The text exposition of the frontend's metrics and the given pools' node scrapes (a
    /// model's pool's series labelled `model`).
    pub fn render_with(&self, pools: &[(Option<&str>, &NodeScrape)]) -> String {
        let mut out = String::new();
        let encoded = encode_registry(&mut out, &self.registry)
            .and_then(|()| {
                if pools.is_empty() {
                    return Ok(());
                }
                encode_registry(&mut out, &record::node_families(pools).into_registry())
            })
            .and_then(|()| encode_eof(&mut out));
        if encoded.is_err() {
            out.clear();
        }
        out
    }
}
