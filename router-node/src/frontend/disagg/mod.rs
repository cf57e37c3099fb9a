//! The disaggregated request path: a prefill leg and a decode leg under one request id
//! (used when [`AppState::decode`] names a decode pool), or, when conditional
//! disaggregation says so (`local.rs`), one leg its decode worker prefills.
//!
//! 1. The prefill leg is routed on the prefill router (`Phase::Prefill`). That call is the
//!    only admission gate: class queueing and deadline, the decode-room check and the
//!    decode reservation all happen there, and its rejections map to HTTP as on the
//!    aggregated path.
//! 2. The prefill worker gets the client's body, non-streaming, with `max_tokens: 1` (and
//!    `max_completion_tokens: 1` when the client gave it), no `stream_options`, and
//!    `kv_transfer_params: {"do_remote_decode": true}`. Its JSON answer must carry a
//!    `kv_transfer_params` object with `do_remote_prefill: true` (vLLM's convention). The
//!    prefill booking then ends: `prefill_done`, then `release` on the prefill router.
//! 3. The decode leg is routed on the decode router with `Phase::Decode { staged: true }`
//!    and the same id: admitted upstream (no class wait); its booking converts the
//!    reservation. Router-wide reject thresholds may still refuse it (429 / 503).
//! 4. The decode worker gets the client's body with the prefill worker's
//!    `kv_transfer_params` and is proxied exactly like an aggregated worker
//!    ([`forward`]: streaming or assembled, `prefill_done` at the first chunk, a
//!    [`BookingGuard`] on the decode router released at stream end, error or disconnect).
//!
//! Failures release everything: until the decode leg is booked a [`PrefillHold`] owns the
//! prefill booking and the decode reservation; dropping it (a failed prefill leg, a refused
//! decode leg, a client that went away) releases the booking and `unreserve`s the request on
//! the decode router. A failing prefill worker, or an answer without usable
//! `kv_transfer_params`, is a 502 (a 4xx from the prefill worker is the engine refusing
//! the client's request and is passed on, as on the aggregated path).
//!
//! A leg whose worker refused the connection (nothing reached it) is placed once more on
//! another worker of its pool, as on the aggregated path (`frontend/placement.rs`): a refused prefill leg
//! drops its [`PrefillHold`] and goes through the gate again with that worker left out; a
//! refused decode leg is booked again under a new id on another decode worker and sent there
//! with the same `kv_transfer_params` (the first decode worker never pulled the KV). Each
//! refusal counts in the worker breaker, and ejected workers are left out of every placement.
//!
//! Not done here: KV staged on a prefill worker whose decode leg never starts is left to
//! the worker's staging timeout (vLLM has no call to drop it).
//!
//! # The SGLang convention ([`DisaggConvention::Sglang`])
//!
//! 1. As above, the prefill leg is routed on the prefill router (the gate, with its decode
//!    reservation); then at once the decode leg is routed on the decode router
//!    (`Phase::Decode { staged: true }`, admitted upstream, converting the reservation).
//!    Both bookings exist before anything is sent.
//! 2. Both legs are sent at the same time, with the same three fields added at the top
//!    level of the body:
//!    ```json
//!    "bootstrap_host": "10.0.0.7", "bootstrap_port": 8001, "bootstrap_room": 1234567890123
//!    ```
//!    `bootstrap_host` / `bootstrap_port` are the host and port of the prefill worker's
//!    endpoint (its HTTP address: the simulated worker serves its bootstrap there),
//!    `bootstrap_room` a random u64 per request. The prefill worker gets the client's body
//!    non-streaming with `max_tokens: 1` (and `max_completion_tokens: 1` when given), no
//!    `stream_options`; its answer is read (any 2xx) and discarded. The decode worker gets
//!    the client's body and is proxied exactly like an aggregated worker ([`forward`]).
//! 3. The prefill booking ends (`prefill_done`, `release`) when the prefill worker answers.
//!    A failed prefill leg (connect error, non-2xx, a broken or too large answer) drops the
//!    decode leg's request or response stream (the client's stream is cut when it had
//!    begun, else the error is answered as on the vLLM path: `prefill_status` ...); a failed
//!    decode leg drops the prefill leg's request. Either way both bookings and the
//!    reservation are released, as they are when the client goes away. A decode worker that
//!    refuses the connection gets the leg placed once more on another decode worker, in the
//!    same bootstrap room; a prefill worker that refuses it cancels the decode leg already
//!    sent, and both legs are placed again with that prefill worker left out.

mod local;
mod prefill;
mod sglang;

pub use local::PREFILL_HEADER;

use prefill::prefill_leg;
pub(super) use prefill::{one_token_leg, prefill_answer, prefill_call, prefill_span};

