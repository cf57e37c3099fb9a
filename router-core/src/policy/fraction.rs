//! Fractions from config as exact parts-per-million, so "0.29 of 100 blocks" is 29 and not
//! 28.999…: thresholds compare integers, never floats.

use serde::{Deserialize, Serialize};

const PPM: u128 = 1_000_000;

/// A non-negative fraction or multiplier with six decimal places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fraction {
    ppm: u64,
}

impl Fraction {
    pub const ONE: Fraction = Fraction { ppm: 1_000_000 };

    /// `None` for NaN, infinities and negative values.
    pub fn from_f64(v: f64) -> Option<Self> {
        if !v.is_finite() || v < 0.0 {
            return None;
        }
        let ppm = (v * 1e6).round();
        if ppm > u64::MAX as f64 {
            return None;
        }
        Some(Self { ppm: ppm as u64 })
    }

    pub const fn from_ppm(ppm: u64) -> Self {
        Self { ppm }
    }

    pub fn as_f64(self) -> f64 {
        self.ppm as f64 / 1e6
    }

    /// `floor(self × x)`, saturating at `u64::MAX`.
    pub fn floor_of(self, x: u64) -> u64 {
        let v = u128::from(x) * u128::from(self.ppm) / PPM;
        u64::try_from(v).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_of_integers_are_exact_where_floats_are_not() {
        // 0.29 * 100.0 == 28.999999999999996 in f64.
        assert_eq!(Fraction::from_f64(0.29).map(|f| f.floor_of(100)), Some(29));
        assert_eq!(Fraction::from_f64(0.8).map(|f| f.floor_of(1000)), Some(800));
        assert_eq!(
            Fraction::from_f64(16.0).map(|f| f.floor_of(8192)),
            Some(131_072)
        );
        assert_eq!(Fraction::from_f64(0.5).map(|f| f.floor_of(3)), Some(1));
    }

    #[test]
    fn rejects_values_that_are_not_finite_non_negative_numbers() {
        assert_eq!(Fraction::from_f64(f64::NAN), None);
        assert_eq!(Fraction::from_f64(-0.1), None);
        assert_eq!(Fraction::from_f64(f64::INFINITY), None);
        assert_eq!(Fraction::ONE.floor_of(u64::MAX), u64::MAX);
    }
}
