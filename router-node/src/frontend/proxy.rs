//! Proxying an admitted request to its worker, and the booking guard that makes sure the
//! booking is released however the request ends.
//!
//! The worker always streams (`stream: true` is forced upstream), so the router learns of
//! the first token: `prefill_done` is sent at the first non-empty upstream chunk. The
//! response headers wait for that first chunk, so a worker that fails before answering
//! is a clean 502. A streaming client then gets the worker's SSE bytes as they arrive; a
//! break mid-stream ends the stream with one `data: {"error": ..}` event. A non-streaming
//! client gets one JSON body assembled from the chunks (`assemble.rs`).

use super::AppState;
use super::assemble::assemble;
use super::error::{ApiError, Stage};
use super::openai::ParsedRequest;
use crate::metrics::Metrics;
use crate::telemetry::propagation;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream, StreamExt};
use router_actors::RouterHandle;
use router_core::{RequestId, WorkerId};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

/// Holds one admitted request's booking. Dropping it releases the booking, whether the
/// request finished, failed upstream or its client went away (the response body owns it).
#[derive(Debug)]
pub struct BookingGuard {
    router: RouterHandle,
    id: RequestId,
    metrics: Arc<Metrics>,
    prefill_reported: bool,
    /// The request's concurrency permit, returned with the booking.
    permit: Option<OwnedSemaphorePermit>,
}

impl BookingGuard {
    pub fn new(router: RouterHandle, id: RequestId, metrics: Arc<Metrics>) -> Self {
        metrics.inflight_inc();
        Self {
            router,
            id,
            metrics,
            prefill_reported: false,
            permit: None,
        }
    }

    /// Holds `permit` until the booking is released.
    pub fn with_permit(mut self, permit: OwnedSemaphorePermit) -> Self {
        self.permit = Some(permit);
        self
    }

    pub fn id(&self) -> RequestId {
        self.id
    }

    /// Tells the router the prefill is over (once; later calls do nothing).
    pub fn prefill_done(&mut self) {
        if !self.prefill_reported {
            self.prefill_reported = true;
            // A gone router has nothing left to update.
            let _ = self.router.prefill_done(self.id);
        }
    }
}

impl Drop for BookingGuard {
    fn drop(&mut self) {
        // A gone router holds no booking; a restarted one restores from its registry.
        let _ = self.router.release(self.id);
        self.metrics.inflight_dec();
    }
}

pub(super) type Upstream = BoxStream<'static, reqwest::Result<Bytes>>;

/// The error reason of a connection to a worker that failed: the request never reached it,
/// so it may be placed again elsewhere.
pub(super) const UPSTREAM_CONNECT: &str = "upstream_connect";

/// Forwards `request` to `worker` and answers the client. `guard` moves into the response
/// body for a streaming client, so the booking lives exactly as long as the stream.
pub(crate) async fn forward(
    state: &AppState,
    request: &ParsedRequest,
    worker: WorkerId,
    client_headers: &HeaderMap,
    class: &str,
    guard: BookingGuard,
) -> Result<Response, ApiError> {
    // The upstream call, until the worker's stream ends (a streaming response owns it).
    let leg = tracing::info_span!(
        "worker.leg",
        otel.kind = "client",
        worker = worker.0,
        url = tracing::field::Empty,
    );
    forward_leg(
        state,
        request,
        worker,
        client_headers,
        class,
        guard,
        leg.clone(),
    )
    .instrument(leg)
    .await
}

