//! Worker selection: which rank an admitted request is booked on.
//!
//! A pinned rank is validated and taken; a preferred rank (soft affinity, e.g. the rank a
//! decode reservation holds) is taken when it is eligible and has the room the class
//! needs. Otherwise every eligible rank has a cost (see [`SelectionConfig::cost`]) and:
//!
//! - temperature 0: the cheapest rank wins, exact ties broken uniformly at random;
//! - temperature T > 0: a rank is drawn with probability ∝ exp(−(c − cmin) / ((cmax − cmin)·T)).
//!
//! A LoRA request's cost also counts what its adapter finds on the worker: running there,
//! a free slot (a load), or a wait for a slot (`crate::adapters`).
//!
//! Eligible means: allowed by the request's [`Eligibility`] (allow-list, LoRA adapter),
//! worker not overloaded, and, when the class has a decode fraction on this pool, room for
//! the request's decode blocks.
//!
//! Two paths give the same answer at temperature 0 (up to ties, property-tested): the full
//! scan (the reference) scores every eligible rank; the fast path, for unfiltered requests,
//! scores only the ranks that hold the request's prefix (its `overlap` list and the ranks
//! with its first block booked) and takes the best of the rest from the ledger's ordered
//! load index, in O(candidates + log R). Randomness comes in as an argument.

mod config;
mod fast;
mod scan;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

pub use config::{SelectionConfig, SelectionConfigError};

use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RankId};
use crate::ledger::{BookingLedger, RankLoad};
use rand::Rng;
use serde::Serialize;

/// What selection needs to know about one request.
#[derive(Debug, Clone, Copy)]
pub struct SelectionRequest<'a> {
    pub class: ClassId,
    /// Chained sequence hashes of the prompt's full blocks (a rank holding any of them
    /// holds the first).
    pub block_hashes: &'a [u64],
    pub prompt_tokens: u64,
    /// Matched prefix blocks per rank, from the KV prefix index.
    pub overlap: &'a [(RankId, u32)],
    pub eligibility: &'a Eligibility,
    /// Soft affinity: taken when eligible.
    pub preferred: Option<RankId>,
    /// Only ranks where the class may commit this many more decode blocks.
    pub need_room: Option<u64>,
    /// Only ranks where this router's prefill credits cover this many prompt tokens for the
    /// class (see `crate::credits`; always true with prefill credits off).
    pub need_prefill: Option<u64>,
}

impl SelectionRequest<'_> {
    /// Whether a rank may be ruled out by room (decode room or prefill credits).
    fn needs_room(&self) -> bool {
        self.need_room.is_some() || self.need_prefill.is_some()
    }
}

/// The chosen rank, its cost and the prefix blocks it already holds (cached, or booked by
/// requests in flight when `count_booked_prefix` is on).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Selected {
    pub rank: RankId,
    pub cost: f64,
    pub overlap_blocks: u32,
}

/// Why no rank was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SelectError {
    #[error("no worker can serve the request")]
    NoWorkers,
    #[error("every eligible worker is overloaded")]
    AllWorkersOverloaded,
    #[error("eligible ranks exist but none has decode room for the class")]
    NoRoom,
    #[error("pinned rank {rank} is not allowed or not in the pool")]
    PinnedUnavailable { rank: RankId },
    #[error("pinned rank {rank} is overloaded")]
    PinnedOverloaded { rank: RankId },
}

/// Validated selection settings; pure apart from the RNG handed to each call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selector {
    config: SelectionConfig,
}

impl Selector {
    pub fn new(config: SelectionConfig) -> Result<Self, SelectionConfigError> {
        config.validate()?;
        Ok(Self { config })
    }

    pub fn config(&self) -> &SelectionConfig {
        &self.config
    }

    /// Chooses a rank: the fast path when the request is unfiltered, the temperature is 0
    /// and the ledger's load index is ordered by this selector's prefill scale; the full
    /// scan otherwise (or when the fast path gives up, e.g. many cheap ranks without room).
    pub fn select<R: Rng + ?Sized>(
        &self,
        ledger: &BookingLedger,
        request: &SelectionRequest<'_>,
        rng: &mut R,
    ) -> Result<Selected, SelectError> {
        if let Some(decided) = self.pinned_or_preferred(ledger, request) {
            return decided;
        }
        let fast_ok = request.eligibility.is_unfiltered()
            && self.config.temperature == 0.0
            && ledger.prefill_load_scale() == self.config.prefill_load_scale;
        if fast_ok && let Some(answer) = self.fast(ledger, request, rng) {
            return answer;
        }
        self.scan(ledger, request, rng)
    }

    /// The reference: the same decision, scoring every eligible rank.
    pub fn select_full_scan<R: Rng + ?Sized>(
        &self,
        ledger: &BookingLedger,
        request: &SelectionRequest<'_>,
        rng: &mut R,
    ) -> Result<Selected, SelectError> {
        if let Some(decided) = self.pinned_or_preferred(ledger, request) {
            return decided;
        }
        self.scan(ledger, request, rng)
    }

