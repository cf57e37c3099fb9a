//! The disaggregated request path: a prefill leg and a decode leg under one request id
//! (used when [`AppState::decode`] names a decode pool).
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
//! Not done here: KV staged on a prefill worker whose decode leg never starts is left to
//! the worker's staging timeout (vLLM has no call to drop it).

use super::AppState;
use super::error::{ApiError, Stage};
use super::openai::ParsedRequest;
use super::proxy::{BookingGuard, forward, upstream_status};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use futures::StreamExt;
use router_actors::RouterHandle;
use router_actors::router::ActorGone;
use router_core::{
    Admission, Outcome, Phase, Prompt, RequestId, RouteError, RouteRequest, Timestamp, WorkerId,
};
use serde_json::{Map, Value, json};
use tokio::sync::OwnedSemaphorePermit;

/// The body field carrying the P/D transfer parameters.
const KV_TRANSFER: &str = "kv_transfer_params";

/// What one disaggregated request brings from the handler.
pub(super) struct Disagg<'a> {
    pub request: ParsedRequest,
    pub tokens: Vec<u32>,
    /// The class name from the header (`None`: the default class).
    pub requested: Option<String>,
    /// The resolved class name (metric label).
    pub class: &'a str,
    pub headers: &'a HeaderMap,
    pub permit: OwnedSemaphorePermit,
}

/// The prefill leg's holdings until the decode leg is booked: the prefill booking and the
/// decode reservation taken at prefill admission. Dropping it releases both.
struct PrefillHold {
    booking: Option<BookingGuard>,
    decode: RouterHandle,
    id: RequestId,
    reserved: bool,
}

impl PrefillHold {
    /// The KV is staged: the prefill booking ends (`prefill_done`, then `release`).
    fn staged(&mut self) {
        if let Some(mut booking) = self.booking.take() {
            booking.prefill_done();
        }
    }

