//! Peer-sync lag: the time from a peer's delta being published (the sender's wall clock,
//! `Envelope::sent_at_us`) to its application in this router's ledger, in an HDR histogram.
//!
//! Besides the HDR histogram's percentiles, every lag is counted in fixed buckets
//! ([`LAG_BUCKETS_US`]) with an exact sum, which the node exports as a Prometheus histogram.
//!
//! Both ends read wall clocks, so across hosts the figure includes their clock offset (NTP
//! keeps it to about a millisecond on one network); a delta stamped after it was applied
//! (the sender's clock ahead) is recorded as 0 and counted in `clock_ahead`.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Longest lag recorded as such (1 h, in µs); longer ones saturate at it.
const MAX_LAG_US: u64 = 3_600_000_000;
/// Significant figures: values are exact to 0.1 %.
const SIGFIGS: u8 = 3;

/// Upper bounds (µs, inclusive) of the fixed lag buckets: 0.5 ms to 10 s. Lags above the
/// last bound are counted only in the total.
pub const LAG_BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// Percentiles of the peer-sync lag, in µs, since the actor started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LagSummary {
    /// Deltas measured.
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Deltas stamped later than they were applied (sender's clock ahead): recorded as 0.
    pub clock_ahead: u64,
    /// Every measured lag added up (saturating), in µs.
    pub sum_us: u64,
    /// Lags per bucket of [`LAG_BUCKETS_US`] (not cumulative: `buckets[i]` counts the lags
    /// above bound `i - 1` and at most bound `i`); `count` less their sum are above the last.
    pub buckets: [u64; LAG_BUCKETS_US.len()],
}

/// Records lags; a histogram that could not be created leaves only the counters and the
/// fixed buckets.
pub(crate) struct LagRecorder {
    histogram: Option<Histogram<u64>>,
    clock_ahead: u64,
    count: u64,
    sum_us: u64,
    buckets: [u64; LAG_BUCKETS_US.len()],
}

impl std::fmt::Debug for LagRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LagRecorder")
            .field("summary", &self.summary())
            .finish()
    }
}

impl Default for LagRecorder {
    fn default() -> Self {
        Self {
            histogram: Histogram::new_with_bounds(1, MAX_LAG_US, SIGFIGS).ok(),
            clock_ahead: 0,
            count: 0,
            sum_us: 0,
            buckets: [0; LAG_BUCKETS_US.len()],
        }
    }
}

impl LagRecorder {
    /// One delta sent at `sent_at_us` and applied at `now_us` (both µs since the epoch).
    pub(crate) fn record(&mut self, sent_at_us: u64, now_us: u64) {
        if sent_at_us > now_us {
            self.clock_ahead += 1;
        }
        let lag = now_us.saturating_sub(sent_at_us);
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(lag);
        if let Some(bucket) = LAG_BUCKETS_US.iter().position(|&bound| lag <= bound) {
            self.buckets[bucket] += 1;
        }
        if let Some(histogram) = &mut self.histogram {
            histogram.saturating_record(lag);
        }
    }

    pub(crate) fn summary(&self) -> LagSummary {
        let counted = LagSummary {
            count: self.count,
            clock_ahead: self.clock_ahead,
            sum_us: self.sum_us,
            buckets: self.buckets,
            ..LagSummary::default()
        };
        match &self.histogram {
            Some(h) if !h.is_empty() => LagSummary {
                p50_us: h.value_at_quantile(0.50),
                p99_us: h.value_at_quantile(0.99),
                max_us: h.max(),
                ..counted
            },
            _ => counted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_then_percentiles_and_clock_ahead() {
        let mut lag = LagRecorder::default();
        assert_eq!(lag.summary(), LagSummary::default());
        for us in 1..=100u64 {
            lag.record(1_000_000, 1_000_000 + us * 1000);
        }
        lag.record(2_000_000, 1_000_000); // sender ahead
        let s = lag.summary();
        assert_eq!((s.count, s.clock_ahead), (101, 1));
        // 1..=100 ms plus one 0: the sum is exact, the buckets split at their bounds.
        assert_eq!(s.sum_us, (1..=100u64).sum::<u64>() * 1000);
        let at = |bound_us: u64| {
            LAG_BUCKETS_US
                .iter()
                .position(|&b| b == bound_us)
                .expect("a bound")
        };
        assert_eq!(s.buckets[at(500)], 1, "the clock-ahead delta counts as 0");
        assert_eq!(s.buckets[at(1_000)], 1);
        assert_eq!(s.buckets[at(2_500)], 1);
        assert_eq!(s.buckets[at(5_000)], 3);
        assert_eq!(s.buckets[at(10_000)], 5);
        assert_eq!(s.buckets[at(25_000)], 15);
        assert_eq!(s.buckets[at(50_000)], 25);
        assert_eq!(s.buckets[at(100_000)], 50);
        assert_eq!(s.buckets.iter().sum::<u64>(), s.count);
        assert!((49_900..=50_100).contains(&s.p50_us), "{s:?}");
        assert!((98_900..=99_100).contains(&s.p99_us), "{s:?}");
        assert!((99_900..=100_100).contains(&s.max_us), "{s:?}");
        lag.record(1_000_000, 21_000_000); // 20 s: above the last bound
        let s = lag.summary();
        assert_eq!(s.count, 102);
        assert_eq!(
            s.buckets.iter().sum::<u64>(),
            101,
            "only the total counts it"
        );
    }
}
