//! The prefill leg of the vLLM convention: the body sent to the prefill worker (the
//! client's, non-streaming, one output token, `kv_transfer_params: {"do_remote_decode":
//! true}`), the call and its span, and reading the worker's answer down to the
//! `kv_transfer_params` the decode leg carries. The SGLang convention reuses the one-token
//! body, the span and the call.

use super::KV_TRANSFER;
use crate::frontend::AppState;
use crate::frontend::error::{ApiError, Stage};
use crate::frontend::openai::{LegFields, ParsedRequest};
use crate::frontend::proxy::{
    SendReasons, Target, send_error, upstream_call, upstream_status, worker_failed,
};
use crate::frontend::upstream::UpstreamCall;
use axum::http::HeaderMap;
use futures::StreamExt;
use router_core::WorkerId;
use serde_json::{Map, Value, json};
use std::future::Future;
use tracing::Instrument as _;

/// A prefill leg's target.
fn prefill_target(worker: WorkerId) -> Target {
    Target {
        worker,
        pool: "prefill",
    }
}

/// The prefill worker's body: the client's, non-streaming, one output token, asking the
/// worker to keep the KV for a remote decode.
pub(in crate::frontend) fn prefill_body(request: &ParsedRequest) -> Vec<u8> {
    let mut leg = one_token_leg(request);
    leg.set
        .push((KV_TRANSFER, json!({"do_remote_decode": true})));
    request.leg_body(&leg)
}

/// What a prefill leg changes in the client's body: non-streaming, one output token.
pub(in crate::frontend) fn one_token_leg(request: &ParsedRequest) -> LegFields {
    let mut set = vec![("max_tokens", json!(1))];
    if request.body.contains_key("max_completion_tokens") {
        set.push(("max_completion_tokens", json!(1)));
    }
    LegFields {
        stream: false,
        ask_usage: false,
        set,
        leave_out: &["stream_options"],
    }
}

/// Sends the prefill leg to `worker` and returns its `kv_transfer_params`.
pub(in crate::frontend) async fn prefill_leg(
    state: &AppState,
    request: &ParsedRequest,
    worker: WorkerId,
    client_headers: &HeaderMap,
) -> Result<Value, ApiError> {
    let leg = prefill_span(worker);
    let call = prefill_call(
        state,
        request,
        worker,
        client_headers,
        prefill_body(request),
        &leg,
    )?;
    let body = prefill_answer(state, call, worker).instrument(leg).await?;
    transfer_params(&body).map_err(|why| {
        let err = ApiError::upstream(
            Stage::Upstream,
            "prefill_bad_params",
            format!("prefill {worker}: {why}"),
        );
        worker_failed(&state.metrics, prefill_target(worker), &err);
        err
    })
}

/// The prefill leg's `worker.leg` span (the decode leg's is made by `forward`).
pub(in crate::frontend) fn prefill_span(worker: WorkerId) -> tracing::Span {
    tracing::info_span!(
        "worker.leg",
        otel.kind = "client",
        worker = worker.0,
        pool = "prefill",
        url = tracing::field::Empty,
    )
}

/// The prefill leg's HTTP call to `worker` with `body`, carrying `leg`'s trace context.
pub(in crate::frontend) fn prefill_call(
    state: &AppState,
    request: &ParsedRequest,
    worker: WorkerId,
    client_headers: &HeaderMap,
    body: Vec<u8>,
    leg: &tracing::Span,
) -> Result<UpstreamCall, ApiError> {
    upstream_call(
        state,
        request,
        worker,
        client_headers,
        leg,
        "application/json",
        body,
    )
}

/// Sends the prefill leg and reads its (2xx) answer, at most `max_response_bytes`; the leg
/// is counted against its worker, and so is its failure. The future owns what it needs.
pub(in crate::frontend) fn prefill_answer(
    state: &AppState,
    call: UpstreamCall,
    worker: WorkerId,
) -> impl Future<Output = Result<Vec<u8>, ApiError>> + Send + 'static {
    let metrics = state.metrics.clone();
    let limit = state.limits.max_response_bytes;
    let target = prefill_target(worker);
    metrics.upstream_request(target.pool, worker);
    async move {
        let answer = read_prefill(call, worker, limit).await;
        if let Err(e) = &answer {
            worker_failed(&metrics, target, e);
        }
        answer
    }
}

async fn read_prefill(
    call: UpstreamCall,
    worker: WorkerId,
    limit: usize,
) -> Result<Vec<u8>, ApiError> {
    let response = call.send().await.map_err(|e| {
        send_error(
            worker,
            &e,
            format!("prefill {worker}: {e}"),
            SendReasons::PREFILL,
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
    Ok(body)
}

/// The `kv_transfer_params` of a prefill worker's JSON answer: an object with
/// `do_remote_prefill: true`.
pub(in crate::frontend) fn transfer_params(body: &[u8]) -> Result<Value, String> {
    let value: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| format!("the answer is not a JSON object: {e}"))?;
    match value.get(KV_TRANSFER) {
        Some(Value::Object(params)) => match params.get("do_remote_prefill") {
            Some(Value::Bool(true)) => Ok(Value::Object(params.clone())),
            _ => Err(format!("`{KV_TRANSFER}.do_remote_prefill` is not true")),
        },
        // vLLM without a KV connector accepts the leg, ignores the params and answers null.
        Some(Value::Null) | None => Err(format!(
            "the answer has no `{KV_TRANSFER}`: is the prefill engine started with a KV \
             connector (vLLM: --kv-transfer-config)?"
        )),
        Some(_) => Err(format!("`{KV_TRANSFER}` is not an object")),
    }
}
