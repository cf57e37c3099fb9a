//! Proxying an admitted request to its worker, and the booking guard that makes sure the
//! booking is released however the request ends.
//!
//! The worker always streams (`stream: true` is forced upstream), so the router learns of
//! the first token: `prefill_done` is sent at the first non-empty upstream chunk. The
//! response headers wait for that first chunk, so a worker that fails before answering
//! is a clean 502. A streaming client then gets the worker's SSE bytes as they arrive; a
//! break mid-stream, or the request's deadline, ends the stream with one
//! `data: {"error": ..}` event. A non-streaming
//! client gets one JSON body assembled from the chunks (`assemble.rs`). Every chunk read
//! from the worker also goes to the request's [`RequestObserver`] (time to first token,
//! inter-token gaps, tokens), and every leg is counted against its worker
//! (`upstream_requests_total`, `upstream_errors_total`).

use super::AppState;
use super::assemble::assemble;
use super::error::{ApiError, Stage};
use super::openai::ParsedRequest;
use super::upstream::{UpstreamCall, UpstreamError, UpstreamResponse};
use crate::metrics::{Metrics, RequestObserver, RequestOutcome};
use crate::telemetry::propagation;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, StreamExt};
use router_actors::RouterHandle;
use router_core::{RequestId, WorkerId};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
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

pub(super) use super::upstream::Upstream;

/// The error reason of a connection to a worker that failed: the request never reached it,
/// so it may be placed again elsewhere.
pub(super) const UPSTREAM_CONNECT: &str = "upstream_connect";

/// Whether a leg failed before anything reached its worker, so that it may be placed again
/// elsewhere: the worker refused the connection, or it left the fleet between its admission
/// and the dispatch (the directory no longer has its endpoint).
pub(super) fn never_reached(e: &ApiError) -> bool {
    e.unreached.is_some()
}

/// The error reasons of a leg whose request could not be sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendReasons {
    /// No connection to the worker: it never got the request (placed elsewhere).
    pub refused: &'static str,
    /// The connection was made and the send failed.
    pub send: &'static str,
}

impl SendReasons {
    /// An aggregated leg's or a decode leg's.
    pub const LEG: Self = Self {
        refused: UPSTREAM_CONNECT,
        send: "upstream_send",
    };
    /// A prefill leg's.
    pub const PREFILL: Self = Self {
        refused: "prefill_connect",
        send: "prefill_send",
    };
}

/// The answer to a leg that could not be sent to `worker`: a refused connection (it never
/// reached the worker: placed elsewhere, counted by the breaker), a failed send (the
/// worker's failure), or this node out of file descriptors (neither: a 503, no ejection).
pub(super) fn send_error(
    worker: WorkerId,
    e: &UpstreamError,
    message: String,
    reasons: SendReasons,
) -> ApiError {
    match e {
        UpstreamError::OutOfFiles(_) => {
            tracing::error!(%worker, error = %e, "out of file descriptors: raise the node's open-files limit");
            ApiError::out_of_files(message)
        }
        e if e.is_connect() => ApiError::refused(worker, reasons.refused, message),
        _ => ApiError::upstream(Stage::Dispatch, reasons.send, message),
    }
}

/// The `type` of errors a worker caused (`ApiError::upstream`): counted against it.
const UPSTREAM_ERROR: &str = "upstream_error";

/// Where one leg goes: the admitted worker and its pool (labels of the per-worker metrics
/// and attributes of the `worker.leg` span).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub worker: WorkerId,
    pub pool: &'static str,
}

/// Forwards `request` to its target worker and answers the client. `guard` moves into the
/// response body for a streaming client, so the booking lives exactly as long as the
/// stream; so does the request's `observer` (handed over), which records its latencies and
/// tokens as the chunks are relayed.
pub(crate) async fn forward(
    state: &AppState,
    request: &ParsedRequest,
    target: Target,
    client_headers: &HeaderMap,
    guard: BookingGuard,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    // The upstream call, until the worker's stream ends (a streaming response owns it).
    let leg = tracing::info_span!(
        "worker.leg",
        otel.kind = "client",
        worker = target.worker.0,
        pool = target.pool,
        url = tracing::field::Empty,
    );
    state.metrics.upstream_request(target.pool, target.worker);
    let answer = forward_leg(
        state,
        request,
        target,
        client_headers,
        guard,
        observer,
        leg.clone(),
    )
    .instrument(leg)
    .await;
    if let Err(e) = &answer {
        worker_failed(&state.metrics, target, e);
    }
    answer
}

/// Counts `error` against the target worker when the worker failed it.
pub(super) fn worker_failed(metrics: &Metrics, target: Target, error: &ApiError) {
    if error.kind == UPSTREAM_ERROR {
        metrics.upstream_error(target.pool, target.worker, error.reason);
    }
}

/// The W3C trace context the worker gets: `leg`'s when it is traced, otherwise the
/// client's headers passed on unchanged.
pub(super) fn trace_context(leg: &tracing::Span, client_headers: &HeaderMap) -> HeaderMap {
    let propagated = propagation::context_headers(leg);
    if !propagated.is_empty() {
        return propagated;
    }
    let mut headers = HeaderMap::new();
    for name in propagation::HEADERS {
        if let Some(value) = client_headers.get(name) {
            headers.insert(name, value.clone());
        }
    }
    headers
}

