//! The demo's summary as a human-readable table: per class requests, admissions (direct or
//! after queueing), rejections and percentiles, then rejection reasons, prefix-cache reuse,
//! the decode KV peak against the class lines, the schedulers' counters, the accounting
//! verdict and, last, the `ledgers idle` line.

use std::fmt::Write as _;

use super::report::Report;

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
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>8} {:>7} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10}",
            "class",
            "requests",
            "admitted",
            "direct",
            "queued",
            "rejected",
            "wait p50",
            "wait p99",
            "ttft p50",
            "ttft p99"
        );
        let ms = router_node::loadgen::cell;
        for c in &self.classes {
            let _ = writeln!(
                s,
                "{:<12} {:>8} {:>8} {:>7} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10}",
                c.class,
                c.requests,
                c.admitted,
                c.admitted_direct,
                c.admitted_after_queue,
                c.rejected,
                ms(c.queue_wait_ms.p50),
                ms(c.queue_wait_ms.p99),
                ms(c.ttft_ms.p50),
                ms(c.ttft_ms.p99),
            );
        }
        let t = &self.totals;
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>8} {:>7} {:>8} {:>8}",
            "total",
            t.requests,
            t.admitted,
            self.classes.iter().map(|c| c.admitted_direct).sum::<u64>(),
            self.classes
                .iter()
                .map(|c| c.admitted_after_queue)
                .sum::<u64>(),
            t.rejected
        );
        let _ = writeln!(
            s,
            "(queued = admitted after waiting in the class queue; times in simulated ms)\n"
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
