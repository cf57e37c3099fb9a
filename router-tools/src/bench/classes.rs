//! Which policy class each bench request runs under (`--class`, `--classes`): none (the
//! endpoint's default class), one for every request, or a seeded weighted draw per request
//! in send order, so two runs with one seed send the same classes.

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};

use super::{BenchError, report};

/// Which policy class each request runs under.
#[derive(Debug, Clone, PartialEq)]
pub enum ClassChoice {
    /// No `x-policy-class` header: the endpoint's default class (reported as "default").
    Default,
    /// Every request in this class.
    Fixed(String),
    /// A seeded weighted draw per request.
    Weighted(Vec<(String, f64)>),
}

impl ClassChoice {
    /// Parses `name=weight,name=weight` (weights positive, names distinct).
    pub fn parse_weights(spec: &str) -> Result<Self, BenchError> {
        let usage = |m: String| BenchError::Usage(format!("--classes {spec:?}: {m}"));
        let mut out: Vec<(String, f64)> = Vec::new();
        for part in spec.split(',') {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| usage(format!("{part:?} is not name=weight")))?;
            let name = name.trim();
            let weight: f64 = weight
                .trim()
                .parse()
                .map_err(|_| usage(format!("the weight of {name:?} is not a number")))?;
            if name.is_empty() || !(weight.is_finite() && weight > 0.0) {
                return Err(usage(format!(
                    "{part:?}: a name and a positive weight are needed"
                )));
            }
            if out.iter().any(|(n, _)| n == name) {
                return Err(usage(format!("{name:?} is named twice")));
            }
            out.push((name.to_owned(), weight));
        }
        Ok(Self::Weighted(out))
    }

    /// The classes of the requests in send order, drawn as they are sent.
    pub(super) fn drawer(&self, seed: u64) -> ClassDrawer<'_> {
        ClassDrawer {
            choice: self,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The class of each of `n` requests (`None`: no header).
    #[cfg(test)]
    fn assign(&self, n: usize, seed: u64) -> Vec<Option<String>> {
        let mut drawer = self.drawer(seed);
        (0..n).map(|_| drawer.next_class()).collect()
    }

    /// The classes in report order.
    pub(super) fn names(&self) -> Vec<String> {
        match self {
            Self::Default => vec![report::DEFAULT_CLASS.to_owned()],
            Self::Fixed(name) => vec![name.clone()],
            Self::Weighted(w) => w.iter().map(|(n, _)| n.clone()).collect(),
        }
    }
}

/// Draws each request's class ([`ClassChoice`]), reproducibly from a seed.
pub(super) struct ClassDrawer<'a> {
    choice: &'a ClassChoice,
    rng: SmallRng,
}

impl ClassDrawer<'_> {
    /// The next request's class (`None`: no header).
    pub(super) fn next_class(&mut self) -> Option<String> {
        match self.choice {
            ClassChoice::Default => None,
            ClassChoice::Fixed(name) => Some(name.clone()),
            ClassChoice::Weighted(weights) => {
                let total: f64 = weights.iter().map(|(_, w)| w).sum();
                let mut x = self.rng.random::<f64>() * total;
                for (name, w) in weights {
                    if x < *w {
                        return Some(name.clone());
                    }
                    x -= w;
                }
                weights.last().map(|(name, _)| name.clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_weights_parse_and_draw_every_class_reproducibly() {
        let choice =
            ClassChoice::parse_weights("interactive=3,batch=1").unwrap_or_else(|e| panic!("{e}"));
        let a = choice.assign(400, 1);
        assert_eq!(a, choice.assign(400, 1));
        let batch = a.iter().filter(|c| c.as_deref() == Some("batch")).count();
        assert!((60..=140).contains(&batch), "{batch}");
        for bad in ["a", "a=0", "a=x", "=1", "a=1,a=2"] {
            let err = ClassChoice::parse_weights(bad).err();
            assert!(matches!(err, Some(BenchError::Usage(_))), "{bad}");
        }
    }
}