/// The POST of `request`'s endpoint to `worker` with `body`, accepting `accept`: the URL
/// recorded on `leg` and the trace context attached. `no_endpoint` when the directory no
/// longer knows the worker.
pub(super) fn upstream_call(
    state: &AppState,
    request: &ParsedRequest,
    worker: WorkerId,
    client_headers: &HeaderMap,
    leg: &tracing::Span,
    accept: &'static str,
    body: Vec<u8>,
) -> Result<UpstreamCall, ApiError> {
    let base = state
        .directory
        .endpoint(worker)
        .ok_or_else(|| ApiError::no_endpoint(worker))?;
    let url = state
        .upstream_urls
        .get(worker, &base, request.endpoint.path())
        .map_err(|e| {
            ApiError::upstream(Stage::Dispatch, "upstream_send", format!("{worker}: {e}"))
        })?;
    leg.record("url", tracing::field::display(&url));
    Ok(state
        .http
        .post(url, accept, trace_context(leg, client_headers), body))
}

async fn forward_leg(
    state: &AppState,
    request: &ParsedRequest,
    target: Target,
    client_headers: &HeaderMap,
    mut guard: BookingGuard,
    observer: &mut RequestObserver,
    leg: tracing::Span,
) -> Result<Response, ApiError> {
    let worker = target.worker;
    let call = upstream_call(
        state,
        request,
        worker,
        client_headers,
        &leg,
        "text/event-stream",
        request.upstream_body(),
    )?;
    let response = call
        .send()
        .await
        .map_err(|e| send_error(worker, &e, format!("{worker}: {e}"), SendReasons::LEG))?;
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
        if let Some(first) = &first {
            observer.chunk(first);
        }
        let relay = Relay {
            first,
            upstream,
            guard: Some(guard),
            target,
            observer: observer.hand_over(),
            deadline: request
                .deadline
                .map(|d| (Box::pin(tokio::time::sleep_until(d.at)), d.limit)),
            _leg: leg,
        };
        Ok(relay.into_response())
    } else {
        let body = assemble(
            request.endpoint,
            upstream,
            first,
            state.limits.max_response_bytes,
            worker,
            observer,
        )
        .await;
        drop(guard);
        body.map(|b| axum::Json(b).into_response())
    }
}

pub(super) async fn upstream_status(
    worker: WorkerId,
    status: StatusCode,
    response: UpstreamResponse,
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

pub(super) fn broken(worker: WorkerId, e: &UpstreamError) -> ApiError {
    ApiError::upstream(Stage::Upstream, "upstream_stream", format!("{worker}: {e}"))
}

/// The streaming response: the first chunk, then the rest of the worker's bytes as they
/// come. It owns the guard and the request's observer; the guard is dropped when the stream
/// ends or breaks, when the request's deadline passes (the stream then ends with one error
/// event), or when the client goes away and the server drops the body (the observer then
/// records the request as cancelled).
struct Relay {
    first: Option<Bytes>,
    upstream: Upstream,
    guard: Option<BookingGuard>,
    target: Target,
    observer: RequestObserver,
    /// The request's deadline and the limit it came from.
    deadline: Option<(Pin<Box<tokio::time::Sleep>>, Duration)>,
    /// The `worker.leg` span, closed when the stream ends.
    _leg: tracing::Span,
}

/// What the relay read next: a chunk, an error, the end, or nothing before the deadline.
enum Next {
    Read(Option<Result<Bytes, UpstreamError>>),
    Deadline(Duration),
}

impl Relay {
    fn into_response(self) -> Response {
        let body = stream::unfold(self, |mut r| async move {
            if let Some(first) = r.first.take() {
                return Some((Ok::<Bytes, Infallible>(first), r));
            }
            let guard = r.guard.as_mut()?;
            let next = match r.deadline.as_mut() {
                // The deadline first: a worker streaming without pause cannot outrun it.
                Some((sleep, limit)) => tokio::select! {
                    biased;
                    () = sleep.as_mut() => Next::Deadline(*limit),
                    read = r.upstream.next() => Next::Read(read),
                },
                None => Next::Read(r.upstream.next().await),
            };
            let read = match next {
                Next::Read(read) => read,
                Next::Deadline(limit) => {
                    let class = r.observer.class_name().to_owned();
                    let err = ApiError::request_timeout(limit).class(Some(class.clone()));
                    guard.metrics.rejection(&class, err.reason);
                    r.observer.finish(RequestOutcome::Error);
                    // The booking is released now; the stream ends after this event.
                    r.guard = None;
                    let event = format!("data: {}\n\n", err.body_json());
                    return Some((Ok(Bytes::from(event)), r));
                }
            };
            match read {
                Some(Ok(chunk)) => {
                    guard.prefill_done();
                    r.observer.chunk(&chunk);
                    Some((Ok(chunk), r))
                }
                Some(Err(e)) => {
                    let class = r.observer.class_name().to_owned();
                    let err = broken(r.target.worker, &e).class(Some(class.clone()));
                    guard.metrics.rejection(&class, err.reason);
                    worker_failed(&guard.metrics, r.target, &err);
                    r.observer.finish(RequestOutcome::Error);
                    r.guard = None;
                    let event = format!("data: {}\n\n", err.body_json());
                    Some((Ok(Bytes::from(event)), r))
                }
                None => {
                    r.observer.finish(RequestOutcome::Ok);
                    None
                }
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
}
