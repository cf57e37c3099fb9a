//! What the HTTP demo measured, as a table or JSON: per class the requests sent, admitted
//! (HTTP 200) and completed, rejected by reason (the JSON error's `reason`), TTFT (send →
//! first SSE chunk) and end-to-end percentiles in wall-clock milliseconds; the prefix-cache
//! hit rate from the engines' counters; the router's own gate counters (`/debug/state`);
//! whether every request was accounted for exactly once, and whether the ledger ended idle.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::load::{Finished, Outcome};
use crate::report::{
    ClassTable, Column, Latency, Percentiles, cell, col, reason_counts, reasons_line, round,
};

/// The class table's columns.
const COLUMNS: &[Column] = &[
    col("class", 12),
    col("requests", 8),
    col("admitted", 8),
    col("completed", 9),
    col("rejected", 8),
    col("ttft p50", 9),
    col("ttft p99", 9),
    col("e2e p50", 9),
    col("e2e p99", 9),
];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassReport {
    pub class: String,
    pub requests: u64,
    pub admitted: u64,
    /// Admitted and streamed to `[DONE]` without an error event.
    pub completed: u64,
    pub rejected: u64,
    pub rejected_by_reason: BTreeMap<String, u64>,
    pub ttft_ms: Percentiles,
    pub e2e_ms: Percentiles,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub admitted: u64,
    pub completed: u64,
    pub rejected: u64,
}

/// Prefix reuse as the engines saw it: prompt tokens of completed requests (their
/// `usage`) against the prompt tokens the engines computed (`/load`'s `prefill_tokens`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefixReport {
    pub prompt_tokens: u64,
    pub computed_tokens: u64,
    pub hit_pct: f64,
}

/// The HTTP demo's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HttpReport {
    pub mode: &'static str,
    pub url: String,
    pub workers: u32,
    pub requests: u32,
    pub seed: u64,
    pub speedup: f64,
    pub kv_blocks_per_worker: usize,
    pub wall_s: f64,
    pub classes: Vec<ClassReport>,
    pub totals: Totals,
    pub prefix_cache: PrefixReport,
    /// The router's scheduler counters after the run (`/debug/state`).
    pub router_stats: Value,
    pub every_request_accounted: bool,
    pub ledgers_idle: bool,
}

/// Run facts the clients do not measure.
#[derive(Debug, Clone)]
pub struct RunFacts {
    /// "aggregated" or "disaggregated".
    pub mode: &'static str,
    pub url: String,
    pub workers: u32,
    pub requests: u32,
    pub seed: u64,
    pub speedup: f64,
    pub kv_blocks_per_worker: usize,
    pub wall: Duration,
    pub computed_tokens: u64,
    pub router_stats: Value,
    pub ledgers_idle: bool,
}

struct Rec {
    report: ClassReport,
    ttft: Latency,
    e2e: Latency,
}

