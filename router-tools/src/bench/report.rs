//! What `router-tools bench` measured, per class and overall, as a table or JSON.
//!
//! Every request lands in exactly one bucket: `ok` (HTTP 200 and a stream that ended with
//! `[DONE]` without an error event), `shed` (HTTP 429 or 503, by the JSON error's `reason`,
//! else `http_<status>`), or `errors` (anything else, by reason; `transport_failures` counts
//! the ones that got no HTTP response at all). Latencies are those of the `ok` requests, in
//! milliseconds: TTFT (send → first content chunk), ITL (gaps between content chunks) and
//! end to end. Rates are over the run's wall clock. The prefix hit rate is the share of the
//! `ok` requests' prompt tokens the endpoint reported as cached
//! (`usage.prompt_tokens_details.cached_tokens`); `None` when it reported none.
//!
//! With `per_request`, `requests` lists every request in send order ([`RequestRecord`],
//! `record.rs`), so a run can be cut by send time (e.g. into the phases of a fault).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::queue::QueueSample;
use super::record::{Finished, RecordOutcome, RequestRecord, bucket};
use crate::loadgen::Outcome;
use crate::report::{
    ClassTable, Column, Latency, Percentiles, cell, col, reason_counts, reasons_line, round,
};

/// The class name of requests sent without a class header.
pub const DEFAULT_CLASS: &str = "default";

/// One class's numbers (or the overall ones, class `"all"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassStats {
    pub class: String,
    pub sent: u64,
    pub ok: u64,
    pub shed: u64,
    pub shed_by_reason: BTreeMap<String, u64>,
    pub errors: u64,
    pub errors_by_reason: BTreeMap<String, u64>,
    /// Errors without any HTTP response (connection refused, reset, client timeout).
    pub transport_failures: u64,
    pub ttft_ms: Percentiles,
    pub itl_ms: Percentiles,
    pub e2e_ms: Percentiles,
    /// Output tokens of the ok requests (`usage.completion_tokens`, else content chunks).
    pub output_tokens: u64,
    /// Ok requests per second of wall clock.
    pub request_rate: f64,
    pub output_tokens_per_s: f64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub prefix_hit_pct: Option<f64>,
    /// The class's TTFT objective (`--slo`), in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_ttft_ms: Option<f64>,
    /// Of the requests sent under an objective, the share that were ok with a TTFT within
    /// it, in % (shed and failed requests miss it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_attainment_pct: Option<f64>,
}

/// The result of one replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub url: String,
    /// The trace's path, or the synthetic load's shape.
    pub trace: String,
    pub speedup: f64,
    pub seed: u64,
    /// When the run started, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_unix_ms: u64,
    pub wall_s: f64,
    /// The run was stopped before its workload's end (Ctrl-C, SIGTERM).
    #[serde(default)]
    pub interrupted: bool,
    pub classes: Vec<ClassStats>,
    pub overall: ClassStats,
    /// Every request in send order (with `per_request`; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestRecord>,
    /// Requests waiting per class during the run, from the node's `/metrics` (with plots,
    /// when the endpoint is a Switchyard node; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_depth: Vec<QueueSample>,
    /// The SVG plots written for the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plots: Vec<PathBuf>,
}

/// Run facts the clients do not measure.
#[derive(Debug, Clone)]
pub struct RunFacts {
    pub url: String,
    pub trace: String,
    pub speedup: f64,
    pub seed: u64,
    pub wall: Duration,
    pub started_unix_ms: u64,
    pub interrupted: bool,
    /// TTFT objectives per class, in ms.
    pub slo: Vec<(String, f64)>,
}

struct Acc {
    stats: ClassStats,
    ttft: Latency,
    itl: Latency,
    e2e: Latency,
    reported_cache: bool,
    /// Requests sent under an objective, and those that met it.
    slo_sent: u64,
    slo_met: u64,
}

