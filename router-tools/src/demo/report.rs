//! What the demo measures and prints: per class, how many requests came, how they were
//! admitted (directly or after queueing) or rejected (by `RejectReason::label()`), queue
//! wait and TTFT percentiles (simulated milliseconds, `crate::report`); fleet-wide, the
//! prefix-cache hit rate, the peak of booked + reserved decode KV on the busiest rank, the
//! schedulers' own counters, any accounting anomaly, and whether the ledgers ended idle.
//! The same [`Report`] renders as a table or as JSON.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::report::{Latency, Percentiles, round};
use router_core::admission::SchedulerStats;
use router_core::ledger::BookingLedger;
use router_core::{ClassId, PolicyProfile, RankId, Scheduler};
use serde::Serialize;

use super::Options;
use super::engines::{KV_BLOCKS, MAX_BATCHED_TOKENS, committed_pct};

/// At most this many anomalies are kept verbatim (all are counted).
const ANOMALIES_KEPT: usize = 10;

#[derive(Debug)]
struct ClassRec {
    name: String,
    decode_line_pct: Option<f64>,
    requests: u64,
    direct: u64,
    after_queue: u64,
    rejected: BTreeMap<&'static str, u64>,
    completed: u64,
    wait: Latency,
    ttft: Latency,
}

/// Collects measurements during a run.
#[derive(Debug)]
pub struct Recorder {
    classes: Vec<ClassRec>,
    prompt_tokens: u64,
    cached_tokens: u64,
    peak_pct: f64,
    peak_rank: Option<RankId>,
    anomalies: Vec<String>,
    anomaly_count: u64,
    end_us: u64,
    idle: bool,
    gate_stats: SchedulerStats,
    decode_stats: Option<SchedulerStats>,
}

