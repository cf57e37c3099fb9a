//! The frontend's families: registered once, recorded into as requests go (`Metrics` in
//! `mod.rs` of the metrics module, and its `RequestObserver`).

use super::{
    BuildInfo, Counters, Gauges, HistogramFamily, duration_histogram, itl_histogram,
    latency_histogram, stage_histogram, ttft_histogram, wait_histogram,
};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The frontend's own families, registered once.
#[derive(Debug)]
pub(in crate::metrics) struct HttpFamilies {
    pub requests: Counters,
    pub rejections: Counters,
    pub retries: Counters,
    pub classified: Counters,
    pub admission_latency: HistogramFamily,
    pub queue_wait: HistogramFamily,
    pub route: HistogramFamily,
    pub inflight: Gauge,
    pub refused: Counters,
    pub connections: Gauges,
    pub scrape_errors: Counters,
    pub ttft: HistogramFamily,
    pub itl: HistogramFamily,
    pub duration: HistogramFamily,
    pub stages: HistogramFamily,
    pub prompt_tokens: Counters,
    pub cached_tokens: Counters,
    pub output_tokens: Counters,
    pub prefix_matched: Counters,
    pub prefix_prompt: Counters,
    pub prefill_places: Counters,
    pub upstream_requests: Counters,
    pub upstream_errors: Counters,
    pub build_info: Gauges,
    pub tokenizer_cache_bytes: Counters,
    pub tokenizer_cache_held: Gauge,
    pub tokenizer_slots: Gauges,
}

impl HttpFamilies {
    pub fn register(registry: &mut Registry) -> Self {
        let f = Self {
            requests: Counters::default(),
            rejections: Counters::default(),
            retries: Counters::default(),
            classified: Counters::default(),
            admission_latency: Family::new_with_constructor(latency_histogram as fn() -> _),
            queue_wait: Family::new_with_constructor(wait_histogram as fn() -> _),
            route: Family::new_with_constructor(latency_histogram as fn() -> _),
            inflight: Gauge::default(),
            refused: Counters::default(),
            connections: Gauges::default(),
            scrape_errors: Counters::default(),
            ttft: Family::new_with_constructor(ttft_histogram as fn() -> _),
            itl: Family::new_with_constructor(itl_histogram as fn() -> _),
            duration: Family::new_with_constructor(duration_histogram as fn() -> _),
            stages: Family::new_with_constructor(stage_histogram as fn() -> _),
            prompt_tokens: Counters::default(),
            cached_tokens: Counters::default(),
            output_tokens: Counters::default(),
            prefix_matched: Counters::default(),
            prefix_prompt: Counters::default(),
            prefill_places: Counters::default(),
            upstream_requests: Counters::default(),
            upstream_errors: Counters::default(),
            build_info: Gauges::default(),
            tokenizer_cache_bytes: Counters::default(),
            tokenizer_cache_held: Gauge::default(),
            tokenizer_slots: Gauges::default(),
        };
        f.register_admission(registry);
        f.register_requests(registry);
        f.register_fleet(registry);
        f
    }

    /// Requests in, classification, admission and the frontend's own health.
    fn register_admission(&self, r: &mut Registry) {
        r.register(
            "http_requests",
            "OpenAI requests received, by endpoint and policy class",
            self.requests.clone(),
        );
        r.register(
            "http_rejections",
            "Requests answered with an error, by policy class and reason",
            self.rejections.clone(),
        );
        r.register(
            "http_refused",
            "Connections and requests refused before reaching a handler, by listener and reason (connection_limit, unauthorized)",
            self.refused.clone(),
        );
        r.register(
            "http_connections",
            "HTTP connections open, by listener (public, admin)",
            self.connections.clone(),
        );
        r.register(
            "http_retries",
            "Requests (or disaggregated legs) placed again on another worker because theirs refused the connection, by policy class",
            self.retries.clone(),
        );
        r.register(
            "classified_requests",
            "Requests classified at the frontend, by policy class and classifier rule",
            self.classified.clone(),
        );
        r.register(
            "admission_latency_seconds",
            "Time from the route call to its admission outcome, by policy class",
            self.admission_latency.clone(),
        );
        r.register(
            "http_inflight",
            "Admitted requests still being proxied",
            self.inflight.clone(),
        );
        r.register(
            "queue_wait_seconds",
            "Time an admitted request spent in its class queue (0 when admitted directly), by policy class",
            self.queue_wait.clone(),
        );
        r.register(
            "route_seconds",
            "Admission latency minus queue wait (router round trip, gate, selection, booking), by policy class",
            self.route.clone(),
        );
        r.register(
            "scrape_errors",
            "Node actors gone or too slow to answer a scrape, left out of it, by component",
            self.scrape_errors.clone(),
        );
    }