impl Acc {
    fn new(class: &str, slo: Option<f64>) -> Result<Self, hdrhistogram::CreationError> {
        Ok(Self {
            stats: ClassStats {
                class: class.to_owned(),
                sent: 0,
                ok: 0,
                shed: 0,
                shed_by_reason: BTreeMap::new(),
                errors: 0,
                errors_by_reason: BTreeMap::new(),
                transport_failures: 0,
                ttft_ms: Percentiles::default(),
                itl_ms: Percentiles::default(),
                e2e_ms: Percentiles::default(),
                output_tokens: 0,
                request_rate: 0.0,
                output_tokens_per_s: 0.0,
                prompt_tokens: 0,
                cached_tokens: 0,
                prefix_hit_pct: None,
                slo_ttft_ms: slo,
                slo_attainment_pct: None,
            },
            ttft: Latency::new()?,
            itl: Latency::new()?,
            e2e: Latency::new()?,
            reported_cache: false,
            slo_sent: 0,
            slo_met: 0,
        })
    }

    /// Adds one request, sent under the TTFT objective `slo` (ms) when there is one.
    fn add(&mut self, outcome: &Outcome, slo: Option<f64>) {
        let s = &mut self.stats;
        s.sent += 1;
        let (bucket, reason) = bucket(outcome);
        if let Some(slo) = slo {
            self.slo_sent += 1;
            let met = match (bucket, outcome) {
                (RecordOutcome::Ok, Outcome::Admitted(r)) => {
                    r.ttft.is_some_and(|t| t.as_secs_f64() * 1e3 <= slo)
                }
                _ => false,
            };
            self.slo_met += u64::from(met);
        }
        let reason = reason.unwrap_or_default();
        match (bucket, outcome) {
            (RecordOutcome::Ok, Outcome::Admitted(r)) => {
                s.ok += 1;
                if let Some(t) = r.ttft {
                    self.ttft.record(t);
                }
                for &gap in &r.itl {
                    self.itl.record(gap);
                }
                self.e2e.record(r.e2e);
                s.output_tokens += r.completion_tokens.unwrap_or(r.content_chunks);
                if let (Some(prompt), Some(cached)) = (r.prompt_tokens, r.cached_tokens) {
                    s.prompt_tokens += prompt;
                    s.cached_tokens += cached.min(prompt);
                    self.reported_cache = true;
                }
            }
            (RecordOutcome::Shed, _) => {
                s.shed += 1;
                *s.shed_by_reason.entry(reason).or_insert(0) += 1;
            }
            (_, outcome) => {
                s.errors += 1;
                if matches!(outcome, Outcome::Rejected { status: None, .. }) {
                    s.transport_failures += 1;
                }
                *s.errors_by_reason.entry(reason).or_insert(0) += 1;
            }
        }
    }

    fn finish(mut self, wall: Duration) -> ClassStats {
        let secs = wall.as_secs_f64().max(1e-9);
        let s = &mut self.stats;
        s.ttft_ms = self.ttft.percentiles();
        s.itl_ms = self.itl.percentiles();
        s.e2e_ms = self.e2e.percentiles();
        s.request_rate = round(s.ok as f64 / secs, 2);
        s.output_tokens_per_s = round(s.output_tokens as f64 / secs, 2);
        s.prefix_hit_pct = (self.reported_cache && s.prompt_tokens > 0)
            .then(|| round(s.cached_tokens as f64 * 100.0 / s.prompt_tokens as f64, 2));
        s.slo_attainment_pct = (self.slo_sent > 0)
            .then(|| round(self.slo_met as f64 * 100.0 / self.slo_sent as f64, 2));
        self.stats
    }
}

/// The table's columns, the last two (the SLO attainment) only when an objective was given.
const COLUMNS_SLO: &[Column] = &[
    col("class", 12),
    col("sent", 6),
    col("ok", 6),
    col("shed", 6),
    col("errors", 6),
    col("ttft p50", 9),
    col("ttft p90", 9),
    col("ttft p99", 9),
    col("itl p50", 8),
    col("itl p99", 8),
    col("e2e p50", 9),
    col("e2e p99", 9),
    col("req/s", 8),
    col("out tok/s", 9),
    col("hit %", 6),
    col("slo", 7),
    col("slo ok %", 8),
];

