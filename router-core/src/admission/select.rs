//! Choosing the rank for an admitted request: a pin is validated and taken, a preferred
//! rank (soft affinity, or the rank a decode reservation holds) is taken when eligible,
//! otherwise the eligible rank of least load wins. Classes with a decode fraction only
//! place on ranks with room for them, so booked decode blocks never pass the class line.

use super::Scheduler;
use super::request::{AdmissionRequest, RejectReason};
use crate::ids::RankId;
use crate::ledger::BookingLedger;

impl Scheduler {
    pub(super) fn select(
        &self,
        request: &AdmissionRequest,
        need_room: Option<u64>,
    ) -> Result<RankId, RejectReason> {
        select_rank(&self.ledger, request, need_room)
    }
}

/// Load-only placement (prefill blocks + committed decode blocks + this request's new
/// blocks), lowest `RankId` on ties.
pub(crate) fn select_rank(
    ledger: &BookingLedger,
    request: &AdmissionRequest,
    need_room: Option<u64>,
) -> Result<RankId, RejectReason> {
    let filter = &request.eligibility;
    let class = request.class.index();
    if let Some(pin) = filter.pinned {
        if !filter.allows_worker(pin.worker) || ledger.rank_load(pin).is_none() {
            return Err(RejectReason::PinnedUnavailable { rank: pin });
        }
        if ledger.worker_is_overloaded(pin.worker) {
            return Err(RejectReason::PinnedOverloaded { rank: pin });
        }
        return Ok(pin);
    }
    let fits =
        |rank: &crate::ledger::RankLoad<'_>| need_room.is_none_or(|n| rank.has_room(class, n));
    if let Some(preferred) = request.preferred
        && filter.allows_worker(preferred.worker)
        && !ledger.worker_is_overloaded(preferred.worker)
        && filter.lora.as_deref().is_none_or(|l| {
            ledger
                .worker(preferred.worker)
                .is_some_and(|w| w.serves_lora(l))
        })
        && let Some(rank) = ledger.rank_load(preferred)
        && fits(&rank)
    {
        return Ok(preferred);
    }
    let mut best: Option<(f64, RankId)> = None;
    let mut any = false;
    for rank in ledger.eligible_ranks(filter) {
        any = true;
        let load = rank;
        if !fits(&load) {
            continue;
        }
        let cost = load.cost(&request.block_hashes, request.uncached_tokens());
        if best.is_none_or(|(c, id)| cost < c || (cost == c && load.id() < id)) {
            best = Some((cost, load.id()));
        }
    }
    match best {
        Some((_, rank)) => Ok(rank),
        None if any => Err(RejectReason::NoWorkers),
        None if ledger.any_rank_ignoring_overload(filter) => {
            Err(RejectReason::AllWorkersOverloaded)
        }
        None => Err(RejectReason::NoWorkers),
    }
}
