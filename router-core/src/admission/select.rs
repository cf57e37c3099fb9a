//! Choosing the rank for an admitted request through the scheduler's [`Selector`]: a pin
//! is validated and taken, a preferred rank (soft affinity, or the rank a decode
//! reservation holds) is taken when eligible, otherwise the cheapest eligible rank by
//! prefix reuse against load (see `crate::select`). Classes with a decode fraction on this
//! pool only place on ranks with room for them, so booked decode blocks never pass the
//! class line; with prefill credits on, prompt tokens go only where this router's prefill
//! credits cover them.
//!
//! [`Selector`]: crate::select::Selector

use super::Scheduler;
use super::request::{AdmissionRequest, RejectReason};
use crate::select::{SelectError, Selected, SelectionRequest};

impl Scheduler {
    pub(super) fn select(
        &mut self,
        request: &AdmissionRequest,
        need_room: Option<u64>,
    ) -> Result<Selected, RejectReason> {
        let wanted = SelectionRequest {
            class: request.class,
            block_hashes: &request.block_hashes,
            prompt_tokens: request.prompt_tokens,
            overlap: &request.overlap,
            eligibility: &request.eligibility,
            preferred: request.preferred,
            need_room,
            need_prefill: self
                .ledger
                .prefill_credits_enabled()
                .then(|| request.uncached_tokens()),
        };
        self.selector
            .select(&self.ledger, &wanted, &mut self.rng)
            .map_err(reject_reason)
    }
}

/// Selection errors as admission rejections. "No rank has room" only happens when the
/// gate let a request through that selection then could not place (a rank filter the
/// gate does not apply); it is reported as `NoWorkers`.
fn reject_reason(error: SelectError) -> RejectReason {
    match error {
        SelectError::NoWorkers | SelectError::NoRoom => RejectReason::NoWorkers,
        SelectError::AllWorkersOverloaded => RejectReason::AllWorkersOverloaded,
        SelectError::PinnedUnavailable { rank } => RejectReason::PinnedUnavailable { rank },
        SelectError::PinnedOverloaded { rank } => RejectReason::PinnedOverloaded { rank },
    }
}
