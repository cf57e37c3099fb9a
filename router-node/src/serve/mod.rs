//! `router-node serve`: one router node behind the OpenAI-compatible HTTP frontend.
//!
//! config → telemetry → bus (NATS, or in-process) → `Node::start` (with one engine link per
//! `[[engines]]` entry under its supervisor) → bind both listeners → the public app (the
//! OpenAI API, `/health`, `/ready`) on `http.listen` and the admin app (`/metrics`,
//! `/debug/state`, `/health`, `/ready`, behind `admin.token_file`'s token when set) on
//! `admin.listen`, `/ready` following the node's readiness, API keys (`[auth]`) reloaded at
//! SIGHUP and on change; one log line names both
//! addresses → on SIGINT/SIGTERM: `/ready` turns false, requests are still accepted for
//! `http.shutdown_delay_ms` (the load balancer notices), then no new connections are
//! accepted, in-flight requests and streams get up to `http.drain_timeout_ms` to finish
//! (then they are cut), the admin listener closes last, and the node's actors stop (peers
//! get a goodbye).
//!
//! [`serve_with_bus`] runs a node on a given bus and already-bound [`Listeners`] until a
//! shutdown future resolves; tests drive it in-process. [`main`] is the command.
//!
//! Files: `mod.rs` (the command, the node and its frontend), `parts.rs` (the bus, the worker
//! directory, engine links, the listeners), `shutdown.rs` (the signal, readiness, the drain
//! and its cut-off).

mod parts;
mod pools;
mod shutdown;

pub use parts::{Listeners, RegistryDirectory, connect_bus, redact_url};
pub use shutdown::shutdown_signal;

