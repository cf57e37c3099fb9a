//! The route handlers: the two OpenAI routes (read, parse, tokenize, admit, proxy) and the
//! operational ones (`/v1/models`, `/health`, `/ready`, `/metrics`, `/debug/state`).
//!
//! An OpenAI request goes: class header → body under the size limit → parse → tokenize →
//! `route` → on admission a [`BookingGuard`] at once (no await in between, so a dropped
//! handler can never leak a booking) → `proxy::forward`. Every failure is an [`ApiError`]
//! counted under its class and reason.

use super::AppState;
use super::admit::{Class, admit, route_request};
use super::error::ApiError;
use super::openai::Endpoint;
use super::proxy::{BookingGuard, forward};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use router_core::{Phase, RequestId};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

/// The header naming a request's policy class (absent or empty: the default class).
pub const CLASS_HEADER: &str = "x-policy-class";

pub(super) async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    openai(state, Endpoint::Completions, headers, body).await
}

pub(super) async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    openai(state, Endpoint::Chat, headers, body).await
}

async fn openai(
    state: Arc<AppState>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let span = tracing::info_span!(
        "http.request",
        otel.kind = "server",
        http.route = endpoint.path(),
        class = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::propagation::set_remote_parent(&span, &headers);
    let response = handle_openai(state, endpoint, headers, body)
        .instrument(span.clone())
        .await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

async fn handle_openai(
    state: Arc<AppState>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let class = match resolve_class(&state, &headers) {
        Ok(class) => class,
        Err(err) => {
            state.metrics.request(endpoint.label(), "unknown");
            state.metrics.rejection("unknown", err.reason);
            return err.into_response();
        }
    };
    tracing::Span::current().record("class", class.name.as_str());
    state.metrics.request(endpoint.label(), &class.name);
    let outcome = match state.permits.clone().try_acquire_owned() {
        Ok(permit) => admit_and_forward(&state, endpoint, &headers, body, &class, permit).await,
        Err(_) => Err(ApiError::saturated(state.limits.max_concurrent_requests)),
    };
    outcome.unwrap_or_else(|err| {
        let err = if err.class.is_none() {
            err.class(Some(class.name.clone()))
        } else {
            err
        };
        state.metrics.rejection(&class.name, err.reason);
        err.into_response()
    })
}

/// The request's class, once for every hop: the `x-policy-class` header, else the profile's
/// default; an unknown name or an unreadable header is a 400.
fn resolve_class(state: &AppState, headers: &HeaderMap) -> Result<Class, ApiError> {
    let requested = match headers.get(CLASS_HEADER).map(|v| v.to_str()) {
        None | Some(Ok("")) => None,
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => {
            return Err(ApiError::bad_header(CLASS_HEADER, "must be visible ASCII"));
        }
    };
    let id = state
        .profile
        .resolve(requested)
        .map_err(|e| ApiError::unknown_class(&e))?;
    Ok(Class {
        id,
        name: state.class_name(id),
    })
}

async fn admit_and_forward(
    state: &AppState,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
    class: &Class,
    permit: OwnedSemaphorePermit,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, headers, state.limits.max_body_bytes).await?;
    let request = state.prompter.parse(endpoint, &bytes)?;
    drop(bytes);
    let tokens = state.prompter.tokenize(request.prompt.clone()).await;
    if let Some(decode) = &state.decode {
        let d = super::disagg::Disagg {
            request,
            tokens,
            class,
            headers,
            permit,
        };
        return super::disagg::admit_and_forward(state, decode, d).await;
    }
    let id = RequestId(uuid::Uuid::now_v7());
    let route = route_request(
        state,
        id,
        class,
        Phase::Aggregated,
        tokens,
        request.max_tokens,
    );
    let admission = admit(state, &state.router, class, route).await?;
    // No await between the admission and the guard: a dropped handler never leaks a booking.
    let guard =
        BookingGuard::new(state.router.clone(), id, state.metrics.clone()).with_permit(permit);
    forward(
        state,
        &request,
        admission.rank.worker,
        headers,
        &class.name,
        guard,
    )
    .await
}

/// The request body, at most `limit` bytes (checked against `Content-Length` first, then
/// while reading).
async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let mut stream = body.into_data_stream();
    let mut buf = Vec::with_capacity(declared.map_or(0, |l| l as usize).min(limit));
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::bad_field("body", format!("could not be read: {e}")))?;
        if buf.len().saturating_add(chunk.len()) > limit {
            return Err(ApiError::too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

pub(super) async fn models(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let data: Vec<_> = state
        .models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub(super) async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

pub(super) async fn ready(State(state): State<Arc<AppState>>) -> Response {
    if *state.ready.borrow() {
        Json(json!({"status": "ready"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready"})),
        )
            .into_response()
    }
}

/// The frontend's metrics and, with a node attached, its actors' state observed now (each
/// actor within the scrape timeout; a silent one is counted, never an error answer).
pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.scrape().await,
    )
        .into_response()
}

/// The admitting router's `Observe` snapshot at the top level and, when the node is attached,
/// every actor's snapshot under `node` (routers of all pools, peer sync, KV events, registry).
pub(super) async fn debug_state(State(state): State<Arc<AppState>>) -> Response {
    let Ok(snapshot) = state.router.observe().await else {
        return ApiError::router_gone().into_response();
    };
    let mut body = match serde_json::to_value(&snapshot) {
        Ok(body) => body,
        Err(_) => return ApiError::router_gone().into_response(),
    };
    if let (Some(node), Some(map)) = (state.metrics.node(), body.as_object_mut()) {
        map.insert("node".to_owned(), node.gather().await.to_json());
    }
    Json(body).into_response()
}