use super::AppState;
use super::admit::{Class, admit, route_request};
use super::error::ApiError;
use super::openai::ParsedRequest;
use super::placement::{self, Placements};
use super::proxy::{BookingGuard, Target, forward, never_reached};
use crate::metrics::RequestObserver;
use axum::http::HeaderMap;
use axum::response::Response;
use router_actors::RouterHandle;
use router_core::{Phase, PrefillPlace, Prompt, RequestId, RouteRequest, WorkerId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

/// How the prefill and decode legs of a disaggregated request meet (`[disagg] convention`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DisaggConvention {
    /// The prefill leg first; its `kv_transfer_params` go to the decode leg.
    #[default]
    Vllm,
    /// Both legs at once, meeting at the prefill worker's bootstrap room.
    Sglang,
}

/// The body field carrying the P/D transfer parameters.
const KV_TRANSFER: &str = "kv_transfer_params";

/// What one disaggregated request brings from the handler.
pub(super) struct Disagg<'a> {
    pub request: ParsedRequest,
    /// The prompt, hashed once at the frontend.
    pub prompt: Prompt,
    /// The class resolved at the frontend: both legs run under it.
    pub class: &'a Class,
    pub headers: &'a HeaderMap,
    pub permit: OwnedSemaphorePermit,
}

/// The prefill leg's holdings until the decode leg is booked: the prefill booking and the
/// decode reservation taken at prefill admission. Dropping it releases both.
pub(super) struct PrefillHold {
    booking: Option<BookingGuard>,
    decode: RouterHandle,
    id: RequestId,
    reserved: bool,
}

impl PrefillHold {
    /// The KV is staged: the prefill booking ends (`prefill_done`, then `release`).
    pub(super) fn staged(&mut self) {
        if let Some(mut booking) = self.booking.take() {
            booking.prefill_done();
        }
    }

    /// The decode booking took the reservation over.
    pub(super) fn converted(&mut self) {
        self.reserved = false;
    }
}

impl Drop for PrefillHold {
    fn drop(&mut self) {
        if self.reserved {
            // A gone decode router holds no reservation (its lease covers a restart).
            let _ = self.decode.unreserve(self.id);
        }
        // `booking` releases the prefill booking as it drops.
    }
}

/// Runs one request and answers the client: both legs, or, when conditional
/// disaggregation says so, one leg its decode worker prefills (`local.rs`).
pub(super) async fn admit_and_forward(
    state: &AppState,
    decode: &RouterHandle,
    d: Disagg<'_>,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    let Disagg {
        request,
        prompt,
        class,
        headers,
        permit,
    } = d;
    let legs = Legs {
        request,
        prompt,
        class,
        headers,
    };
    let place = local::before_gate(state, decode, &legs);
    if place != PrefillPlace::Remote {
        return local::serve(state, decode, &legs, place, permit, observer).await;
    }
    match remote(state, decode, &legs, permit, observer).await {
        Remote::Answered(answer) => local::said(state, PrefillPlace::Remote, answer),
        Remote::WouldWait(permit) => {
            let place = state.local_prefill.prefill_would_wait();
            local::serve(state, decode, &legs, place, permit, observer).await
        }
    }
}

/// How a remote prefill ended.
enum Remote {
    Answered(Result<Response, ApiError>),
    /// The prefill gate would have made it wait, and the rule sends such requests to the
    /// decode pool's gate: nothing was booked; the permit comes back.
    WouldWait(OwnedSemaphorePermit),
}

/// Both legs. A prefill leg whose worker refused the connection is placed once more on
/// another prefill worker (`frontend/placement.rs`); so is a decode leg on another decode
/// worker ([`send_decode`]).
async fn remote(
    state: &AppState,
    decode: &RouterHandle,
    legs: &Legs<'_>,
    permit: OwnedSemaphorePermit,
    observer: &mut RequestObserver,
) -> Remote {
    let (class, headers) = (legs.class, legs.headers);
    let bypass_waits = state.local_prefill.when_prefill_waits;
    let mut permit = Some(permit);
    let mut placements = Placements::new(state);
    let mut refusal: Option<ApiError> = None;
    loop {
        let id = RequestId(uuid::Uuid::now_v7());
        let mut route = legs.route(state, id, Phase::Prefill);
        placements.narrow(state, &mut route);
        // The first placement only: a second one follows a refused worker.
        let first = refusal.is_none();
        route.do_not_queue |= bypass_waits && first;
        let admission = match admit(state, &state.router, class, route).await {
            Ok(admission) => admission,
            Err(e) if e.would_wait && bypass_waits && first => {
                if let Some(permit) = permit.take() {
                    return Remote::WouldWait(permit);
                }
                return Remote::Answered(Err(e));
            }
            // A second placement that finds no room answers with what failed first.
            Err(e) => return Remote::Answered(Err(refusal.take().unwrap_or(e))),
        };
        observer.admitted(legs.prompt.tokens(), admission.prefix);
        let worker = admission.rank.worker;
        // No await between the admission and the hold: a dropped handler cannot leak either.
        let mut hold = PrefillHold {
            booking: Some(BookingGuard::new(
                state.router.clone(),
                id,
                state.metrics.clone(),
            )),
            decode: decode.clone(),
            id,
            reserved: true,
        };
        let answer = if state.convention == DisaggConvention::Sglang {
            sglang::legs(state, decode, legs, id, worker, hold, &mut permit, observer).await
        } else {
            match prefill_leg(state, &legs.request, worker, headers).await {
                Ok(params) => {
                    state.breaker.reached(worker);
                    hold.staged();
                    return Remote::Answered(
                        vllm_decode(state, decode, legs, id, hold, params, permit, observer).await,
                    );
                }
                Err(e) => Err(e),
            }
        };
        match answer {
            // Refused, or gone from the directory since its admission (the prefill worker
            // itself: a decode leg's missing endpoint is the decode side's to handle).
            Err(e) if e.unreached.is_some_and(|u| u.worker == worker) => {
                // The hold (or the SGLang legs) went with the attempt: both bookings and the
                // reservation are released.
                if let Err(e) = placements.refused(state, class, "prefill", e.clone()) {
                    return Remote::Answered(Err(e));
                }
                refusal = Some(e);
            }
            answer => return Remote::Answered(answer),
        }
    }
}