async fn forward_leg(
    state: &AppState,
    request: &ParsedRequest,
    worker: WorkerId,
    client_headers: &HeaderMap,
    class: &str,
    mut guard: BookingGuard,
    leg: tracing::Span,
) -> Result<Response, ApiError> {
    let base = state
        .directory
        .endpoint(worker)
        .ok_or_else(|| ApiError::no_endpoint(worker))?;
    let url = format!("{}{}", base.trim_end_matches('/'), request.endpoint.path());
    leg.record("url", url.as_str());
    let mut call = state
        .http
        .post(url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "text/event-stream")
        .body(request.upstream_body());
    // The worker's parent is this leg when it is traced; otherwise the client's context
    // goes on unchanged.
    let propagated = propagation::context_headers(&leg);
    if propagated.is_empty() {
        for name in propagation::HEADERS {
            if let Some(value) = client_headers.get(name) {
                call = call.header(name, value.clone());
            }
        }
    } else {
        call = call.headers(propagated);
    }
    let response = call.send().await.map_err(|e| {
        // Only a refused or failed connection is known not to have reached the worker.
        let reason = if e.is_connect() {
            UPSTREAM_CONNECT
        } else {
            "upstream_send"
        };
        ApiError::upstream(Stage::Dispatch, reason, format!("{worker}: {e}"))
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(upstream_status(worker, status, response).await);
    }
    let mut upstream: Upstream = response.bytes_stream().boxed();
    let first = loop {
        match upstream.next().await {
            Some(Ok(chunk)) if chunk.is_empty() => continue,
            Some(Ok(chunk)) => break Some(chunk),
            Some(Err(e)) => return Err(broken(worker, &e)),
            None => break None,
        }
    };
    if first.is_some() {
        guard.prefill_done();
    }
    if request.stream {
        Ok(relay(upstream, first, guard, worker, class.to_owned(), leg))
    } else {
        let body = assemble(
            request.endpoint,
            upstream,
            first,
            state.limits.max_response_bytes,
            worker,
        )
        .await;
        drop(guard);
        body.map(|b| axum::Json(b).into_response())
    }
}

pub(super) async fn upstream_status(
    worker: WorkerId,
    status: reqwest::StatusCode,
    response: reqwest::Response,
) -> ApiError {
    let mut snippet = Vec::new();
    let mut body = response.bytes_stream();
    while let Some(Ok(chunk)) = body.next().await {
        snippet.extend_from_slice(&chunk[..chunk.len().min(1024 - snippet.len())]);
        if snippet.len() >= 1024 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&snippet);
    let mut err = ApiError::upstream(
        Stage::Dispatch,
        "upstream_status",
        format!("{worker} answered {status}: {text}"),
    );
    if status.is_client_error() {
        // The worker refused the request itself (an engine-side validation): the client's.
        err.status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_REQUEST);
        err.kind = "invalid_request_error";
    }
    err
}

pub(super) fn broken(worker: WorkerId, e: &reqwest::Error) -> ApiError {
    ApiError::upstream(Stage::Upstream, "upstream_stream", format!("{worker}: {e}"))
}

/// The streaming response: the first chunk, then the rest of the worker's bytes as they
/// come. The stream owns the guard; it is dropped when the stream ends or breaks, or when
/// the client goes away and the server drops the body.
fn relay(
    upstream: Upstream,
    first: Option<Bytes>,
    guard: BookingGuard,
    worker: WorkerId,
    class: String,
    leg: tracing::Span,
) -> Response {
    struct Relay {
        first: Option<Bytes>,
        upstream: Upstream,
        guard: Option<BookingGuard>,
        worker: WorkerId,
        class: String,
        /// The `worker.leg` span, closed when the stream ends.
        _leg: tracing::Span,
    }
    let relay = Relay {
        first,
        upstream,
        guard: Some(guard),
        worker,
        class,
        _leg: leg,
    };
    let body = stream::unfold(relay, |mut r| async move {
        if let Some(first) = r.first.take() {
            return Some((Ok::<Bytes, Infallible>(first), r));
        }
        let guard = r.guard.as_mut()?;
        match r.upstream.next().await {
            Some(Ok(chunk)) => {
                guard.prefill_done();
                Some((Ok(chunk), r))
            }
            Some(Err(e)) => {
                let err = broken(r.worker, &e).class(Some(r.class.clone()));
                guard.metrics.rejection(&r.class, err.reason);
                r.guard = None;
                let event = format!("data: {}\n\n", err.body_json());
                Some((Ok(Bytes::from(event)), r))
            }
            None => None,
        }
    });
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
