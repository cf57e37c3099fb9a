//! Serving an app on an already-bound listener under the connection-level limits.
//!
//! - At most `max_connections` connections are open at once: at the cap the listener stops
//!   accepting, so the next connection waits in the kernel's listen backlog until one
//!   closes (counted once per wait as `http_refused_total{reason="connection_limit"}`).
//! - A client must send a request's headers within `header_read_timeout`, which is also how
//!   long an idle keep-alive connection stays open; then the connection is closed (a
//!   slowloris client cannot hold a connection by trickling its headers).
//! - HTTP/1.1, as the engines' own OpenAI servers speak it; `TCP_NODELAY` on every
//!   connection (responses go out in small writes: SSE events).
//! - When `shutdown` resolves the listener stops accepting, idle connections close, and the
//!   call returns once every open connection has finished its request.
//!
//! hyper serves each connection (its HTTP/1 server with a tokio timer for the header
//! timeout); hyper-util adapts the tower service and tracks connections for the graceful
//! shutdown.

use super::Metrics;
use super::timer::GraceTimer;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// A listener's connection-level limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Longest time to receive a request's headers, and the longest idle keep-alive.
    pub header_read_timeout: Duration,
}

/// After an accept error other than a connection's own (too many open files, say), how long
/// to wait before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` under `limits` until `shutdown` resolves, then waits for the
/// open connections to finish (see the module docs). `name` is the `listener` label of the
/// connection metrics (`public`, `admin`).
pub async fn serve_app(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    name: &'static str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(GraceTimer)
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                metrics.refused(name, "connection_limit");
                tokio::select! {
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                }
            }
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if !is_connection_error(&e) {
                        tracing::error!(listener = name, error = %e, "accepting a connection failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        let metrics = Arc::clone(&metrics);
        metrics.connection_opened(name);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(listener = name, error = %e, "connection ended with an error");
            }
            metrics.connection_closed(name);
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Errors of one connection that failed while being accepted: the next accept is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