/// The decode leg of the vLLM convention, once the prefill worker staged the KV: booked on
/// the decode router under the request's id (converting its reservation), then sent with
/// the prefill worker's `params`.
#[allow(clippy::too_many_arguments)]
async fn vllm_decode(
    state: &AppState,
    decode: &RouterHandle,
    legs: &Legs<'_>,
    id: RequestId,
    mut hold: PrefillHold,
    params: Value,
    mut permit: Option<OwnedSemaphorePermit>,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    let mut placements = Placements::new(state);
    let mut staged = legs.route(state, id, Phase::Decode { staged: true });
    placements.narrow(state, &mut staged);
    let admission = admit(state, decode, legs.class, staged).await?;
    // No await between the admission and its guard.
    let booking = BookingGuard::new(decode.clone(), id, state.metrics.clone());
    hold.converted();
    drop(hold);
    let mut request = legs.request.clone();
    request.body.insert(KV_TRANSFER.to_owned(), params);
    let first = (booking, admission.rank.worker);
    send_decode(
        state,
        decode,
        legs,
        &request,
        (first, placements),
        &mut permit,
        observer,
    )
    .await
}

/// Sends the decode leg, booked as `first` (the guard of its booking and its worker, placed
/// by `placements`), to its worker. When that worker refuses the connection (the guard
/// released the booking), the leg is booked once more under a new id on another decode
/// worker, its guard made at once, a concurrency permit taken again, and sent there.
async fn send_decode(
    state: &AppState,
    decode: &RouterHandle,
    legs: &Legs<'_>,
    request: &ParsedRequest,
    (first, mut placements): ((BookingGuard, WorkerId), Placements),
    permit: &mut Option<OwnedSemaphorePermit>,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    let (mut booking, mut worker) = first;
    loop {
        // Saturated meanwhile: the guard, dropped, releases the booking.
        let guard = placement::permitted(state, booking, permit)?;
        let target = decode_target(worker);
        match forward(state, request, target, legs.headers, guard, observer).await {
            Err(e) if never_reached(&e) => {
                placements.refused(state, legs.class, "decode", e.clone())?;
                let id = RequestId(uuid::Uuid::now_v7());
                let mut route = legs.route(state, id, Phase::Decode { staged: true });
                placements.narrow(state, &mut route);
                // No room elsewhere: the refusal is the answer.
                let admission = admit(state, decode, legs.class, route)
                    .await
                    .map_err(|_| e)?;
                booking = BookingGuard::new(decode.clone(), id, state.metrics.clone());
                worker = admission.rank.worker;
            }
            answer => {
                if answer.is_ok() {
                    state.breaker.reached(worker);
                }
                return answer;
            }
        }
    }
}

/// A decode leg's target.
pub(super) fn decode_target(worker: WorkerId) -> Target {
    Target {
        worker,
        pool: "decode",
    }
}

/// What both legs of one request share: the client's request, its prompt (hashed once: the
/// node's pools share one block size), its class and headers.
pub(super) struct Legs<'a> {
    pub request: ParsedRequest,
    pub prompt: Prompt,
    pub class: &'a Class,
    pub headers: &'a HeaderMap,
}

impl Legs<'_> {
    /// The route call of one leg: the same class and prompt on both.
    pub(super) fn route(&self, state: &AppState, id: RequestId, phase: Phase) -> RouteRequest {
        route_request(
            state,
            id,
            self.class,
            phase,
            self.prompt.clone(),
            &self.request,
        )
    }
}

#[cfg(test)]
mod tests;
