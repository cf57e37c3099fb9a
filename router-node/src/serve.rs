//! `router-node serve`: one router node behind the OpenAI-compatible HTTP frontend.
//!
//! config → telemetry → bus (NATS, or in-process) → `Node::start` (with one engine link per
//! `[[engines]]` entry under its supervisor) → bind the listener →
//! the frontend on it, `/ready` following the node's readiness, API keys (`[auth]`) reloaded
//! at SIGHUP and on change → on SIGINT/SIGTERM: `/ready`
//! turns false, requests are still accepted for `http.shutdown_delay_ms` (the load balancer
//! notices), then no new connections are accepted, in-flight requests and streams get up to
//! `http.drain_timeout_ms` to finish, and the node's actors stop (peers get a goodbye).
//!
//! [`serve_with_bus`] runs a node on a given bus and an already-bound listener until a
//! shutdown future resolves; tests drive it in-process. [`main`] is the command.

use crate::config::{BusKind, Config, ConfigError, TopologyKind};
use crate::frontend::{self, ApiError, AppState, WorkerDirectory};
use crate::metrics::NodeSources;
use crate::telemetry::{self, TelemetryError};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use router_actors::bus::nats::NatsBus;
use router_actors::bus::nats_security::NatsConnectError;
use router_actors::bus::{Bus, local::LocalBus};
use router_actors::supervisor::ActorSlot;
use router_actors::{Node, NodeError, RegistryHandle};
use router_core::{PoolRole, WorkerId};
use router_engine::{EngineLinkArgs, EngineLinkHandle, engine_link_child};
use std::future::Future;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

/// Why the node could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// `<redacted url>: <why>`.
    #[error("bus.nats_url: cannot connect to NATS at {0}")]
    Bus(String),
    /// A `[bus.auth]` / `[bus.tls]` file that cannot be used (the message names its key).
    #[error("{0}")]
    BusSettings(String),
    #[error("http.listen {addr}: cannot bind: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("starting the node: {0}")]
    Node(#[from] NodeError),
    #[error("the node has no {0:?} pool")]
    NoPool(PoolRole),
    #[error("building the upstream HTTP client: {0}")]
    Client(String),
    #[error("serving HTTP: {0}")]
    Http(std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

impl ServeError {
    /// 2 for a configuration the node cannot use, 1 for a failure while running.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            ServeError::Config(_) | ServeError::Telemetry(_) | ServeError::BusSettings(_) => {
                ExitCode::from(2)
            }
            _ => ExitCode::from(1),
        }
    }
}

/// The worker registry is the frontend's directory of worker endpoints.
#[derive(Debug, Clone)]
pub struct RegistryDirectory(pub RegistryHandle);

impl WorkerDirectory for RegistryDirectory {
    fn endpoint(&self, worker: WorkerId) -> Option<String> {
        self.0.endpoint(worker)
    }

    fn workers(&self) -> Option<Vec<WorkerId>> {
        let directory = self.0.directory();
        Some(
            directory
                .pools
                .iter()
                .flat_map(|(_, workers)| workers.iter().map(|(w, _)| *w))
                .collect(),
        )
    }
}

/// The bus `config` asks for: a NATS connection, or a fresh in-process bus.
pub async fn connect_bus(config: &Config) -> Result<Arc<dyn Bus>, ServeError> {
    match config.bus.kind {
        BusKind::InProcess => Ok(Arc::new(LocalBus::new())),
        BusKind::Nats => {
            let url = &config.bus.nats_url;
            let bus = NatsBus::connect_secured(url, &config.bus.security())
                .await
                .map_err(|e| match e {
                    NatsConnectError::File { .. } | NatsConnectError::Settings(_) => {
                        ServeError::BusSettings(e.to_string())
                    }
                    // "authentication failed: ..." / "TLS failed: ..." / the client's message.
                    _ => ServeError::Bus(format!(
                        "{}: {}",
                        redact_url(url),
                        e.to_string().replace(url, &redact_url(url))
                    )),
                })?;
            Ok(Arc::new(bus))
        }
    }
}

