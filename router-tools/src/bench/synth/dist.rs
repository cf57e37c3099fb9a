//! The length distributions of `trace synth` (`--turns`, `--user-tokens`,
//! `--output-tokens`), written as:
//!
//! - `N`: always N;
//! - `uniform:MIN:MAX`: every whole number from MIN to MAX equally likely;
//! - `exp:MEAN`: exponential with that mean;
//! - `lognormal:MEAN:SIGMA`: log-normal with that mean, SIGMA the standard deviation of its
//!   logarithm (0.5: a moderate right tail, 1: a long one).
//!
//! Every draw is rounded and kept between 1 and [`MAX_DRAW`].

use rand::Rng;
use rand_distr::{Distribution as _, Exp, LogNormal};

/// The largest draw (the trace's own limit on a prompt's length).
pub const MAX_DRAW: u64 = super::super::trace::MAX_INPUT_LENGTH;

/// One length distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    Fixed(u64),
    Uniform(u64, u64),
    Exp { mean: f64 },
    LogNormal { mean: f64, sigma: f64 },
}

impl Dist {
    /// Parses the forms above; the error says which form was meant and what is wrong.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let parts: Vec<&str> = spec.trim().split(':').map(str::trim).collect();
        let int = |s: &str| {
            s.parse::<u64>()
                .ok()
                .filter(|&n| (1..=MAX_DRAW).contains(&n))
                .ok_or_else(|| format!("{s:?} is not a whole number from 1 to {MAX_DRAW}"))
        };
        let positive = |s: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("{s:?} is not a positive number"))
        };
        match parts.as_slice() {
            [n] => Ok(Self::Fixed(int(n)?)),
            ["uniform", lo, hi] => {
                let (lo, hi) = (int(lo)?, int(hi)?);
                if lo > hi {
                    return Err(format!("uniform:{lo}:{hi}: MIN is above MAX"));
                }
                Ok(Self::Uniform(lo, hi))
            }
            ["exp", mean] => Ok(Self::Exp {
                mean: positive(mean)?,
            }),
            ["lognormal", mean, sigma] => Ok(Self::LogNormal {
                mean: positive(mean)?,
                sigma: positive(sigma)?,
            }),
            _ => Err(format!(
                "{spec:?} is none of N, uniform:MIN:MAX, exp:MEAN, lognormal:MEAN:SIGMA"
            )),
        }
    }

    /// One draw, between 1 and [`MAX_DRAW`].
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let x = match *self {
            Self::Fixed(n) => return n.clamp(1, MAX_DRAW),
            Self::Uniform(lo, hi) => return rng.random_range(lo..=hi).clamp(1, MAX_DRAW),
            Self::Exp { mean } => Exp::new(1.0 / mean).map_or(mean, |d| d.sample(rng)),
            // A log-normal's mean is exp(mu + sigma^2 / 2).
            Self::LogNormal { mean, sigma } => {
                LogNormal::new(mean.ln() - sigma * sigma / 2.0, sigma)
                    .map_or(mean, |d| d.sample(rng))
            }
        };
        if x.is_finite() {
            (x.round() as u64).clamp(1, MAX_DRAW)
        } else {
            MAX_DRAW
        }
    }

    /// The mean of the distribution before the clamp to [1, MAX_DRAW].
    pub fn mean(&self) -> f64 {
        match *self {
            Self::Fixed(n) => n as f64,
            Self::Uniform(lo, hi) => (lo + hi) as f64 / 2.0,
            Self::Exp { mean } | Self::LogNormal { mean, .. } => mean,
        }
    }
}

impl std::fmt::Display for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Uniform(lo, hi) => write!(f, "uniform:{lo}:{hi}"),
            Self::Exp { mean } => write!(f, "exp:{mean}"),
            Self::LogNormal { mean, sigma } => write!(f, "lognormal:{mean}:{sigma}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng as _;
    use rand::rngs::SmallRng;

    #[test]
    fn every_form_parses_and_prints_back() {
        for spec in ["7", "uniform:2:9", "exp:300", "lognormal:1000:0.8"] {
            let d = Dist::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(d.to_string(), spec);
        }
        for bad in [
            "",
            "0",
            "-3",
            "x",
            "uniform:9:2",
            "uniform:1",
            "exp:0",
            "exp:nan",
            "lognormal:5",
            "normal:3:1",
        ] {
            assert!(Dist::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn draws_stay_in_range_and_follow_the_mean() {
        let mut rng = SmallRng::seed_from_u64(1);
        let n = 20_000;
        for (spec, lo, hi) in [
            ("uniform:10:20", 10, 20),
            ("exp:200", 1, MAX_DRAW),
            ("lognormal:500:0.7", 1, MAX_DRAW),
        ] {
            let d = Dist::parse(spec).unwrap_or_else(|e| panic!("{e}"));
            let draws: Vec<u64> = (0..n).map(|_| d.sample(&mut rng)).collect();
            assert!(draws.iter().all(|x| (lo..=hi).contains(x)), "{spec}");
            let mean = draws.iter().sum::<u64>() as f64 / n as f64;
            let want = d.mean();
            assert!(
                (mean - want).abs() < want * 0.05,
                "{spec}: mean {mean}, want {want}"
            );
        }
        assert_eq!(Dist::Fixed(5).sample(&mut rng), 5);
    }
}