    /// What a user of the API sees: latencies and tokens per request.
    fn register_requests(&self, r: &mut Registry) {
        r.register(
            "time_to_first_token_seconds",
            "Time from receiving a request to reading its first generated text from the worker, by policy class",
            self.ttft.clone(),
        );
        r.register(
            "inter_token_latency_seconds",
            "Gaps between consecutive chunks of generated text read from the worker, by policy class",
            self.itl.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time from receiving a request to the end of its answer, by policy class and outcome (ok, rejected, invalid, error, cancelled)",
            self.duration.clone(),
        );
        r.register(
            "request_stage_seconds",
            "Time a request spent in each stage before its first token (read, parse, tokenize_wait, tokenize, classify, admit, first_token), by prompt size (short: at most 2048 tokens, long)",
            self.stages.clone(),
        );
        r.register(
            "prompt_tokens",
            "Prompt tokens of requests a worker answered (the engine's usage when reported, else the router's count), by policy class",
            self.prompt_tokens.clone(),
        );
        r.register(
            "cached_tokens",
            "Prompt tokens served from the KV cache (the engine's usage.prompt_tokens_details.cached_tokens when reported, else the router's matched prefix), by policy class",
            self.cached_tokens.clone(),
        );
        r.register(
            "output_tokens",
            "Generated tokens relayed (the engine's usage.completion_tokens when reported, else the count of content chunks), by policy class",
            self.output_tokens.clone(),
        );
    }

    /// The fleet as the frontend used it: prefix reuse per pool, calls per worker, the build.
    fn register_fleet(&self, r: &mut Registry) {
        r.register(
            "tokenizer_cache_bytes",
            "Prompt text looked up in the token cache, by result (hit: its ids reused; miss: tokenized and added)",
            self.tokenizer_cache_bytes.clone(),
        );
        r.register(
            "tokenizer_cache_held_bytes",
            "Bytes the token cache holds (text, ids and per-entry overhead)",
            self.tokenizer_cache_held.clone(),
        );
        r.register(
            "tokenizer_slots_in_use",
            "Prompts being tokenized off their request's task, by lane (quick, bulk)",
            self.tokenizer_slots.clone(),
        );
        r.register(
            "prefix_matched_blocks",
            "Prompt blocks already cached on the rank each admission chose (KV prefix index), by pool",
            self.prefix_matched.clone(),
        );
        r.register(
            "prefix_prompt_blocks",
            "Full prompt blocks of admitted requests (the prefix-hit ratio's denominator), by pool",
            self.prefix_prompt.clone(),
        );
        r.register(
            "disagg_prefills",
            "Disaggregated requests with conditional disaggregation on, by where their prefill ran (remote: a prefill worker; local: the decode worker) and why",
            self.prefill_places.clone(),
        );
        r.register(
            "upstream_requests",
            "Requests (legs) sent to a worker, by pool and worker",
            self.upstream_requests.clone(),
        );
        r.register(
            "upstream_errors",
            "Requests (legs) a worker failed (connection, status, broken stream), by pool, worker and reason",
            self.upstream_errors.clone(),
        );
        r.register(
            "build_info",
            "Always 1; the labels name the build (version, git commit, compiler)",
            self.build_info.clone(),
        );
        let info = BuildInfo::current();
        self.build_info
            .get_or_create(&vec![
                ("version", info.version.to_owned()),
                ("git_sha", info.git_sha.to_owned()),
                ("rustc", info.rustc.to_owned()),
            ])
            .set(1);
    }
}