/// The table's columns without an objective.
const COLUMNS: &[Column] = COLUMNS_SLO.split_at(COLUMNS_SLO.len() - 2).0;

impl BenchReport {
    /// Folds the outcomes into per-class rows in `classes` order (classes not listed are
    /// appended as they appear) and an overall row.
    pub fn build(
        classes: &[String],
        finished: &[Finished],
        facts: RunFacts,
    ) -> Result<Self, hdrhistogram::CreationError> {
        let slo_of = |class: &str| {
            facts
                .slo
                .iter()
                .find(|(c, _)| c == class)
                .map(|&(_, ms)| ms)
        };
        let mut accs = classes
            .iter()
            .map(|c| Acc::new(c, slo_of(c)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut overall = Acc::new("all", None)?;
        for f in finished {
            let name = f.class.as_deref().unwrap_or(DEFAULT_CLASS);
            let slo = slo_of(name);
            let i = match accs.iter().position(|a| a.stats.class == name) {
                Some(i) => i,
                None => {
                    accs.push(Acc::new(name, slo)?);
                    accs.len() - 1
                }
            };
            if let Some(acc) = accs.get_mut(i) {
                acc.add(&f.outcome, slo);
            }
            overall.add(&f.outcome, slo);
        }
        Ok(Self {
            url: facts.url,
            trace: facts.trace,
            speedup: facts.speedup,
            seed: facts.seed,
            started_unix_ms: facts.started_unix_ms,
            wall_s: round(facts.wall.as_secs_f64(), 2),
            interrupted: facts.interrupted,
            classes: accs.into_iter().map(|a| a.finish(facts.wall)).collect(),
            overall: overall.finish(facts.wall),
            requests: Vec::new(),
            queue_depth: Vec::new(),
            plots: Vec::new(),
        })
    }

    /// Whether every request failed without an HTTP response (the endpoint was unreachable).
    pub fn all_transport_failures(&self) -> bool {
        self.overall.sent > 0 && self.overall.transport_failures == self.overall.sent
    }

    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "router-tools bench: {} requests of {} against {} ({}x speedup) in {} s wall clock{}\n",
            self.overall.sent,
            self.trace,
            self.url,
            self.speedup,
            self.wall_s,
            if self.interrupted {
                " (stopped early)"
            } else {
                ""
            }
        );
        let with_slo = self.classes.iter().any(|c| c.slo_ttft_ms.is_some());
        let mut table = ClassTable::new(if with_slo { COLUMNS_SLO } else { COLUMNS });
        for c in self.classes.iter().chain(std::iter::once(&self.overall)) {
            table.row(&[
                c.class.clone(),
                c.sent.to_string(),
                c.ok.to_string(),
                c.shed.to_string(),
                c.errors.to_string(),
                cell(c.ttft_ms.p50),
                cell(c.ttft_ms.p90),
                cell(c.ttft_ms.p99),
                cell(c.itl_ms.p50),
                cell(c.itl_ms.p99),
                cell(c.e2e_ms.p50),
                cell(c.e2e_ms.p99),
                format!("{:.2}", c.request_rate),
                format!("{:.1}", c.output_tokens_per_s),
                cell(c.prefix_hit_pct),
                c.slo_ttft_ms
                    .map_or_else(|| "-".to_owned(), |ms| format!("{ms}")),
                cell(c.slo_attainment_pct),
            ]);
        }
        s.push_str(&table.finish());
        let _ = writeln!(
            s,
            "(ok = HTTP 200 streamed to [DONE]; shed = HTTP 429/503; latencies of ok requests in \
             wall-clock ms; hit % = cached / prompt tokens as the endpoint reported them)"
        );
        if with_slo {
            let _ = writeln!(
                s,
                "(slo = the class's TTFT objective in ms; slo ok % = sent requests that were ok \
                 within it, shed and failed ones missing it)"
            );
        }
        for c in &self.classes {
            let mut reasons = reason_counts("shed ", &c.shed_by_reason);
            reasons.extend(reason_counts("error ", &c.errors_by_reason));
            s.extend(reasons_line("", &c.class, &reasons, None));
        }
        s
    }
}
