//! The full scan: score every eligible rank with room, then take the cheapest (uniform
//! among exact ties) at temperature 0, or sample by softmax over min-max normalised costs
//! at temperature T > 0. The reference the fast path is held to, and the path for
//! filtered requests (whose eligible set is already narrowed) and for T > 0. A LoRA
//! request's cost adds what its adapter finds on the worker (`crate::adapters`).

use super::config::Overlaps;
use super::{
    Cheapest, SelectError, Selected, SelectionRequest, Selector, adapter_cost, fits, nothing_chosen,
};
use crate::ledger::BookingLedger;
use rand::Rng;

impl Selector {
    pub(super) fn scan<R: Rng + ?Sized>(
        &self,
        ledger: &BookingLedger,
        request: &SelectionRequest<'_>,
        rng: &mut R,
    ) -> Result<Selected, SelectError> {
        let overlaps = Overlaps::new(request.overlap);
        let mut any_eligible = false;
        let scored = ledger
            .eligible_ranks(request.eligibility)
            .inspect(|_| any_eligible = true)
            .filter(|load| fits(load, request))
            .map(|load| {
                let overlap_blocks = self.prefix_of(&load, request, &overlaps);
                Selected {
                    rank: load.id(),
                    cost: self.cost_of(&load, request, overlap_blocks)
                        + adapter_cost(ledger, request, load.id()),
                    overlap_blocks,
                }
            });
        let chosen = if self.config.temperature > 0.0 {
            let all: Vec<Selected> = scored.collect();
            softmax_pick(&all, self.config.temperature, rng)
        } else {
            let mut cheapest = Cheapest::default();
            for choice in scored {
                cheapest.offer(choice, 1, rng);
            }
            cheapest.best
        };
        chosen.ok_or_else(|| nothing_chosen(ledger, request.eligibility, any_eligible))
    }
}

/// Samples one choice with probability ∝ exp(−z / T), z = (c − cmin) / (cmax − cmin);
/// uniform when every cost is equal.
pub(crate) fn softmax_pick<R: Rng + ?Sized>(
    choices: &[Selected],
    temperature: f64,
    rng: &mut R,
) -> Option<Selected> {
    let (first, rest) = choices.split_first()?;
    if rest.is_empty() {
        return Some(*first);
    }
    let (min, max) = choices
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), c| {
            (lo.min(c.cost), hi.max(c.cost))
        });
    // A range too wide for f64 is shrunk first, as the reference does; one that still
    // cannot be normalised (or is empty) gives a uniform draw.
    let norm = if (max - min).is_finite() {
        1.0
    } else {
        min.abs().max(max.abs())
    };
    let (min, range) = (min / norm, max / norm - min / norm);
    if !(range > 0.0 && range.is_finite()) {
        return choices.get(rng.random_range(0..choices.len())).copied();
    }
    let weight = |c: &Selected| {
        let z = (c.cost / norm - min) / range;
        (-z / temperature).exp()
    };
    let total: f64 = choices.iter().map(weight).sum();
    let mut u = rng.random::<f64>() * total;
    for choice in choices {
        u -= weight(choice);
        if u < 0.0 {
            return Some(*choice);
        }
    }
    choices.last().copied()
}