/// `url` with any user info (`user:password@`) replaced by `***@`.
pub fn redact_url(url: &str) -> String {
    router_actors::bus::nats_security::redact_url(url)
}

/// Runs one node on `bus`, serving on `listener`, until `shutdown` resolves; then drains
/// (at most `http.drain_timeout_ms`) and stops the node.
pub async fn serve_with_bus(
    config: Config,
    listener: TcpListener,
    bus: Arc<dyn Bus>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let profile = config.policy_profile()?;
    let prompter = config.prompter()?;
    let mut node_config = config.node_config(profile.clone());
    node_config.allowed_endpoints = config.registry.allow_list()?;
    if node_config.allowed_endpoints.is_empty() && config.bus.kind == BusKind::Nats {
        tracing::warn!(
            "registry.allowed_endpoints is empty: any client of the bus may announce a worker \
             endpoint and receive prompts; list your workers' hosts or networks (SECURITY.md)"
        );
    }
    let router_id = node_config.router_id;
    let engines = engine_links(&config, &bus, &mut node_config);
    let node = Node::start(node_config, bus).await?;
    let started = serve_node(
        &config, listener, &node, &engines, profile, prompter, shutdown,
    )
    .await;
    tracing::info!(%router_id, "stopping the node");
    node.shutdown().await;
    started
}

/// Whether the node's bus connection is up, for `/ready`.
fn bus_status(node: &Node) -> Arc<dyn Fn() -> bool + Send + Sync> {
    let bus = node.bus();
    Arc::new(move || bus.connected())
}

/// One engine link per `[[engines]]` entry, as children of the node's supervisor; their
/// handles, for `/debug/state`.
fn engine_links(
    config: &Config,
    bus: &Arc<dyn Bus>,
    node: &mut router_actors::NodeConfig,
) -> Vec<EngineLinkHandle> {
    let subjects = router_actors::wire::Subjects::new(config.node.cluster.clone());
    config
        .engines
        .iter()
        .enumerate()
        .map(|(index, engine)| {
            let args = EngineLinkArgs {
                bus: Arc::clone(bus),
                subjects: subjects.clone(),
                config: engine.link_config(Some(config.node.block_size)),
            };
            let slot = ActorSlot::empty();
            node.extra_children.push(engine_link_child(
                format!("engine-link-{index}"),
                args,
                slot.clone(),
            ));
            EngineLinkHandle::from_slot(slot).with_call_timeout(node.call_timeout)
        })
        .collect()
}

