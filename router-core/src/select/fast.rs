//! The fast path for unfiltered requests at temperature 0.
//!
//! Only ranks that hold some of the request's prefix can have an overlap credit or fewer
//! new blocks than the request has: those named in its `overlap` list and those with its
//! first block booked (hashes are chained, so holding any block means holding the first).
//! They are scored exactly. Every other eligible rank costs its load key plus a term that
//! depends only on the request and the block size, so the best of them is the lowest key
//! of the ledger's ordered load index, drawn uniformly among equal keys. A drawn rank
//! without the class's decode room is excluded and the draw repeated; after a few such
//! misses the caller falls back to the full scan. Cost: O(candidates + log R).
//!
//! Exact ties between a candidate and the best of the rest are broken with the rest
//! weighted by how many ranks share its key (ranks among them without room, not yet
//! drawn, still count), so the spread is uniform whenever room is not the constraint.
//! When a request's first block is booked on most ranks (a fleet-wide system prompt),
//! the candidate set grows to those ranks and this path costs what a scan does.

use super::config::Overlaps;
use super::{Cheapest, SelectError, Selected, SelectionRequest, Selector, fits, nothing_chosen};
use crate::eligibility::Eligibility;
use crate::ledger::BookingLedger;
use rand::Rng;

/// Cheap ranks without room skipped before the full scan is cheaper than more draws.
const MAX_ROOMLESS: usize = 16;

impl Selector {
    /// `None`: this path cannot answer exactly (index out of step, too many cheap ranks
    /// without room, or nothing found where the scan would say precisely why).
    pub(super) fn fast<R: Rng + ?Sized>(
        &self,
        ledger: &BookingLedger,
        request: &SelectionRequest<'_>,
        rng: &mut R,
    ) -> Option<Result<Selected, SelectError>> {
        if ledger.eligible_rank_count() == 0 {
            return Some(Err(nothing_chosen(ledger, &Eligibility::ANY, false)));
        }
        let mut excluded: Vec<usize> = Vec::with_capacity(request.overlap.len() + 4);
        excluded.extend(
            request
                .overlap
                .iter()
                .filter_map(|(rank, _)| ledger.slot_of(*rank)),
        );
        if let Some(&first) = request.block_hashes.first() {
            excluded.extend(ledger.first_block_slots(first));
        }
        excluded.sort_unstable();
        excluded.dedup();

        let overlaps = Overlaps::new(request.overlap);
        let mut cheapest = Cheapest::default();
        for &slot in &excluded {
            let Some(load) = ledger.eligible_load(slot) else {
                continue;
            };
            if !fits(&load, request) {
                continue;
            }
            let overlap_blocks = self.prefix_of(&load, request, &overlaps);
            let choice = Selected {
                rank: load.id(),
                cost: self.cost_of(&load, request, overlap_blocks),
                overlap_blocks,
            };
            cheapest.offer(choice, 1, rng);
        }

        let (rest, ties) = self.best_of_the_rest(ledger, request, &mut excluded, rng)?;
        if let Some(choice) = rest {
            cheapest.offer(choice, ties, rng);
        }
        match cheapest.best {
            Some(choice) => Some(Ok(choice)),
            // Eligible ranks exist, so only room can have ruled them all out.
            None if request.needs_room() => Some(Err(SelectError::NoRoom)),
            None => None,
        }
    }

    /// The cheapest eligible rank with room outside `excluded` (sorted), with how many
    /// ranks tie with it. `None`: give up (too many misses, or the index disagrees).
    fn best_of_the_rest<R: Rng + ?Sized>(
        &self,
        ledger: &BookingLedger,
        request: &SelectionRequest<'_>,
        excluded: &mut Vec<usize>,
        rng: &mut R,
    ) -> Option<(Option<Selected>, u64)> {
        'draw: for _ in 0..=MAX_ROOMLESS {
            // One lowest key per block size; the costs of their groups are compared exactly.
            let mut best = Cheapest::default();
            let lowest: Vec<_> = ledger.lowest_loads(excluded).collect();
            for low in lowest {
                let nth = rng.random_range(0..low.ties);
                let slot = ledger.nth_lowest(low, excluded, nth)?;
                let load = ledger.eligible_load(slot)?;
                if !fits(&load, request) {
                    let at = excluded.partition_point(|&e| e < slot);
                    excluded.insert(at, slot);
                    continue 'draw;
                }
                let choice = Selected {
                    rank: load.id(),
                    cost: self.cost_of(&load, request, 0),
                    overlap_blocks: 0,
                };
                best.offer(choice, u64::from(low.ties), rng);
            }
            return Some((best.best, best.weight));
        }
        None
    }
}
