//! A serving node's shutdown: the signal ([`shutdown_signal`]), `/ready` following the
//! node's readiness until the drain starts, and the drain itself ([`serve_until`]): at the
//! signal `/ready` turns false, requests are still accepted for `http.shutdown_delay_ms`,
//! then the public listener stops accepting and in-flight requests get
//! `http.drain_timeout_ms` to finish; the admin listener closes last.
//!
//! The drain's last resort ([`cut_off`], a middleware on the public app): when the drain
//! timeout has passed, a request still waiting for its response is answered 503 and a stream
//! still running ends with one SSE error event. Either way its handler or body is dropped,
//! which releases its booking.

use super::ServeError;
use crate::config::Config;
use crate::frontend::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use std::future::Future;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// The switches a shutdown turns, in order.
pub(super) struct Switches {
    /// `/ready` turns false.
    pub draining: watch::Sender<bool>,
    /// The public listener stops accepting and drains.
    pub stop: oneshot::Sender<()>,
    /// Requests still in flight after the drain timeout are cut (`cut_off.rs`).
    pub cancel: watch::Sender<bool>,
    /// The admin listener stops.
    pub stop_admin: oneshot::Sender<()>,
}

type Server = JoinHandle<std::io::Result<()>>;

/// Waits for `shutdown` (or the public server ending on its own), then drains (module docs).
pub(super) async fn serve_until(
    config: &Config,
    mut server: Server,
    mut admin: Server,
    switches: Switches,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let served = tokio::select! {
        // The server ended on its own (an accept error): no drain to do.
        ended = &mut server => Some(ended),
        () = shutdown => None,
    };
    let result = match served {
        Some(ended) => flatten(ended),
        None => {
            let _ = switches.draining.send(true);
            if !config.shutdown_delay().is_zero() {
                tracing::info!(
                    shutdown_delay_ms = config.http.shutdown_delay_ms,
                    "shutting down: not ready, still serving while the load balancer notices",
                );
                tokio::select! {
                    () = tokio::time::sleep(config.shutdown_delay()) => {}
                    _ = &mut server => {}
                }
            }
            tracing::info!(
                drain_timeout_ms = config.http.drain_timeout_ms,
                "shutting down: not ready, no new connections, draining in-flight requests",
            );
            let _ = switches.stop.send(());
            match tokio::time::timeout(config.drain_timeout(), &mut server).await {
                Ok(ended) => flatten(ended),
                Err(_) => {
                    tracing::warn!("drain timeout: cutting the requests still in flight");
                    let _ = switches.cancel.send(true);
                    match tokio::time::timeout(CUT_GRACE, &mut server).await {
                        Ok(ended) => flatten(ended),
                        Err(_) => {
                            server.abort();
                            Ok(())
                        }
                    }
                }
            }
        }
    };
    // The admin listener served scrapes through the drain; it closes last.
    let _ = switches.stop_admin.send(());
    if tokio::time::timeout(CUT_GRACE, &mut admin).await.is_err() {
        admin.abort();
    }
    result
}

/// After the drain timeout, how long cut requests get to unwind before the server task is
/// abandoned.
const CUT_GRACE: Duration = Duration::from_secs(2);

fn flatten(ended: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), ServeError> {
    match ended {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ServeError::Http(e)),
        Err(e) => Err(ServeError::Http(std::io::Error::other(e.to_string()))),
    }
}

/// `/ready` is the node's readiness until the drain starts, then false.
pub(super) async fn follow_readiness(
    mut node: watch::Receiver<bool>,
    mut draining: watch::Receiver<bool>,
    out: watch::Sender<bool>,
) {
    loop {
        let ready = *node.borrow_and_update() && !*draining.borrow_and_update();
        out.send_replace(ready);
        tokio::select! {
            changed = node.changed() => if changed.is_err() { break },
            changed = draining.changed() => if changed.is_err() { break },
        }
    }
    out.send_replace(false);
}

/// Resolves at the first SIGINT (Ctrl-C) or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled: a SIGTERM that arrives while the node is still
/// starting (after it said it serves, before it awaits this) stops it cleanly instead of
/// killing it. Call it inside the runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async fn received(signal: Option<Signal>) {
            match signal {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => futures::future::pending::<()>().await,
            }
        }
        async move {
            tokio::select! {
                () = received(interrupt) => tracing::info!("SIGINT received"),
                () = received(terminate) => tracing::info!("SIGTERM received"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!("Ctrl-C received");
        } else {
            futures::future::pending::<()>().await;
        }
    }
}

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
