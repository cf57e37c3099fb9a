//! Placing a leg of a disaggregated request once more when its worker refused the
//! connection, as the aggregated path does: the failed placement's booking is released by
//! its guard or hold, the refusal counts against the worker in the breaker
//! (`frontend/breaker.rs`: a worker that keeps refusing is ejected for a while), and the leg
//! is routed again on its pool with the refusing and the ejected workers left out.
//!
//! [`Placements`] keeps one leg's tries: the workers to leave out and how many placements
//! were made. A leg gets [`MAX_PLACEMENTS`]: the first and one more.

use crate::frontend::AppState;
use crate::frontend::admit::Class;
use crate::frontend::error::ApiError;
use router_core::{RouteRequest, WorkerId};
use tokio::sync::OwnedSemaphorePermit;

/// Placements of one leg: the first, and one more when its worker refused the connection.
pub(super) const MAX_PLACEMENTS: u32 = 2;

/// The error reason of a prefill leg whose connection to its worker failed (nothing reached
/// the worker).
pub(super) const PREFILL_CONNECT: &str = "prefill_connect";

/// One leg's placements so far.
#[derive(Debug)]
pub(super) struct Placements {
    /// Workers refused or ejected: left out of the next placement.
    avoid: Vec<WorkerId>,
    placed: u32,
}

impl Placements {
    /// A leg about to be placed for the first time: ejected workers are left out from the
    /// start.
    pub(super) fn new(state: &AppState) -> Self {
        Self {
            avoid: state.breaker.ejected(),
            placed: 0,
        }
    }

    /// Counts a placement and narrows `route` to the workers not left out (with every known
    /// worker left out, anywhere rather than nowhere).
    pub(super) fn narrow(&mut self, state: &AppState, route: &mut RouteRequest) {
        self.placed += 1;
        if self.avoid.is_empty() {
            return;
        }
        if let Some(known) = state.directory.workers() {
            let allowed: Vec<WorkerId> = known
                .into_iter()
                .filter(|w| !self.avoid.contains(w))
                .collect();
            if !allowed.is_empty() {
                route.eligibility.allowed_workers = Some(allowed);
            }
        }
    }

    /// This leg never reached `worker` (`error`: it refused the connection, which the
    /// breaker counts, or it left the fleet since the leg's admission): `Ok` when the leg may
    /// be placed once more (counted in `switchyard_http_retries_total`), else the error to
    /// answer.
    pub(super) fn refused(
        &mut self,
        state: &AppState,
        class: &Class,
        worker: WorkerId,
        pool: &'static str,
        error: ApiError,
    ) -> Result<(), ApiError> {
        if error.reason != ApiError::NO_ENDPOINT {
            state.breaker.failed(worker);
        }
        if self.placed >= MAX_PLACEMENTS {
            return Err(error);
        }
        tracing::info!(%worker, pool, reason = error.reason, "the leg did not reach its worker: placing it elsewhere");
        state.metrics.retried(&class.name);
        self.avoid.push(worker);
        Ok(())
    }
}

/// The concurrency permit for a leg about to be sent: the request's own, or, once a refused
/// attempt gave it back, a new one (`None` when the node is saturated meanwhile).
pub(super) fn permit(
    state: &AppState,
    slot: &mut Option<OwnedSemaphorePermit>,
) -> Option<OwnedSemaphorePermit> {
    slot.take()
        .or_else(|| state.permits.clone().try_acquire_owned().ok())
}
