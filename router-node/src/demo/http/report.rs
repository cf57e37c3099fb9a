//! What the HTTP demo measured, as a table or JSON: per class the requests sent, admitted
//! (HTTP 200) and completed, rejected by reason (the JSON error's `reason`), TTFT (send →
//! first SSE chunk) and end-to-end percentiles in wall-clock milliseconds; the prefix-cache
//! hit rate from the engines' counters; the router's own gate counters (`/debug/state`);
//! whether every request was accounted for exactly once, and whether the ledger ended idle.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::Value;

use super::load::{Finished, Outcome};
use crate::demo::report::{Percentiles, round};
use router_node::loadgen::micros;

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
    ttft: Histogram<u64>,
    e2e: Histogram<u64>,
}

impl HttpReport {
    /// Folds the outcomes into per-class rows, in `classes` order (classes not listed are
    /// appended as they appear).
    pub fn build(
        classes: &[String],
        finished: &[Finished],
        facts: RunFacts,
    ) -> Result<Self, String> {
        let hist = || {
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
                .map_err(|e| format!("histogram: {e}"))
        };
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
                    ttft_ms: Percentiles {
                        p50: None,
                        p99: None,
                    },
                    e2e_ms: Percentiles {
                        p50: None,
                        p99: None,
                    },
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
                        rec.ttft.saturating_record(micros(*t));
                    }
                    rec.e2e.saturating_record(micros(*e2e));
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
                r.report.ttft_ms = Percentiles::of(&r.ttft);
                r.report.e2e_ms = Percentiles::of(&r.e2e);
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
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "class",
            "requests",
            "admitted",
            "completed",
            "rejected",
            "ttft p50",
            "ttft p99",
            "e2e p50",
            "e2e p99"
        );
        let ms = router_node::loadgen::cell;
        for c in &self.classes {
            let _ = writeln!(
                s,
                "{:<12} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}",
                c.class,
                c.requests,
                c.admitted,
                c.completed,
                c.rejected,
                ms(c.ttft_ms.p50),
                ms(c.ttft_ms.p99),
                ms(c.e2e_ms.p50),
                ms(c.e2e_ms.p99),
            );
        }
        let t = &self.totals;
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>8} {:>9} {:>8}",
            "total", t.requests, t.admitted, t.completed, t.rejected
        );
        let _ = writeln!(
            s,
            "(admitted = HTTP 200; ttft = send to first SSE chunk; times in wall-clock ms)\n"
        );
        for c in &self.classes {
            let reasons: Vec<String> = c
                .rejected_by_reason
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let reasons = if reasons.is_empty() {
                "none".to_owned()
            } else {
                reasons.join(", ")
            };
            let _ = writeln!(s, "rejected {:<12} {reasons}", format!("{}:", c.class));
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
