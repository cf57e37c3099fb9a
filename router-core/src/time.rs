//! Time as plain data. router-core never reads a clock: callers pass `Timestamp`s
//! (microseconds since an epoch the caller chooses, usually its own start) and get
//! deadlines and durations back.

use serde::{Deserialize, Serialize};
use std::ops::Add;
use std::time::Duration;

/// Microseconds since the caller's epoch.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp(0);

    pub const fn from_micros(us: u64) -> Self {
        Self(us)
    }

    pub const fn from_millis(ms: u64) -> Self {
        Self(ms.saturating_mul(1_000))
    }

    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    fn add(self, rhs: Duration) -> Timestamp {
        let us = u64::try_from(rhs.as_micros()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_durations_saturates_instead_of_overflowing() {
        let t = Timestamp(u64::MAX - 1) + Duration::from_secs(10);
        assert_eq!(t, Timestamp(u64::MAX));
        assert_eq!(
            Timestamp::from_millis(5) + Duration::from_millis(2),
            Timestamp(7_000)
        );
        assert_eq!(Timestamp(3).saturating_since(Timestamp(10)), Duration::ZERO);
    }
}
