//! Conditional disaggregation at the frontend (`router_core::local_prefill`): a
//! disaggregated request whose prompt is mostly cached on a decode worker (or short), or
//! one the prefill gate would make wait, goes straight to a decode worker, which prefills it
//! itself. That leg has the decode phase with nothing staged: the decode router's full class
//! gate admits it (queueing, deadline, fractions), then it is proxied as an aggregated
//! request is. Where the prefill ran is in the `router.admission` span's pool, the
//! `switchyard_disagg_prefills_total` metric and the `x-switchyard-prefill` response header.

use super::Legs;
use crate::frontend::AppState;
use crate::frontend::error::ApiError;
use crate::frontend::placement;
use crate::metrics::RequestObserver;
use axum::http::HeaderValue;
use axum::response::Response;
use router_actors::RouterHandle;
use router_core::{Phase, PrefillPlace};
use tokio::sync::OwnedSemaphorePermit;

/// The response header saying where a request's prefill ran: `remote` or `local`.
pub const PREFILL_HEADER: &str = "x-switchyard-prefill";

/// Where the rule places `legs` before the prefill gate (remote when it is off).
pub(super) fn before_gate(
    state: &AppState,
    decode: &RouterHandle,
    legs: &Legs<'_>,
) -> PrefillPlace {
    let rule = state.local_prefill;
    if rule.below_uncached_tokens == 0 {
        return PrefillPlace::Remote;
    }
    rule.before_gate(legs.prompt.tokens(), decode.cached_tokens(&legs.prompt))
}

/// The request as one leg on the decode router, prefilled by its decode worker.
pub(super) async fn serve(
    state: &AppState,
    decode: &RouterHandle,
    legs: &Legs<'_>,
    place: PrefillPlace,
    permit: OwnedSemaphorePermit,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    tracing::debug!(place = ?place, "prefilled by the decode worker");
    let answer = placement::single_leg(
        state,
        decode,
        (Phase::Decode { staged: false }, "decode"),
        &legs.request,
        &legs.prompt,
        legs.class,
        legs.headers,
        permit,
        observer,
    )
    .await;
    said(state, place, answer)
}

/// Counts where the prefill ran and says so on the response, when the rule is on.
pub(super) fn said(
    state: &AppState,
    place: PrefillPlace,
    answer: Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    if state.local_prefill.is_off() {
        return answer;
    }
    state.metrics.prefill_place(place);
    answer.map(|mut response| {
        response
            .headers_mut()
            .insert(PREFILL_HEADER, HeaderValue::from_static(place.label()));
        response
    })
}