impl HttpReport {
    /// Folds the outcomes into per-class rows, in `classes` order (classes not listed are
    /// appended as they appear).
    pub fn build(
        classes: &[String],
        finished: &[Finished],
        facts: RunFacts,
    ) -> Result<Self, String> {
        let hist = || Latency::new().map_err(|e| format!("histogram: {e}"));
        let mut recs: Vec<Rec> = Vec::new();
        let new_rec = |name: &str| -> Result<Rec, String> {
            Ok(Rec {
                report: ClassReport {
                    class: name.to_owned(),
                    requests: 0,
                    admitted: 0,
                    completed: 0,
                    rejected: 0,
                    rejected_by_reason: BTreeMap::new(),
                    ttft_ms: Percentiles::default(),
                    e2e_ms: Percentiles::default(),
                },
                ttft: hist()?,
                e2e: hist()?,
            })
        };
        for name in classes {
            recs.push(new_rec(name)?);
        }
        let mut prompt_tokens = 0_u64;
        for f in finished {
            let i = match recs.iter().position(|r| r.report.class == f.class) {
                Some(i) => i,
                None => {
                    recs.push(new_rec(f.class)?);
                    recs.len() - 1
                }
            };
            let Some(rec) = recs.get_mut(i) else { continue };
            rec.report.requests += 1;
            match &f.outcome {
                Outcome::Admitted {
                    completed,
                    ttft,
                    e2e,
                    prompt_tokens: usage,
                } => {
                    rec.report.admitted += 1;
                    if *completed {
                        rec.report.completed += 1;
                        prompt_tokens += usage.unwrap_or(0);
                    }
                    if let Some(t) = ttft {
                        rec.ttft.record(*t);
                    }
                    rec.e2e.record(*e2e);
                }
                Outcome::Rejected { reason } => {
                    rec.report.rejected += 1;
                    *rec.report
                        .rejected_by_reason
                        .entry(reason.clone())
                        .or_insert(0) += 1;
                }
            }
        }
        let classes: Vec<ClassReport> = recs
            .into_iter()
            .map(|mut r| {
                r.report.ttft_ms = r.ttft.percentiles();
                r.report.e2e_ms = r.e2e.percentiles();
                r.report
            })
            .collect();
        let sum = |f: fn(&ClassReport) -> u64| classes.iter().map(f).sum::<u64>();
        let totals = Totals {
            requests: sum(|c| c.requests),
            admitted: sum(|c| c.admitted),
            completed: sum(|c| c.completed),
            rejected: sum(|c| c.rejected),
        };
        let accounted = totals.requests == u64::from(facts.requests)
            && finished.len() as u64 == totals.requests
            && totals.admitted + totals.rejected == totals.requests
            && classes.iter().all(|c| {
                c.admitted + c.rejected == c.requests
                    && c.rejected_by_reason.values().sum::<u64>() == c.rejected
            });
        let hit_pct = if prompt_tokens == 0 {
            0.0
        } else {
            round(
                prompt_tokens.saturating_sub(facts.computed_tokens) as f64 * 100.0
                    / prompt_tokens as f64,
                1,
            )
        };
        Ok(Self {
            mode: facts.mode,
            url: facts.url,
            workers: facts.workers,
            requests: facts.requests,
            seed: facts.seed,
            speedup: facts.speedup,
            kv_blocks_per_worker: facts.kv_blocks_per_worker,
            wall_s: round(facts.wall.as_secs_f64(), 2),
            classes,
            totals,
            prefix_cache: PrefixReport {
                prompt_tokens,
                computed_tokens: facts.computed_tokens,
                hit_pct,
            },
            router_stats: facts.router_stats,
            every_request_accounted: accounted,
            ledgers_idle: facts.ledgers_idle,
        })
    }

    pub fn ok(&self) -> bool {
        self.every_request_accounted && self.ledgers_idle
    }

    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Switchyard demo over HTTP: one router node at {} in front of {} simulated engines \
             (in-process bus, {} KV blocks each, {}x speedup)",
            self.url, self.workers, self.kv_blocks_per_worker, self.speedup
        );
        let _ = writeln!(
            s,
            "{} streaming requests of the built-in workload (seed {}) in {} s wall clock\n",
            self.requests, self.seed, self.wall_s
        );
        let mut table = ClassTable::new(COLUMNS);
        for c in &self.classes {
            table.row(&[
                c.class.clone(),
                c.requests.to_string(),
                c.admitted.to_string(),
                c.completed.to_string(),
                c.rejected.to_string(),
                cell(c.ttft_ms.p50),
                cell(c.ttft_ms.p99),
                cell(c.e2e_ms.p50),
                cell(c.e2e_ms.p99),
            ]);
        }
        let t = &self.totals;
        table.row(&[
            "total".to_owned(),
            t.requests.to_string(),
            t.admitted.to_string(),
            t.completed.to_string(),
            t.rejected.to_string(),
        ]);
        s.push_str(&table.finish());
        let _ = writeln!(
            s,
            "(admitted = HTTP 200; ttft = send to first SSE chunk; times in wall-clock ms)\n"
        );
        for c in &self.classes {
            let reasons = reason_counts("", &c.rejected_by_reason);
            s.extend(reasons_line("rejected ", &c.class, &reasons, Some("none")));
        }
        let p = &self.prefix_cache;
        let _ = writeln!(
            s,
            "prefix cache: {} % of prompt tokens were already cached on their engine \
             ({} prompt tokens completed, {} computed)",
            p.hit_pct, p.prompt_tokens, p.computed_tokens
        );
        let stat = |k: &str| self.router_stats[k].as_u64().unwrap_or(0);
        let _ = writeln!(
            s,
            "router gate: {} admitted, {} queued, {} rejected, {} gate passes",
            stat("admitted"),
            stat("queued"),
            stat("rejected"),
            stat("gate_passes")
        );
        let _ = writeln!(
            s,
            "accounting: every request admitted or rejected exactly once: {}",
            if self.every_request_accounted {
                "yes"
            } else {
                "NO"
            }
        );
        let _ = writeln!(
            s,
            "ledgers idle: {}",
            if self.ledgers_idle { "yes" } else { "NO" }
        );
        s
    }
}
