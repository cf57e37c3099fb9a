//! Placing a leg once more when it never reached its worker, the one retry mechanism of every
//! path (an aggregated request, a disaggregated request's prefill and decode legs): the failed
//! placement's booking is released by its guard or hold, a refused connection counts against
//! the worker in the breaker (`frontend/breaker.rs`: a worker that keeps refusing is ejected
//! for a while; one that left the fleet is not its failure), and the leg is routed again on
//! its pool with the refusing and the ejected workers left out. The decision reads the
//! error's typed [`Unreached`], never its reason string.
//!
//! [`Placements`] keeps one leg's tries: the workers to leave out and how many placements
//! were made. A leg gets [`MAX_PLACEMENTS`]: the first and one more. Every placement's booking
//! is owned by its guard from the moment its admission returns; the permit a placement once
//! more needs is taken after ([`permitted`]), so no early answer leaves a booking behind.

use super::AppState;
use super::admit::{Class, admit, route_request};
use super::error::{ApiError, Unreached, UnreachedCause};
use super::openai::ParsedRequest;
use super::proxy::{BookingGuard, Target, forward, never_reached};
use crate::metrics::RequestObserver;
use axum::http::HeaderMap;
use axum::response::Response;
use router_actors::RouterHandle;
use router_core::{Phase, Prompt, RequestId, RouteRequest, WorkerId};
use tokio::sync::OwnedSemaphorePermit;

/// Placements of one leg: the first, and one more when it never reached its worker.
pub(super) const MAX_PLACEMENTS: u32 = 2;

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

    /// This leg never reached its worker (`error`, whose [`Unreached`] says which worker and
    /// why: it refused the connection, which the breaker counts, or it left the fleet since
    /// the leg's admission): `Ok` when the leg may be placed once more (counted in
    /// `switchyard_http_retries_total`), else the error to answer.
    pub(super) fn refused(
        &mut self,
        state: &AppState,
        class: &Class,
        pool: &'static str,
        error: ApiError,
    ) -> Result<(), ApiError> {
        let Some(Unreached { worker, cause }) = error.unreached else {
            return Err(error);
        };
        if cause == UnreachedCause::Refused {
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

/// `guard`, which owns a leg's booking from its admission on, with the concurrency permit the
/// leg is sent under ([`permit`]); a node saturated meanwhile is `frontend_saturated`, and the
/// guard, dropped, releases the booking.
pub(super) fn permitted(
    state: &AppState,
    guard: BookingGuard,
    slot: &mut Option<OwnedSemaphorePermit>,
) -> Result<BookingGuard, ApiError> {
    match permit(state, slot) {
        Some(held) => Ok(guard.with_permit(held)),
        None => Err(ApiError::saturated(state.limits.max_concurrent_requests)),
    }
}

/// The concurrency permit for a leg about to be sent: the request's own, or, once a refused
/// attempt gave it back, a new one (`None` when the node is saturated meanwhile). Taken once
/// the leg's booking has its guard ([`permitted`]), so the saturated answer releases it.
fn permit(
    state: &AppState,
    slot: &mut Option<OwnedSemaphorePermit>,
) -> Option<OwnedSemaphorePermit> {
    slot.take()
        .or_else(|| state.permits.clone().try_acquire_owned().ok())
}

/// A one-leg request on `router` (`phase`, the `pool` label): admitted, forwarded, and placed
/// once more elsewhere when its worker was never reached (nothing reached the client yet;
/// ejected workers are avoided from the start). The aggregated path, and a disaggregated
/// request its decode worker prefills (`disagg/local.rs`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn single_leg(
    state: &AppState,
    router: &RouterHandle,
    (phase, pool): (Phase, &'static str),
    request: &ParsedRequest,
    prompt: &Prompt,
    class: &Class,
    headers: &HeaderMap,
    permit: OwnedSemaphorePermit,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    let mut placements = Placements::new(state);
    let mut permit = Some(permit);
    loop {
        let id = RequestId(uuid::Uuid::now_v7());
        let mut route = route_request(state, id, class, phase, prompt.clone(), request);
        placements.narrow(state, &mut route);
        let admission = admit(state, router, class, route).await?;
        observer.admitted(prompt.tokens(), admission.prefix);
        let worker = admission.rank.worker;
        // No await between the admission and the guard: a dropped handler never leaks a
        // booking, nor does a node saturated before a second placement (the guard releases it).
        let booking = BookingGuard::new(router.clone(), id, state.metrics.clone());
        let guard = permitted(state, booking, &mut permit)?;
        let target = Target { worker, pool };
        match forward(state, request, target, headers, guard, observer).await {
            // The failed attempt's guard gave the permit back: the next one takes it again.
            Err(e) if never_reached(&e) => placements.refused(state, class, pool, e)?,
            answer => {
                if answer.is_ok() {
                    state.breaker.reached(worker);
                }
                return answer;
            }
        }
    }
}