    /// The decode booking took the reservation over.
    fn converted(&mut self) {
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

/// Runs both legs of one request and answers the client.
pub(super) async fn admit_and_forward(
    state: &AppState,
    decode: &RouterHandle,
    d: Disagg<'_>,
) -> Result<Response, ApiError> {
    let id = RequestId(uuid::Uuid::now_v7());
    let started = tokio::time::Instant::now();
    let outcome = state
        .router
        .route(route_request(state, &d, id, Phase::Prefill))
        .await;
    let admission = admitted(state, &state.router, id, outcome)?;
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
    state
        .metrics
        .admitted(d.class, started.elapsed(), admission.waited);
    let params = prefill_leg(state, &d.request, admission.rank.worker, d.headers).await?;
    hold.staged();

    let outcome = decode
        .route(route_request(state, &d, id, Phase::Decode { staged: true }))
        .await;
    let admission = admitted(state, decode, id, outcome)?;
    hold.converted();
    let guard = BookingGuard::new(decode.clone(), id, state.metrics.clone()).with_permit(d.permit);
    drop(hold);
    let mut request = d.request;
    request.body.insert(KV_TRANSFER.to_owned(), params);
    forward(
        state,
        &request,
        admission.rank.worker,
        d.headers,
        d.class,
        guard,
    )
    .await
}

/// The route call of one leg.
fn route_request(state: &AppState, d: &Disagg<'_>, id: RequestId, phase: Phase) -> RouteRequest {
    let mut route = RouteRequest::new(id, phase, Prompt::Tokens(d.tokens.clone()), Timestamp(0));
    route.class = d.requested.clone();
    route.expected_output_tokens = d
        .request
        .max_tokens
        .unwrap_or(state.limits.default_max_tokens)
        .min(state.limits.max_expected_output_tokens);
    route
}

/// The admission of a route call, or its error answer (the same mapping as the aggregated
/// path).
fn admitted(
    state: &AppState,
    router: &RouterHandle,
    id: RequestId,
    outcome: Result<Result<Outcome, RouteError>, ActorGone>,
) -> Result<Admission, ApiError> {
    match outcome {
        Err(_gone) => Err(ApiError::router_gone()),
        Ok(Err(RouteError::UnknownClass(e))) => Err(ApiError::unknown_class(&e)),
        Ok(Ok(Outcome::Admitted(admission))) => Ok(admission),
        Ok(Ok(Outcome::Rejected {
            class: cid, reason, ..
        })) => Err(ApiError::rejected(&reason, state.class_name(cid))),
        Ok(Ok(Outcome::Queued { .. })) => {
            // `route` answers only admitted or rejected; never leave a queued one behind.
            let _ = router.cancel(id);
            Err(ApiError::internal(
                "unexpected_queued",
                "the router answered `queued` to a route call",
            ))
        }
    }
}

/// The prefill worker's body: the client's, non-streaming, one output token, asking the
/// worker to keep the KV for a remote decode.
fn prefill_body(request: &ParsedRequest) -> Vec<u8> {
    let mut body = request.body.clone();
    body.insert("stream".to_owned(), Value::Bool(false));
    body.remove("stream_options");
    body.insert("max_tokens".to_owned(), json!(1));
    if body.contains_key("max_completion_tokens") {
        body.insert("max_completion_tokens".to_owned(), json!(1));
    }
    body.insert(KV_TRANSFER.to_owned(), json!({"do_remote_decode": true}));
    serde_json::to_vec(&Value::Object(body)).unwrap_or_default()
}

/// Sends the prefill leg to `worker` and returns its `kv_transfer_params`.
async fn prefill_leg(
    state: &AppState,
    request: &ParsedRequest,
    worker: WorkerId,
    client_headers: &HeaderMap,
) -> Result<Value, ApiError> {
    let base = state
        .directory
        .endpoint(worker)
        .ok_or_else(|| ApiError::no_endpoint(worker))?;
    let url = format!("{}{}", base.trim_end_matches('/'), request.endpoint.path());
    let mut call = state
        .http
        .post(url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(prefill_body(request));
    for name in ["traceparent", "tracestate"] {
        if let Some(value) = client_headers.get(name) {
            call = call.header(name, value.clone());
        }
    }
    let response = call.send().await.map_err(|e| {
        ApiError::upstream(
            Stage::Dispatch,
            "prefill_connect",
            format!("prefill {worker}: {e}"),
        )
    })?;
    let status = response.status();
    if !status.is_success() {
        // As on the aggregated path: a 4xx is the engine refusing the client's request
        // (passed on), anything else a failed leg (502).
        let mut err = upstream_status(worker, status, response).await;
        err.reason = "prefill_status";
        return Err(err);
    }
    let limit = state.limits.max_response_bytes;
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::upstream(
                Stage::Upstream,
                "prefill_stream",
                format!("prefill {worker}: {e}"),
            )
        })?;
        if body.len().saturating_add(chunk.len()) > limit {
            return Err(ApiError::upstream(
                Stage::Upstream,
                "prefill_too_large",
                format!("prefill {worker}: the answer is larger than {limit} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    transfer_params(&body).map_err(|why| {
        ApiError::upstream(
            Stage::Upstream,
            "prefill_bad_params",
            format!("prefill {worker}: {why}"),
        )
    })
}

/// The `kv_transfer_params` of a prefill worker's JSON answer: an object with
/// `do_remote_prefill: true`.
fn transfer_params(body: &[u8]) -> Result<Value, String> {
    let value: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| format!("the answer is not a JSON object: {e}"))?;
    match value.get(KV_TRANSFER) {
        Some(Value::Object(params)) => match params.get("do_remote_prefill") {
            Some(Value::Bool(true)) => Ok(Value::Object(params.clone())),
            _ => Err(format!("`{KV_TRANSFER}.do_remote_prefill` is not true")),
        },
        Some(_) => Err(format!("`{KV_TRANSFER}` is not an object")),
        None => Err(format!("the answer has no `{KV_TRANSFER}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::openai::Endpoint;

    #[test]
    fn the_prefill_body_asks_for_one_token_and_a_remote_decode() {
        let request = ParsedRequest::parse(
            Endpoint::Chat,
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
                "stream_options":{"include_usage":true},"max_completion_tokens":50,"x":1}"#,
        )
        .expect("valid");
        let body: Value = serde_json::from_slice(&prefill_body(&request)).expect("json");
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_tokens"], 1);
        assert_eq!(body["max_completion_tokens"], 1);
        assert_eq!(body["x"], 1);
        assert!(body.get("stream_options").is_none());
        assert_eq!(body[KV_TRANSFER], json!({"do_remote_decode": true}));
    }

    #[test]
    fn transfer_params_must_be_an_object_asking_for_a_remote_prefill() {
        let ok = br#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_port":1}}"#;
        assert_eq!(
            transfer_params(ok).expect("ok")["remote_port"],
            1,
            "params kept"
        );
        for bad in [
            &b"data: {}"[..],
            br#"[1]"#,
            br#"{"choices":[]}"#,
            br#"{"kv_transfer_params":"x"}"#,
            br#"{"kv_transfer_params":{"do_remote_prefill":false}}"#,
        ] {
            assert!(
                transfer_params(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
