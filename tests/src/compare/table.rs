//! The comparison's results: a router's [`Row`] read from bench's JSON ([`read_row`]), the
//! markdown table with one row per router ([`markdown`]), the combined TTFT CDF
//! ([`ttft_plot`], drawn by bench's own chart code) and the summary JSON ([`summary`]).

use super::Router;
use super::fronts::RouterCpu;
use super::stages::StageTimes;
use super::tails::{Tail, Tails, tails};
use router_tools::bench::plots::{self, Chart, Series};
use router_tools::bench::{BenchReport, RecordOutcome};
use serde_json::{Value, json};
use std::path::Path;

/// What one router's run gave.
#[derive(Debug, Clone)]
pub enum Outcome {
    Ran(Box<Row>),
    /// The peer is not installed: the row says so, the comparison goes on.
    NotInstalled(String),
    /// The fleet or the router did not come up, or bench did not run.
    Failed(String),
}

/// One router's figures, as bench measured them (ms; ok requests only).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub router: Router,
    pub sent: u64,
    pub ok: u64,
    pub shed: u64,
    pub errors: u64,
    /// Cached over prompt tokens of the ok requests, in %, as the endpoint reported them.
    pub hit_pct: Option<f64>,
    pub ttft_p50: Option<f64>,
    pub ttft_p99: Option<f64>,
    pub itl_p99: Option<f64>,
    pub e2e_p99: Option<f64>,
    /// Every ok request's TTFT, for the CDF.
    pub ttfts: Vec<f64>,
    /// TTFT of short and long prompts apart, and of short ones in bursts (`tails.rs`).
    pub tails: Tails,
    /// The router's CPU seconds for the run (and its load balancer's), when measured.
    pub cpu: Option<RouterCpu>,
    /// Switchyard's time per stage before the first token (`stages.rs`).
    pub stages: Option<StageTimes>,
    /// Bench was stopped before the end of the trace.
    pub interrupted: bool,
    /// Anything odd (a process that did not exit cleanly).
    pub notes: Vec<String>,
}

/// The row of `router` from the bench JSON at `path` (written with `--per-request`).
pub fn read_row(router: Router, path: &Path) -> Result<Row, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("bench wrote no result at {}: {e}", path.display()))?;
    let report: BenchReport = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not bench's JSON: {e}", path.display()))?;
    Ok(row_of(router, &report))
}

/// The row of `router` from bench's `report`.
pub fn row_of(router: Router, report: &BenchReport) -> Row {
    let all = &report.overall;
    Row {
        router,
        sent: all.sent,
        ok: all.ok,
        shed: all.shed,
        errors: all.errors,
        hit_pct: all.prefix_hit_pct,
        ttft_p50: all.ttft_ms.p50,
        ttft_p99: all.ttft_ms.p99,
        itl_p99: all.itl_ms.p99,
        e2e_p99: all.e2e_ms.p99,
        ttfts: report
            .requests
            .iter()
            .filter(|r| r.outcome == RecordOutcome::Ok)
            .filter_map(|r| r.ttft_ms)
            .collect(),
        tails: tails(&report.requests),
        cpu: None,
        stages: None,
        interrupted: report.interrupted,
        notes: Vec::new(),
    }
}

const HEADER: &str = "| router | sent | ok | prefix hit | TTFT p50 | TTFT p99 | ITL p99 | \
                      end-to-end p99 | shed | errors |\n\
                      |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ms"))
}

