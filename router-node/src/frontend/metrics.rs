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

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Duration;

type Labels = Vec<(&'static str, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// The frontend's metric set and its registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    rejections: Family<Labels, Counter>,
    admission_latency: HistogramFamily,
    inflight: Gauge,
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
        let inflight = Gauge::default();
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
        Self {
            registry,
            requests,
            rejections,
            admission_latency,
            inflight,
        }
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

    pub fn inflight_inc(&self) {
        self.inflight.inc();
    }

    pub fn inflight_dec(&self) {
        self.inflight.dec();
    }

    pub fn inflight(&self) -> i64 {
        self.inflight.get()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
