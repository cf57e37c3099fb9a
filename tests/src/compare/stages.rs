//! Where Switchyard's requests spent their time before the first token, stage by stage:
//! `switchyard_request_stage_seconds` read from every replica's `/metrics` after the run,
//! summed over the replicas, as p50 and p99 per stage for short and for long prompts
//! (the histogram's quantiles, interpolated within a bucket as PromQL's
//! `histogram_quantile` does).

use prom_text_format_parser::parse_scrape;
use std::collections::BTreeMap;

/// The family read.
const FAMILY: &str = "switchyard_request_stage_seconds";

/// The stages in the order a request goes through them (the metric's `stage` label).
pub const STAGES: [&str; 7] = [
    "read",
    "parse",
    "tokenize_wait",
    "tokenize",
    "classify",
    "admit",
    "first_token",
];

/// One stage's histogram for one prompt size: cumulative counts by upper bound (seconds).
#[derive(Debug, Clone, Default, PartialEq)]
struct Buckets(BTreeMap<OrderedBound, f64>);

/// A bucket's upper bound, ordered as numbers (`+Inf` last).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedBound(f64);

impl Eq for OrderedBound {}

impl PartialOrd for OrderedBound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderedBound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Buckets {
    /// The `q` quantile (0..1) in seconds; `None` without observations.
    fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.0.values().copied().fold(0.0, f64::max);
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for (bound, &count) in &self.0 {
            if count >= rank {
                if bound.0.is_infinite() {
                    return Some(lower);
                }
                let within = count - below;
                let share = if within > 0.0 {
                    (rank - below) / within
                } else {
                    1.0
                };
                return Some(lower + (bound.0 - lower) * share);
            }
            (lower, below) = (bound.0, count);
        }
        Some(lower)
    }
}

/// Every stage's histograms by prompt size (`short`, `long`), summed over scrapes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageTimes(BTreeMap<(String, String), Buckets>);

impl StageTimes {
    /// Adds one `/metrics` scrape.
    pub fn add_scrape(&mut self, text: &str) {
        let (metrics, _) = parse_scrape(text);
        for metric in metrics.iter().filter(|m| m.name == FAMILY) {
            for sample in &metric.samples {
                let label = |key: &str| {
                    sample
                        .labels
                        .iter()
                        .find(|l| l.key == key)
                        .map(|l| l.value.clone())
                };
                let (Some(stage), Some(prompt), Some(le)) =
                    (label("stage"), label("prompt"), label("le"))
                else {
                    continue;
                };
                let bound = match le.as_str() {
                    "+Inf" => f64::INFINITY,
                    le => match le.parse() {
                        Ok(b) => b,
                        Err(_) => continue,
                    },
                };
                let count: f64 = sample.value.value.parse().unwrap_or(0.0);
                *self
                    .0
                    .entry((stage, prompt))
                    .or_default()
                    .0
                    .entry(OrderedBound(bound))
                    .or_default() += count;
            }
        }
    }

    /// The `q` quantile of `stage` for `prompt` (`short`, `long`), in ms.
    pub fn quantile_ms(&self, stage: &str, prompt: &str, q: f64) -> Option<f64> {
        self.0
            .get(&(stage.to_owned(), prompt.to_owned()))
            .and_then(|b| b.quantile(q))
            .map(|s| s * 1000.0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The markdown table: a row per stage, p50 and p99 of short and of long prompts.
    pub fn markdown(&self, router: &str) -> String {
        let cell = |stage: &str, prompt: &str, q: f64| {
            self.quantile_ms(stage, prompt, q)
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1} ms"))
        };
        let mut out = format!(
            "| {router}: stage | short p50 | short p99 | long p50 | long p99 |\n\
             |---|---:|---:|---:|---:|\n"
        );
        for stage in STAGES {
            out.push_str(&format!(
                "| {stage} | {} | {} | {} | {} |\n",
                cell(stage, "short", 0.5),
                cell(stage, "short", 0.99),
                cell(stage, "long", 0.5),
                cell(stage, "long", 0.99),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_the_stage_histograms_summed_over_replicas() {
        let scrape = |n: u32| {
            format!(
                "# HELP switchyard_request_stage_seconds Time.\n\
                 # TYPE switchyard_request_stage_seconds histogram\n\
                 switchyard_request_stage_seconds_sum{{stage=\"admit\",prompt=\"short\"}} 1.0\n\
                 switchyard_request_stage_seconds_count{{stage=\"admit\",prompt=\"short\"}} {n}\n\
                 switchyard_request_stage_seconds_bucket{{le=\"0.001\",stage=\"admit\",prompt=\"short\"}} 0\n\
                 switchyard_request_stage_seconds_bucket{{le=\"0.002\",stage=\"admit\",prompt=\"short\"}} {}\n\
                 switchyard_request_stage_seconds_bucket{{le=\"+Inf\",stage=\"admit\",prompt=\"short\"}} {n}\n\
                 # EOF\n",
                n / 2
            )
        };
        let mut times = StageTimes::default();
        times.add_scrape(&scrape(100));
        times.add_scrape(&scrape(100));
        // 100 of 200 under 2 ms, none under 1 ms: the median is at the top of that bucket.
        let p50 = times.quantile_ms("admit", "short", 0.5).expect("observed");
        assert!((p50 - 2.0).abs() < 1e-9, "{p50}");
        // 99 % falls in the +Inf bucket: its lower bound.
        let p99 = times.quantile_ms("admit", "short", 0.99).expect("observed");
        assert!((p99 - 2.0).abs() < 1e-9, "{p99}");
        assert_eq!(times.quantile_ms("admit", "long", 0.5), None);
        assert!(
            times
                .markdown("switchyard-1")
                .contains("| admit | 2.0 ms | 2.0 ms | - | - |")
        );
    }
}