    /// A pin is validated and taken (its cost is informative only); an eligible preferred
    /// rank with room is taken. `None`: score the pool.
    fn pinned_or_preferred(
        &self,
        ledger: &BookingLedger,
        request: &SelectionRequest<'_>,
    ) -> Option<Result<Selected, SelectError>> {
        let filter = request.eligibility;
        if let Some(pin) = filter.pinned {
            let load = match ledger.rank_load(pin) {
                Some(load) if filter.allows_worker(pin.worker) => load,
                _ => return Some(Err(SelectError::PinnedUnavailable { rank: pin })),
            };
            if ledger.worker_is_overloaded(pin.worker) {
                return Some(Err(SelectError::PinnedOverloaded { rank: pin }));
            }
            return Some(Ok(self.selected(&load, request)));
        }
        let preferred = request.preferred?;
        let load = ledger.rank_load(preferred)?;
        let eligible = filter.allows_worker(preferred.worker)
            && !ledger.worker_is_overloaded(preferred.worker)
            && lora_allows(ledger, filter, preferred)
            && fits(&load, request);
        eligible.then(|| Ok(self.selected(&load, request)))
    }

    fn selected(&self, load: &RankLoad<'_>, request: &SelectionRequest<'_>) -> Selected {
        let overlap_blocks = self.prefix_of(load, request, &config::Overlaps::new(request.overlap));
        Selected {
            rank: load.id(),
            cost: self.cost_of(load, request, overlap_blocks),
            overlap_blocks,
        }
    }

    /// Prefix blocks the request finds on the rank: cached, or booked by requests in flight.
    fn prefix_of(
        &self,
        load: &RankLoad<'_>,
        request: &SelectionRequest<'_>,
        overlaps: &config::Overlaps<'_>,
    ) -> u32 {
        self.config
            .prefix_blocks(load, request.block_hashes, overlaps.of(load.id()))
    }

    fn cost_of(
        &self,
        load: &RankLoad<'_>,
        request: &SelectionRequest<'_>,
        overlap_blocks: u32,
    ) -> f64 {
        self.config.cost(
            load,
            request.block_hashes,
            request.prompt_tokens,
            overlap_blocks,
        )
    }
}

/// Whether the class may commit the request's decode blocks on this rank, and this
/// router's prefill credits there cover its prompt.
fn fits(load: &RankLoad<'_>, request: &SelectionRequest<'_>) -> bool {
    let class = request.class.index();
    request
        .need_room
        .is_none_or(|need| load.has_room(class, need))
        && request
            .need_prefill
            .is_none_or(|tokens| load.prefill_covers(class, tokens))
}

/// What a LoRA request's adapter costs on `rank`'s worker: 0 where it runs (or the engine
/// says nothing), a load where a slot is free, more where it must wait for one
/// (`crate::adapters`). 0 for a request without an adapter.
fn adapter_cost(ledger: &BookingLedger, request: &SelectionRequest<'_>, rank: RankId) -> f64 {
    request
        .eligibility
        .lora
        .as_deref()
        .map_or(0.0, |lora| ledger.adapter_fit(rank.worker, lora).cost())
}

/// The LoRA narrowing as `eligible_slots` applies it: a worker serving the adapter, unless
/// no allowed worker serves it (then every allowed worker).
fn lora_allows(ledger: &BookingLedger, filter: &Eligibility, rank: RankId) -> bool {
    let Some(lora) = filter.lora.as_deref() else {
        return true;
    };
    if ledger
        .worker(rank.worker)
        .is_some_and(|w| w.serves_lora(lora))
    {
        return true;
    }
    !ledger
        .workers()
        .any(|w| filter.allows_worker(w.id) && w.serves_lora(lora))
}

/// The error when nothing was chosen: ranks without room, only overloaded workers, or no
/// worker at all.
fn nothing_chosen(ledger: &BookingLedger, filter: &Eligibility, any_eligible: bool) -> SelectError {
    if any_eligible {
        SelectError::NoRoom
    } else if ledger.any_rank_ignoring_overload(filter) {
        SelectError::AllWorkersOverloaded
    } else {
        SelectError::NoWorkers
    }
}

/// The cheapest choice so far, with how many equally cheap ranks it stands for, so exact
/// ties end up uniformly spread (weighted reservoir sampling).
#[derive(Debug, Default)]
struct Cheapest {
    best: Option<Selected>,
    weight: u64,
}

impl Cheapest {
    /// Offers `choice`, standing for `weight` ranks of the same cost.
    fn offer<R: Rng + ?Sized>(&mut self, choice: Selected, weight: u64, rng: &mut R) {
        match self.best {
            Some(best) if choice.cost > best.cost => {}
            Some(best) if choice.cost == best.cost => {
                self.weight += weight;
                if rng.random_range(0..self.weight) < weight {
                    self.best = Some(choice);
                }
            }
            _ => {
                self.best = Some(choice);
                self.weight = weight;
            }
        }
    }
}