use crate::config::{BusKind, Config, ConfigError, TopologyKind};
use crate::frontend::{self, AdminToken, AppState};
use crate::metrics::NodeSources;
use crate::telemetry::{self, TelemetryError};
use router_actors::bus::Bus;
use router_actors::{Node, NodeError};
use router_core::PoolRole;
use router_engine::EngineLinkHandle;
use std::future::Future;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
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
    /// `key` is `http.listen` or `admin.listen`.
    #[error("{key} {addr}: cannot bind: {source}")]
    Bind {
        key: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("starting the node: {0}")]
    Node(#[from] NodeError),
    #[error("the node has no {0:?} pool")]
    NoPool(PoolRole),
    #[error("serving HTTP: {0}")]
    Http(std::io::Error),
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

/// Runs one node on `bus`, serving on `listeners`, until `shutdown` resolves; then drains
/// (at most `http.drain_timeout_ms`) and stops the node.
pub async fn serve_with_bus(
    config: Config,
    listeners: Listeners,
    bus: Arc<dyn Bus>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let profile = config.policy_profile()?;
    let prompter = config.prompter()?;
    let token = config.admin.token()?;
    if token.is_none() && !config.admin.is_loopback() {
        tracing::warn!(
            admin = %config.admin.listen,
            "admin.listen is not a loopback address and admin.token_file is not set: anyone \
             who reaches it reads /metrics and /debug/state (SECURITY.md)"
        );
    }
    let mut node_config = config.node_config(profile.clone());
    node_config.allowed_endpoints = config.registry.allow_list()?;
    if node_config.allowed_endpoints.is_empty() && config.bus.kind == BusKind::Nats {
        tracing::warn!(
            "registry.allowed_endpoints is empty: any client of the bus may announce a worker \
             endpoint and receive prompts; list your workers' hosts or networks (SECURITY.md)"
        );
    }
    let router_id = node_config.router_id;
    // The default pool's node runs always (the cluster's own subjects); it takes requests
    // when the configuration has a default pool (`config/models.rs`).
    let plans = config.pool_plans();
    let default_plan = plans.iter().find(|p| p.key.is_none());
    let default_engines = default_plan.map(|p| p.engines.clone()).unwrap_or_default();
    let engines = parts::engine_links(&config, &default_engines, &bus, &mut node_config);
    let node = Node::start(node_config, Arc::clone(&bus)).await?;
    let model_nodes = Arc::new(pools::ModelNodes::default());
    let frontend = Frontend {
        profile,
        prompter,
        token,
        default_routes: default_plan.is_some(),
        model_pools: plans.iter().any(|p| p.key.is_some()),
        model_nodes: Arc::clone(&model_nodes),
        bus,
    };
    let started = serve_node(&config, listeners, &node, &engines, frontend, shutdown).await;
    tracing::info!(%router_id, "stopping the node");
    model_nodes.shutdown().await;
    node.shutdown().await;
    started
}

/// What the frontend is built from, besides the node.
struct Frontend {
    profile: router_core::PolicyProfile,
    prompter: router_tokenizer::Prompter,
    token: Option<AdminToken>,
    /// Whether requests for models no model's pool serves go to the default pool.
    default_routes: bool,
    /// Whether the configuration has models' pools (started beside the default one).
    model_pools: bool,
    model_nodes: Arc<pools::ModelNodes>,
    bus: Arc<dyn Bus>,
}

async fn serve_node(
    config: &Config,
    listeners: Listeners,
    node: &Node,
    engines: &[EngineLinkHandle],
    frontend: Frontend,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let Frontend {
        profile,
        prompter,
        token,
        default_routes,
        model_pools,
        model_nodes,
        bus,
    } = frontend;
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
    // Ready while any pool is; alive while every pool is (models' pools join as they start).
    let (any_ready, ready_join, merge_ready) = pools::merge_watches(node.ready(), pools::any_ready);
    let (all_alive, alive_join, merge_alive) = pools::merge_watches(node.alive(), pools::all_alive);
    let follow = tokio::spawn(shutdown::follow_readiness(any_ready, draining_rx, ready_tx));
    let state = AppState::new(
        router,
        Arc::new(RegistryDirectory(node.registry().clone())),
        profile,
        config.limits(),
        ready_rx,
    )
    .with_models(config.http.models.iter().cloned())
    .with_prompter(prompter)
    .with_forward_token_ids(config.tokenizer.forward_token_ids)
    .with_local_prefill(config.disagg.local_prefill())
    .with_alive(all_alive)
    .with_bus_status(parts::bus_status(node));
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
    // Several models: each request goes to its model's pool (the default one as built above).
    let state = if model_pools {
        let default = default_routes.then(|| frontend::Pool {
            label: "default".to_owned(),
            names: Vec::new(),
            router: state.router.clone(),
            decode: state.decode.clone(),
            convention: state.convention,
            local_prefill: state.local_prefill,
            prompter: state.prompter.clone(),
            directory: Arc::clone(&state.directory),
        });
        let pools = Arc::new(frontend::Pools::new(default));
        let joins = pools::Joins {
            pools: Arc::clone(&pools),
            metrics: Arc::clone(&state.metrics),
            ready: ready_join,
            alive: alive_join,
            gate: state.tokenize_gate.clone(),
        };
        pools::start_model_pools(config, &state.profile, &bus, &model_nodes, &joins);
        state.with_pools(pools)
    } else {
        state
    };
    let local = listeners.public.local_addr().map_err(ServeError::Http)?;
    let admin_local = listeners.admin.local_addr().map_err(ServeError::Http)?;
    let keys = config.auth.key_store(Arc::clone(&state.profile))?;
    let (state, reloader) = parts::attach_keys(state, keys, config.auth.reload_interval(), local);
    tracing::info!(
        listen = %local,
        admin = %admin_local,
        admin_token = token.is_some(),
        cluster = %config.node.cluster,
        router_id = %node.config.router_id,
        tokenizer = %state.prompter.tokenizer().describe(),
        "serving the OpenAI API",
    );
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (admin_stop_tx, admin_stop_rx) = oneshot::channel::<()>();
    let (cancel_tx, cancel_rx) = watch::channel(false);
    tokio::spawn(state.prompter.clone().warm());
    let metrics = Arc::clone(&state.metrics);
    let public_limits = frontend::public_connection_limits(&state.limits);
    let admin_limits = frontend::admin_connection_limits(&state.limits);
    let admin = frontend::serve_app(
        listeners.admin,
        frontend::admin_app(state.clone(), token),
        admin_limits,
        Arc::clone(&metrics),
        "admin",
        async {
            let _ = admin_stop_rx.await;
        },
    );
    let admin = tokio::spawn(admin);
    let app = frontend::app(state).layer(axum::middleware::from_fn_with_state(
        cancel_rx,
        shutdown::cut_off,
    ));
    let serving = frontend::serve_app(
        listeners.public,
        app,
        public_limits,
        metrics,
        "public",
        async {
            let _ = stop_rx.await;
        },
    );
    let server = tokio::spawn(serving);
    let switches = shutdown::Switches {
        draining: draining_tx,
        stop: stop_tx,
        cancel: cancel_tx,
        stop_admin: admin_stop_tx,
    };
    let result = shutdown::serve_until(config, server, admin, switches, shutdown).await;
    follow.abort();
    merge_ready.abort();
    merge_alive.abort();
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    result
}

/// Binds `http.listen` and `admin.listen`, connects the bus and serves until SIGINT or
/// SIGTERM.
pub async fn run(config: Config) -> Result<(), ServeError> {
    // Configuration problems first, before any connection is made.
    let profile = config.policy_profile()?;
    config.prompter()?;
    for plan in config.pool_plans() {
        config.pool_prompter(&plan)?;
    }
    config.auth.key_store(Arc::new(profile))?;
    config.admin.token()?;
    let bus = connect_bus(&config).await?;
    let listeners = Listeners::bind(&config).await?;
    serve_with_bus(config, listeners, bus, shutdown_signal()).await
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
    let runtime = match crate::runtime::start_with("router-node serve", config.node.worker_threads)
    {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let guard = match telemetry::init(&config.telemetry) {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("router-node serve: {e}");
                return ExitCode::from(2);
            }
        };
        crate::runtime::raise_open_files_limit();
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