async fn serve_node(
    config: &Config,
    listener: TcpListener,
    node: &Node,
    engines: &[EngineLinkHandle],
    profile: router_core::PolicyProfile,
    prompter: frontend::Prompter,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    // Disaggregated: the prefill router is the admission gate and the decode router books the
    // staged decode legs.
    let disaggregated = config.node.topology == TopologyKind::Disaggregated;
    let gate = if disaggregated {
        PoolRole::Prefill
    } else {
        PoolRole::Aggregated
    };
    let router = node.router(gate).ok_or(ServeError::NoPool(gate))?.clone();
    let decode = if disaggregated {
        Some(
            node.router(PoolRole::Decode)
                .ok_or(ServeError::NoPool(PoolRole::Decode))?
                .clone(),
        )
    } else {
        None
    };
    let (ready_tx, ready_rx) = watch::channel(false);
    let (draining_tx, draining_rx) = watch::channel(false);
    let follow = tokio::spawn(follow_readiness(node.ready(), draining_rx, ready_tx));
    let state = AppState::new(
        router,
        Arc::new(RegistryDirectory(node.registry().clone())),
        profile,
        config.limits(),
        ready_rx,
    )
    .map_err(|e| ServeError::Client(e.to_string()))?
    .with_models(config.http.models.iter().cloned())
    .with_prompter(prompter)
    .with_forward_token_ids(config.tokenizer.forward_token_ids)
    .with_alive(node.alive())
    .with_bus_status(bus_status(node));
    // `/metrics` observes the node's actors at each scrape. Set before the app exists, so
    // every clone of the metrics (booking guards) shares this one.
    let state = AppState {
        metrics: Arc::new(
            frontend::Metrics::new()
                .with_node(NodeSources::from_node(node).with_engines(engines.to_vec())),
        ),
        ..state
    };
    let state = match decode {
        Some(decode) => state
            .with_decode(decode)
            .with_convention(config.disagg.convention),
        None => state,
    };
    let local = listener.local_addr().map_err(ServeError::Http)?;
    let keys = config.auth.key_store(Arc::clone(&state.profile))?;
    let (state, reloader) = crate::auth::attach(state, keys, config.auth.reload_interval(), local);
    tracing::info!(
        listen = %local,
        cluster = %config.node.cluster,
        router_id = %node.config.router_id,
        tokenizer = %state.prompter.tokenizer().describe(),
        "serving the OpenAI API",
    );
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (cancel_tx, cancel_rx) = watch::channel(false);
    tokio::spawn(state.prompter.clone().warm());
    let app = frontend::app(state).layer(axum::middleware::from_fn_with_state(cancel_rx, cut_off));
    let serving = axum::serve(frontend::nodelay(listener), app).with_graceful_shutdown(async {
        let _ = stop_rx.await;
    });
    let mut server = tokio::spawn(async move { serving.await });
    let served = tokio::select! {
        // The server ended on its own (an accept error): no drain to do.
        ended = &mut server => Some(ended),
        () = shutdown => None,
    };
    let result = match served {
        Some(ended) => flatten(ended),
        None => {
            let _ = draining_tx.send(true);
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
            let _ = stop_tx.send(());
            match tokio::time::timeout(config.drain_timeout(), &mut server).await {
                Ok(ended) => flatten(ended),
                Err(_) => {
                    tracing::warn!("drain timeout: cutting the requests still in flight");
                    let _ = cancel_tx.send(true);
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
    follow.abort();
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    result
}

/// After the drain timeout, how long cut requests get to unwind before the server task is
/// abandoned.
const CUT_GRACE: Duration = Duration::from_secs(2);

/// Resolves once `cancel` turns true (never if its sender is gone without it).
async fn cancelled(mut cancel: watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        futures::future::pending::<()>().await;
    }
}

/// Middleware: when the drain timeout passes, a request still waiting for its response is
/// answered 503, and a stream still running ends with one SSE error event. Either way its
/// handler or body is dropped, which releases the booking.
async fn cut_off(
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

fn flatten(ended: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), ServeError> {
    match ended {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ServeError::Http(e)),
        Err(e) => Err(ServeError::Http(std::io::Error::other(e.to_string()))),
    }
}

/// `/ready` is the node's readiness until the drain starts, then false.
async fn follow_readiness(
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

/// Binds `http.listen`, connects the bus and serves until SIGINT or SIGTERM.
pub async fn run(config: Config) -> Result<(), ServeError> {
    // Configuration problems first, before any connection is made.
    let profile = config.policy_profile()?;
    config.prompter()?;
    config.auth.key_store(Arc::new(profile))?;
    let bus = connect_bus(&config).await?;
    let listener = TcpListener::bind(&config.http.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.http.listen.clone(),
            source,
        })?;
    serve_with_bus(config, listener, bus, shutdown_signal()).await
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

/// The `serve` command: load the configuration (file, then environment), start telemetry
/// and run the node until a signal. Errors go to stderr (and the log) with an exit code.
pub fn main(config_path: Option<&Path>) -> ExitCode {
    let config = match Config::load(config_path) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("router-node serve: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("router-node serve: {}", ServeError::Runtime(e));
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let guard = match telemetry::init(&config.telemetry) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("router-node serve: {e}");
                return ExitCode::from(2);
            }
        };
        let result = run(config).await;
        let code = match &result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "router-node serve failed");
                eprintln!("router-node serve: {e}");
                e.exit_code()
            }
        };
        guard.shutdown().await;
        code
    })
}
