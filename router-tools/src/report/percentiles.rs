//! Latencies recorded in an HDR histogram (microseconds, 1 µs to 1 h, 3 significant
//! digits) and read as p50 / p90 / p99 in milliseconds with one decimal. Wall-clock
//! latencies are recorded as [`Duration`]s, the offline demo's simulated ones as
//! microseconds.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// How many samples, and p50 / p90 / p99 in milliseconds (one decimal); `None` without
/// samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

/// A latency histogram in microseconds, 1 µs to 1 h, 3 significant digits. Samples below
/// 1 µs count as 1 µs; samples above an hour as an hour.
#[derive(Debug, Clone)]
pub struct Latency(Histogram<u64>);

impl Latency {
    pub fn new() -> Result<Self, hdrhistogram::CreationError> {
        Histogram::new_with_bounds(1, 3_600_000_000, 3).map(Self)
    }

    pub fn record(&mut self, d: Duration) {
        self.record_us(micros(d));
    }

    /// Records `us` microseconds (simulated time).
    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    pub fn percentiles(&self) -> Percentiles {
        let h = &self.0;
        let at = |q: f64| {
            (!h.is_empty()).then(|| (h.value_at_quantile(q) as f64 / 100.0).round() / 10.0)
        };
        Percentiles {
            count: h.len(),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
        }
    }
}

/// Whole microseconds, saturating.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `v` rounded to `digits` decimals.
pub fn round(v: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (v * p).round() / p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_ordered_milliseconds() {
        let mut l = Latency::new().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.percentiles().p50, None);
        for ms in 1..=100 {
            l.record(Duration::from_millis(ms));
        }
        let p = l.percentiles();
        assert_eq!(p.count, 100);
        let (p50, p90, p99) = (
            p.p50.unwrap_or(0.0),
            p.p90.unwrap_or(0.0),
            p.p99.unwrap_or(0.0),
        );
        assert!(
            (49.0..=51.0).contains(&p50) && p50 <= p90 && p90 <= p99,
            "{p:?}"
        );
    }

    #[test]
    fn simulated_microseconds_and_durations_land_alike() {
        let mut a = Latency::new().unwrap_or_else(|e| panic!("{e}"));
        let mut b = Latency::new().unwrap_or_else(|e| panic!("{e}"));
        a.record_us(12_000);
        b.record(Duration::from_micros(12_000));
        assert_eq!(a.percentiles(), b.percentiles());
        assert_eq!(a.percentiles().p50, Some(12.0));
        // A zero wait is a sample too (of 1 µs), not a missing one.
        a.record_us(0);
        assert_eq!(a.percentiles().count, 2);
    }

    #[test]
    fn rounding_keeps_the_asked_decimals() {
        assert_eq!(round(12.345_6, 1), 12.3);
        assert_eq!(round(12.345_6, 2), 12.35);
    }
}