/// The markdown table: one row per router, in the order run.
pub fn markdown(rows: &[(Router, Outcome)]) -> String {
    let mut out = String::from(HEADER);
    for (router, outcome) in rows {
        let line = match outcome {
            Outcome::Ran(r) => format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                router.name(),
                r.sent,
                r.ok,
                r.hit_pct
                    .map_or_else(|| "-".to_owned(), |h| format!("{h:.1} %")),
                ms(r.ttft_p50),
                ms(r.ttft_p99),
                ms(r.itl_p99),
                ms(r.e2e_p99),
                r.shed,
                r.errors,
            ),
            Outcome::NotInstalled(why) | Outcome::Failed(why) => {
                let first = why.lines().next().unwrap_or_default();
                let first: String = first.chars().take(160).collect();
                format!("| {} | {first} | | | | | | | | |", router.name())
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

const TAILS_HEADER: &str = "| router | short prompts: TTFT p50 / p99 | long prompts: TTFT p50 / p99 | \
                           short prompts in bursts: TTFT p99 (n) | router CPU | CPU per request |\n\
                           |---|---:|---:|---:|---:|---:|\n";

fn pair(t: &Tail) -> String {
    format!("{} / {}", ms(t.p50), ms(t.p99))
}

/// The router's CPU for the run (`+ N s` its load balancer's) and per request sent.
pub fn cpu_cells(cpu: Option<RouterCpu>, sent: u64) -> (String, String) {
    match cpu {
        None => ("-".to_owned(), "-".to_owned()),
        Some(c) => {
            let total = if c.balancer > 0.0 {
                format!("{:.1} s + {:.1} s", c.router, c.balancer)
            } else {
                format!("{:.1} s", c.router)
            };
            let per = format!("{:.2} ms", c.router * 1000.0 / sent.max(1) as f64);
            (total, per)
        }
    }
}

/// The second table: tails by kind of request (short: at most 2,048 prompt tokens) and
/// the router's CPU (a load balancer in front of replicas after the `+`).
pub fn tails_markdown(rows: &[(Router, Outcome)]) -> String {
    let mut out = String::from(TAILS_HEADER);
    for (router, outcome) in rows {
        if let Outcome::Ran(r) = outcome {
            let (cpu, per) = cpu_cells(r.cpu, r.sent);
            out.push_str(&format!(
                "| {} | {} | {} | {} ({}) | {cpu} | {per} |\n",
                router.name(),
                pair(&r.tails.short),
                pair(&r.tails.long),
                ms(r.tails.short_in_bursts.p99),
                r.tails.short_in_bursts.count,
            ));
        }
    }
    out
}

/// Every Switchyard row's stage table (`stages.rs`), one after the other.
pub fn stages_markdown(rows: &[(Router, Outcome)]) -> String {
    rows.iter()
        .filter_map(|(router, outcome)| match outcome {
            Outcome::Ran(r) => r.stages.as_ref().map(|s| s.markdown(router.name())),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The notes under the table: what each router is, and anything odd in a run.
pub fn notes(rows: &[(Router, Outcome)]) -> String {
    let mut out = String::new();
    for (router, outcome) in rows {
        out.push_str(&format!("- `{}`: {}", router.name(), router.describe()));
        match outcome {
            Outcome::Ran(r) if r.interrupted => out.push_str(" (stopped early)"),
            Outcome::Failed(why) => out.push_str(&format!(": failed: {why}")),
            _ => {}
        }
        if let Outcome::Ran(r) = outcome {
            for note in &r.notes {
                out.push_str(&format!("; {note}"));
            }
        }
        out.push('\n');
    }
    out
}

/// One TTFT CDF line per router that ran (none when no router had an ok request).
pub fn ttft_plot(rows: &[(Router, Outcome)]) -> Option<Chart> {
    let series: Vec<Series> = rows
        .iter()
        .filter_map(|(router, outcome)| match outcome {
            Outcome::Ran(r) if !r.ttfts.is_empty() => Some(Series {
                name: router.name().to_owned(),
                points: plots::cdf(r.ttfts.clone()),
            }),
            _ => None,
        })
        .collect();
    (!series.is_empty()).then(|| Chart {
        file: "ttft-cdf",
        title: "Time to first token by router (ok requests)".to_owned(),
        x_label: "TTFT (ms)",
        y_label: "share of requests at or below",
        cdf: true,
        series,
    })
}

/// Every row as JSON: `{"setup", "rows": [{"router", "outcome": "ran" | "not installed" |
/// "failed", ...}]}`.
pub fn summary(setup: &str, rows: &[(Router, Outcome)]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|(router, outcome)| match outcome {
            Outcome::Ran(r) => json!({
                "router": router.name(),
                "outcome": "ran",
                "sent": r.sent,
                "ok": r.ok,
                "shed": r.shed,
                "errors": r.errors,
                "prefix_hit_pct": r.hit_pct,
                "ttft_p50_ms": r.ttft_p50,
                "ttft_p99_ms": r.ttft_p99,
                "itl_p99_ms": r.itl_p99,
                "e2e_p99_ms": r.e2e_p99,
                "short_ttft_p50_ms": r.tails.short.p50,
                "short_ttft_p99_ms": r.tails.short.p99,
                "long_ttft_p50_ms": r.tails.long.p50,
                "long_ttft_p99_ms": r.tails.long.p99,
                "short_in_bursts_ttft_p99_ms": r.tails.short_in_bursts.p99,
                "short_in_bursts": r.tails.short_in_bursts.count,
                "router_cpu_s": r.cpu.map(|c| c.router),
                "balancer_cpu_s": r.cpu.map(|c| c.balancer),
                "interrupted": r.interrupted,
                "notes": r.notes,
            }),
            Outcome::NotInstalled(why) => json!({
                "router": router.name(), "outcome": "not installed", "why": why,
            }),
            Outcome::Failed(why) => json!({
                "router": router.name(), "outcome": "failed", "why": why,
            }),
        })
        .collect();
    json!({ "setup": setup, "rows": rows })
}
