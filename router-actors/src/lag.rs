//! Peer-sync lag: the time from a peer's delta being published (the sender's wall clock,
//! `Envelope::sent_at_us`) to its application in this router's ledger, in an HDR histogram.
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
}

/// Records lags; a histogram that could not be created leaves only the counters.
pub(crate) struct LagRecorder {
    histogram: Option<Histogram<u64>>,
    clock_ahead: u64,
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
        }
    }
}

impl LagRecorder {
    /// One delta sent at `sent_at_us` and applied at `now_us` (both µs since the epoch).
    pub(crate) fn record(&mut self, sent_at_us: u64, now_us: u64) {
        if sent_at_us > now_us {
            self.clock_ahead += 1;
        }
        if let Some(histogram) = &mut self.histogram {
            histogram.saturating_record(now_us.saturating_sub(sent_at_us));
        }
    }

    pub(crate) fn summary(&self) -> LagSummary {
        let Some(h) = &self.histogram else {
            return LagSummary {
                clock_ahead: self.clock_ahead,
                ..LagSummary::default()
            };
        };
        if h.is_empty() {
            return LagSummary {
                clock_ahead: self.clock_ahead,
                ..LagSummary::default()
            };
        }
        LagSummary {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            clock_ahead: self.clock_ahead,
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
        assert!((49_900..=50_100).contains(&s.p50_us), "{s:?}");
        assert!((98_900..=99_100).contains(&s.p99_us), "{s:?}");
        assert!((99_900..=100_100).contains(&s.max_us), "{s:?}");
    }
}
