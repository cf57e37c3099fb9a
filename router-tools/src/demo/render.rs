//! The demo's summary as a human-readable table: per class requests, admissions (direct or
//! after queueing), rejections and percentiles, then rejection reasons, prefix-cache reuse,
//! the decode KV peak against the class lines, the schedulers' counters, the accounting
//! verdict and, last, the `ledgers idle` line.

use std::fmt::Write as _;

use crate::report::{ClassTable, Column, cell, col, reason_counts, reasons_line};

use super::report::Report;

/// The class table's columns.
const COLUMNS: &[Column] = &[
    col("class", 12),
    col("requests", 8),
    col("admitted", 8),
    col("direct", 7),
    col("queued", 8),
    col("rejected", 8),
    col("wait p50", 10),
    col("wait p99", 10),
    col("ttft p50", 10),
    col("ttft p99", 10),
];

impl Report {
    pub fn ok(&self) -> bool {
        self.ledgers_idle && self.every_request_accounted
    }

    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let pools = if self.mode == "disaggregated" {
            format!(
                "a prefill pool and a decode pool of {} workers each",
                self.workers
            )
        } else {
            format!("one aggregated pool of {} workers", self.workers)
        };
        let _ = writeln!(
            s,
            "Switchyard demo (router-core scheduler, simulated engines and time): {pools}, \
             1 rank each ({} KV blocks, {} batched tokens)",
            self.kv_blocks_per_rank, self.max_num_batched_tokens
        );
        let _ = writeln!(
            s,
            "{} requests, seed {}, {} s simulated\n",
            self.requests, self.seed, self.simulated_s
        );
        let mut table = ClassTable::new(COLUMNS);
        for c in &self.classes {
            table.row(&[
                c.class.clone(),
                c.requests.to_string(),
                c.admitted.to_string(),
                c.admitted_direct.to_string(),
                c.admitted_after_queue.to_string(),
                c.rejected.to_string(),
                cell(c.queue_wait_ms.p50),
                cell(c.queue_wait_ms.p99),
                cell(c.ttft_ms.p50),
                cell(c.ttft_ms.p99),
            ]);
        }
        let t = &self.totals;
        let direct: u64 = self.classes.iter().map(|c| c.admitted_direct).sum();
        let queued: u64 = self.classes.iter().map(|c| c.admitted_after_queue).sum();
        table.row(&[
            "total".to_owned(),
            t.requests.to_string(),
            t.admitted.to_string(),
            direct.to_string(),
            queued.to_string(),
            t.rejected.to_string(),
        ]);
        s.push_str(&table.finish());
        let _ = writeln!(
            s,
            "(queued = admitted after waiting in the class queue; times in simulated ms)\n"
        );
        for c in &self.classes {
            let reasons = reason_counts("", &c.rejected_by_reason);
            s.extend(reasons_line("rejected ", &c.class, &reasons, Some("none")));
        }
        let lines: Vec<String> = self
            .classes
            .iter()
            .filter_map(|c| c.decode_line_pct.map(|p| format!("{} {p} %", c.class)))
            .collect();
        let _ = writeln!(
            s,
            "prefix cache: {} % of prompt tokens were already cached on their rank",
            self.prefix_cache_hit_pct
        );
        let _ = writeln!(
            s,
            "peak decode KV booked + reserved on the busiest rank: {} % of its blocks ({}; class lines: {})",
            self.peak_decode_kv_pct,
            self.peak_decode_rank.as_deref().unwrap_or("none"),
            lines.join(", ")
        );
        let g = &self.gate_stats;
        let _ = writeln!(
            s,
            "gate: {} admitted, {} queued, {} rejected, {} gate passes, {} decode-room queries",
            g.admitted, g.queued, g.rejected, g.gate_passes, g.room_queries
        );
        if let Some(d) = &self.decode_stats {
            let _ = writeln!(
                s,
                "decode pool: {} legs booked admitted-upstream, {} rejected",
                d.admitted_upstream, d.rejected
            );
        }
        let _ = writeln!(
            s,
            "accounting: {} completed; every request admitted or rejected exactly once: {}",
            t.completed,
            if self.every_request_accounted {
                "yes"
            } else {
                "NO"
            }
        );
        for a in &self.anomaly_samples {
            let _ = writeln!(s, "  anomaly: {a}");
        }
        let _ = writeln!(
            s,
            "ledgers idle: {}",
            if self.ledgers_idle { "yes" } else { "NO" }
        );
        s
    }
}