impl Recorder {
    pub fn new(profile: &PolicyProfile) -> Result<Self, String> {
        let hist = || Latency::new().map_err(|e| format!("histogram: {e}"));
        let classes = profile
            .classes()
            .iter()
            .map(|c| {
                Ok(ClassRec {
                    name: c.name.clone(),
                    decode_line_pct: c
                        .decode_busy_threshold_frac
                        .map(|f| round(f.as_f64() * 100.0, 1)),
                    requests: 0,
                    direct: 0,
                    after_queue: 0,
                    rejected: BTreeMap::new(),
                    completed: 0,
                    wait: hist()?,
                    ttft: hist()?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            classes,
            prompt_tokens: 0,
            cached_tokens: 0,
            peak_pct: 0.0,
            peak_rank: None,
            anomalies: Vec::new(),
            anomaly_count: 0,
            end_us: 0,
            idle: false,
            gate_stats: SchedulerStats::default(),
            decode_stats: None,
        })
    }

    fn class(&mut self, class: ClassId) -> Option<&mut ClassRec> {
        self.classes.get_mut(class.index())
    }

    pub fn offered(&mut self, class: ClassId) {
        if let Some(c) = self.class(class) {
            c.requests += 1;
        }
    }

    pub fn admitted(&mut self, class: ClassId, after_queue: bool, waited: Duration) {
        if let Some(c) = self.class(class) {
            if after_queue {
                c.after_queue += 1;
            } else {
                c.direct += 1;
            }
            c.wait.record(waited);
        }
    }

    pub fn rejected(&mut self, class: ClassId, label: &'static str) {
        if let Some(c) = self.class(class) {
            *c.rejected.entry(label).or_insert(0) += 1;
        }
    }

    pub fn first_token(&mut self, class: ClassId, ttft_us: u64) {
        if let Some(c) = self.class(class) {
            c.ttft.record_us(ttft_us);
        }
    }

    pub fn completed(&mut self, class: ClassId) {
        if let Some(c) = self.class(class) {
            c.completed += 1;
        }
    }

    pub fn prefix(&mut self, prompt_tokens: u64, cached_tokens: u64) {
        self.prompt_tokens += prompt_tokens;
        self.cached_tokens += cached_tokens;
    }

    /// Call after anything was booked or reserved on `rank` of the ledger holding decode KV.
    pub fn note_committed(&mut self, ledger: &BookingLedger, rank: RankId) {
        if let Some(pct) = committed_pct(ledger, rank)
            && pct > self.peak_pct
        {
            self.peak_pct = pct;
            self.peak_rank = Some(rank);
        }
    }

    pub fn anomaly(&mut self, what: String) {
        self.anomaly_count += 1;
        if self.anomalies.len() < ANOMALIES_KEPT {
            self.anomalies.push(what);
        }
    }

    pub fn finish(
        &mut self,
        end_us: u64,
        idle: bool,
        gate: &Scheduler,
        decode: Option<&Scheduler>,
    ) {
        self.end_us = end_us;
        self.idle = idle;
        self.gate_stats = gate.stats().clone();
        self.decode_stats = decode.map(|d| d.stats().clone());
    }

    pub fn report(&self, opts: &Options) -> Report {
        let classes: Vec<ClassReport> = self
            .classes
            .iter()
            .map(|c| {
                let rejected = c.rejected.values().sum();
                ClassReport {
                    class: c.name.clone(),
                    requests: c.requests,
                    admitted: c.direct + c.after_queue,
                    admitted_direct: c.direct,
                    admitted_after_queue: c.after_queue,
                    rejected,
                    rejected_by_reason: c
                        .rejected
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), *v))
                        .collect(),
                    completed: c.completed,
                    queue_wait_ms: c.wait.percentiles(),
                    ttft_ms: c.ttft.percentiles(),
                    decode_line_pct: c.decode_line_pct,
                }
            })
            .collect();
        let sum = |f: fn(&ClassReport) -> u64| classes.iter().map(f).sum::<u64>();
        let totals = Totals {
            requests: sum(|c| c.requests),
            admitted: sum(|c| c.admitted),
            rejected: sum(|c| c.rejected),
            completed: sum(|c| c.completed),
        };
        let accounted = totals.admitted + totals.rejected == totals.requests
            && totals.completed == totals.admitted
            && classes
                .iter()
                .all(|c| c.admitted + c.rejected == c.requests);
        Report {
            mode: if opts.disagg {
                "disaggregated"
            } else {
                "aggregated"
            },
            workers: opts.workers,
            requests: opts.requests,
            seed: opts.seed,
            kv_blocks_per_rank: KV_BLOCKS,
            max_num_batched_tokens: MAX_BATCHED_TOKENS,
            simulated_s: round(self.end_us as f64 / 1e6, 1),
            classes,
            totals,
            prefix_cache_hit_pct: round(
                self.cached_tokens as f64 * 100.0 / self.prompt_tokens.max(1) as f64,
                1,
            ),
            peak_decode_kv_pct: round(self.peak_pct, 1),
            peak_decode_rank: self.peak_rank.map(|r| r.to_string()),
            gate_stats: self.gate_stats.clone(),
            decode_stats: self.decode_stats.clone(),
            anomalies: self.anomaly_count,
            anomaly_samples: self.anomalies.clone(),
            every_request_accounted: accounted && self.anomaly_count == 0,
            ledgers_idle: self.idle,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassReport {
    pub class: String,
    pub requests: u64,
    pub admitted: u64,
    pub admitted_direct: u64,
    pub admitted_after_queue: u64,
    pub rejected: u64,
    pub rejected_by_reason: BTreeMap<String, u64>,
    pub completed: u64,
    pub queue_wait_ms: Percentiles,
    pub ttft_ms: Percentiles,
    pub decode_line_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub completed: u64,
}

/// The demo's result, printed as a table or as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub mode: &'static str,
    pub workers: u32,
    pub requests: u32,
    pub seed: u64,
    pub kv_blocks_per_rank: u64,
    pub max_num_batched_tokens: u64,
    pub simulated_s: f64,
    pub classes: Vec<ClassReport>,
    pub totals: Totals,
    pub prefix_cache_hit_pct: f64,
    pub peak_decode_kv_pct: f64,
    pub peak_decode_rank: Option<String>,
    pub gate_stats: SchedulerStats,
    pub decode_stats: Option<SchedulerStats>,
    pub anomalies: u64,
    pub anomaly_samples: Vec<String>,
    pub every_request_accounted: bool,
    pub ledgers_idle: bool,
}
