//! The drain's last resort: when `http.drain_timeout_ms` has passed at shutdown, every
//! request still in flight is cut (a middleware on the public app). A request still waiting
//! for its response is answered 503; a stream still running ends with one SSE error event.
//! Either way its handler or body is dropped, which releases its booking.

use crate::frontend::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use tokio::sync::watch;

/// Resolves once `cancel` turns true (never if its sender is gone without it).
async fn cancelled(mut cancel: watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        futures::future::pending::<()>().await;
    }
}

/// Middleware: once `cancel` turns true, answers or ends the request (module docs).
pub(super) async fn cut_off(
    State(cancel): State<watch::Receiver<bool>>,
    request: Request,
    next: Next,
) -> Response {
    let response = tokio::select! {
        response = next.run(request) => response,
        () = cancelled(cancel.clone()) => {
            return ApiError::router_gone()
                .message("the node is shutting down")
                .into_response();
        }
    };
    let streaming = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streaming {
        return response;
    }
    let (parts, body) = response.into_parts();
    let event = format!(
        "data: {}\n\n",
        ApiError::router_gone()
            .message("the node shut down before the stream ended")
            .body_json()
    );
    let body = futures::stream::unfold(
        (body.into_data_stream(), Box::pin(cancelled(cancel)), false),
        move |(mut body, mut cut, done)| {
            let event = event.clone();
            async move {
                if done {
                    return None;
                }
                tokio::select! {
                    biased;
                    next = body.next() => next.map(|item| (item, (body, cut, false))),
                    () = &mut cut => Some((Ok(Bytes::from(event)), (body, cut, true))),
                }
            }
        },
    );
    Response::from_parts(parts, Body::from_stream(body))
}
