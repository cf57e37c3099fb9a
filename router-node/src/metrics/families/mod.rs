//! Every metric family of the node, declared in one place (this folder): name, help text,
//! type and buckets. [`docs/metrics.md`](../../../../docs/metrics.md) lists them all, and a
//! system test compares that table with a live `/metrics`.
//!
//! - `frontend.rs`: the frontend's families ([`HttpFamilies`]), registered once and recorded
//!   into as requests go (admission, per-request latencies and tokens, per-worker upstream
//!   calls, prefix reuse, build info).
//! - `auth.rs`: the API keys' families ([`AuthFamilies`]): requests by key and outcome, keys
//!   in use, reloads of the keys file.
//! - `node.rs`: the node's families ([`NodeFamilies`]), built fresh for each scrape from what
//!   the actors answered (`record.rs`), so a worker or class that is gone leaves no series.
//!
//! Every family is registered under the registry prefix `switchyard` (prometheus-client
//! adds it, and `_total` to counters).

mod auth;
mod frontend;
mod node;

pub(super) use auth::AuthFamilies;
pub(super) use frontend::HttpFamilies;
pub(super) use node::NodeFamilies;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::Mutex;

pub(super) type Labels = Vec<(&'static str, String)>;
pub(super) type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;
pub(super) type Gauges = Family<Labels, Gauge>;
pub(super) type Counters = Family<Labels, Counter>;

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// One stage of a request before its first token: 0.1 ms (parsing a short body) to ~100 s.
fn stage_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 21))
}

fn wait_histogram() -> Histogram {
    // 1 ms .. ~33 s; a direct admission (0) lands in the first bucket.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Time to first token: 5 ms (a cached prefix on an idle engine) to 80 s (a long prompt
/// behind a queue), denser around the usual 50 ms .. 2 s interactive targets.
pub(super) const TTFT_BUCKETS: [f64; 21] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
];

/// Gaps between streamed tokens: 1 ms (fast or batched chunks) to 5 s (a stalled decode),
/// dense between 10 and 100 ms where decode steps usually are.
pub(super) const ITL_BUCKETS: [f64; 20] = [
    0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.5, 0.75, 1.0, 2.5, 5.0,
];

/// Whole requests: 10 ms (a rejection) to 10 min (a long generation).
pub(super) const DURATION_BUCKETS: [f64; 20] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0,
    120.0, 180.0, 300.0, 600.0,
];

fn ttft_histogram() -> Histogram {
    Histogram::new(TTFT_BUCKETS)
}

fn itl_histogram() -> Histogram {
    Histogram::new(ITL_BUCKETS)
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// A histogram whose buckets were counted elsewhere (an actor's own counters), set once per
/// scrape and encoded as a Prometheus histogram.
#[derive(Debug, Default)]
pub(super) struct CountedHistogram(Mutex<Counted>);

#[derive(Debug, Default)]
struct Counted {
    sum: f64,
    count: u64,
    /// (upper bound, count in that bucket alone), the last bound `+Inf`.
    buckets: Vec<(f64, u64)>,
}

impl CountedHistogram {
    /// `buckets` pairs each finite upper bound with the observations in that bucket alone;
    /// `count - Σ buckets` go to `+Inf`.
    pub fn set(&self, sum: f64, count: u64, buckets: impl IntoIterator<Item = (f64, u64)>) {
        let mut buckets: Vec<(f64, u64)> = buckets.into_iter().collect();
        let finite: u64 = buckets.iter().map(|(_, n)| n).sum();
        buckets.push((f64::INFINITY, count.saturating_sub(finite)));
        if let Ok(mut counted) = self.0.lock() {
            *counted = Counted {
                sum,
                count,
                buckets,
            };
        }
    }
}

impl TypedMetric for CountedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for CountedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counted = self.0.lock().map_err(|_| std::fmt::Error)?;
        encoder.encode_histogram::<NoLabelSet>(counted.sum, counted.count, &counted.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// What the binary was built from, for `switchyard_build_info` (`build.rs` sets the git
/// commit and the compiler's version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    /// The commit the binary was built from (`unknown` outside a git checkout, unless
    /// `SWITCHYARD_GIT_SHA` was set at build time).
    pub git_sha: &'static str,
    /// `rustc --version` of the compiler that built it.
    pub rustc: &'static str,
}

impl BuildInfo {
    /// This binary's.
    pub const fn current() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            git_sha: env!("SWITCHYARD_GIT_SHA"),
            rustc: env!("SWITCHYARD_RUSTC_VERSION"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    #[test]
    fn a_counted_histogram_encodes_cumulative_buckets_and_the_rest_above_the_last() {
        let mut registry = Registry::with_prefix("switchyard");
        let family: Family<Labels, CountedHistogram> = Family::default();
        family
            .get_or_create(&vec![("pool", "decode".to_owned())])
            .set(1.5, 6, [(0.001, 2), (0.01, 3)]);
        registry.register("lag_seconds", "help", family.clone());
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        for line in [
            "# TYPE switchyard_lag_seconds histogram",
            r#"switchyard_lag_seconds_bucket{le="0.001",pool="decode"} 2"#,
            r#"switchyard_lag_seconds_bucket{le="0.01",pool="decode"} 5"#,
            r#"switchyard_lag_seconds_bucket{le="+Inf",pool="decode"} 6"#,
            r#"switchyard_lag_seconds_count{pool="decode"} 6"#,
            r#"switchyard_lag_seconds_sum{pool="decode"} 1.5"#,
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
    }

    /// The families registered in this folder's sources (the string after each
    /// `.register(`), without the `switchyard_` prefix and the counters' `_total`.
    fn declared() -> std::collections::BTreeSet<String> {
        let sources = [
            include_str!("frontend.rs"),
            include_str!("node.rs"),
            include_str!("auth.rs"),
        ];
        sources
            .iter()
            .flat_map(|source| source.split(".register(").skip(1))
            .filter_map(|call| {
                let rest = call.trim_start().strip_prefix('"')?;
                Some(rest[..rest.find('"')?].to_owned())
            })
            .collect()
    }

    /// The rows of `docs/metrics.md`: (name without prefix and `_total`, type).
    fn documented() -> Vec<(String, String)> {
        include_str!("../../../../docs/metrics.md")
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let name = cells
                    .get(1)?
                    .strip_prefix("`switchyard_")?
                    .strip_suffix('`')?;
                let kind = (*cells.get(2)?).to_owned();
                let base = match kind.as_str() {
                    "counter" => name.strip_suffix("_total")?,
                    _ => name,
                };
                Some((base.to_owned(), kind))
            })
            .collect()
    }

    #[test]
    fn docs_metrics_md_lists_every_declared_family_and_nothing_else() {
        let documented = documented();
        let names: std::collections::BTreeSet<String> =
            documented.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(names.len(), documented.len(), "a row twice: {documented:?}");
        let declared = declared();
        assert!(declared.len() >= 50, "the parse found {declared:?}");
        let missing: Vec<_> = declared.difference(&names).collect();
        let extra: Vec<_> = names.difference(&declared).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "docs/metrics.md lacks {missing:?} and lists {extra:?}, which the code does not declare"
        );
        for (name, kind) in &documented {
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind.as_str()),
                "{name}: type {kind:?}"
            );
        }
    }

    #[test]
    fn the_build_info_names_this_build() {
        let info = BuildInfo::current();
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert!(!info.git_sha.is_empty());
        assert!(info.rustc.starts_with("rustc "), "{}", info.rustc);
    }
}
