//! `router-tools worker --sim ...`: the command-line face of [`SimWorker`]. The router node
//! flattens [`SimArgs`] into its `worker` subcommand and calls [`run_with`] with the reader
//! of its own `--tokenizer-config` (this crate has no tokenizer of its own) and its
//! telemetry ([`Hooks`]).
//!
//! Exit codes: 0 after a clean stop (Ctrl-C / SIGINT, or SIGTERM), 1 when the worker cannot start or
//! stops on an error (cannot listen, cannot reach NATS, cannot announce), 2 for a usage error
//! (no `--sim`, a bad value, or no `--nats` without `--standalone`).

use super::{PromptReader, SimConfig, SimWorker, role_name};
use crate::engine::Role;
use clap::{Args, ValueEnum};
use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_actors::bus::nats::NatsBus;
use router_core::WorkerId;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// Aggregated: prefill and decode on this worker.
    Agg,
    /// Prefill only; KV is staged for a decode worker.
    Prefill,
    /// Decode only; pulls staged KV from prefill workers.
    Decode,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::Agg => Role::Agg,
            RoleArg::Prefill => Role::Prefill,
            RoleArg::Decode => Role::Decode,
        }
    }
}

/// The simulated worker's arguments (`router-tools worker` flattens them into its own).
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Run the simulated engine (the only kind of worker there is).
    #[arg(long)]
    pub sim: bool,
    /// The part of disaggregated serving this worker plays.
    #[arg(long, value_enum, default_value_t = RoleArg::Agg)]
    pub role: RoleArg,
    /// Address to serve the OpenAI API on.
    #[arg(long, default_value = "127.0.0.1:8001")]
    pub listen: std::net::SocketAddr,
    /// NATS server to announce on and publish KV events and load to (nats://host:port).
    #[arg(long, conflicts_with = "standalone")]
    pub nats: Option<String>,
    /// Credentials and TLS of the NATS connection.
    #[command(flatten)]
    pub nats_security: router_actors::bus::NatsSecurityArgs,
    /// Run without NATS (routers in other processes cannot see this worker): for curl tests.
    #[arg(long)]
    pub standalone: bool,
    /// Cluster name: the prefix of every bus subject.
    #[arg(long, default_value = "switchyard")]
    pub cluster: String,
    /// Join the routers' pool of this model (a `[[models]]` name, or the model directory its
    /// `[[engines]]` name) instead of the cluster's default pool.
    #[arg(long, value_name = "MODEL")]
    pub pool: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub worker_id: u64,
    /// KV blocks in the engine.
    #[arg(long, default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    pub kv_blocks: u64,
    /// Tokens per KV block (must match the routers').
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub block_size: u64,
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    pub max_num_batched_tokens: u64,
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_num_seqs: u64,
    /// The longest sequence (prompt and output) served, in tokens: announced, listed in
    /// `/v1/models` as `max_model_len`, and a longer prompt is a 400, as vLLM does.
    #[arg(long, default_value_t = 262_144, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    pub max_model_len: u64,
    /// Divides every modelled duration (e.g. 10 runs ten times faster than the model).
    #[arg(long, default_value_t = 1.0, value_parser = positive_f64)]
    pub speedup: f64,
    /// Model name served.
    #[arg(long, default_value = "sim")]
    pub model: String,
    /// A LoRA adapter served too (repeatable).
    #[arg(long = "lora")]
    pub loras: Vec<String>,
    /// Adapters loaded at once, as vLLM's --max-loras (0: any number, loaded for free); the
    /// running ones are reported to the routers.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1024))]
    pub max_loras: u64,
    /// Announcement (heartbeat) and load period, milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub heartbeat_ms: u64,
    /// Routers drop this worker after this long without a heartbeat, milliseconds.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub lease_ms: u64,
    /// How long staged KV waits for a decode worker's pull, milliseconds (prefill role).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub staging_timeout_ms: u64,
    /// Output tokens of a request without `max_tokens`.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub default_max_tokens: u32,
    /// Base URL to announce instead of http://<listen address>.
    #[arg(long)]
    pub advertise: Option<String>,
}

/// Builds the worker's [`PromptReader`] once the arguments are known to be usable; an error
/// is a usage error (exit code 2) printed after `router-tools worker: `.
pub type LoadPrompts<'a> = &'a dyn Fn() -> Result<Arc<dyn PromptReader>, String>;

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a positive finite number".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

impl SimArgs {
    /// The worker's configuration.
    pub fn config(&self) -> SimConfig {
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        SimConfig {
            worker_id: WorkerId(self.worker_id),
            role: self.role.into(),
            block_size: size(self.block_size),
            total_kv_blocks: size(self.kv_blocks),
            max_num_batched_tokens: size(self.max_num_batched_tokens),
            max_num_seqs: size(self.max_num_seqs),
            max_model_len: self.max_model_len,
            speedup: self.speedup,
            model: self.model.clone(),
            loras: self.loras.clone(),
            max_loras: usize::try_from(self.max_loras).unwrap_or(0),
            cluster: match &self.pool {
                Some(model) => router_actors::wire::pool_cluster(&self.cluster, model),
                None => self.cluster.clone(),
            },
            heartbeat: Duration::from_millis(self.heartbeat_ms),
            lease: Duration::from_millis(self.lease_ms),
            staging_timeout: Duration::from_millis(self.staging_timeout_ms),
            default_max_tokens: self.default_max_tokens,
            advertise: self.advertise.clone(),
            ..SimConfig::default()
        }
    }
}

/// What the binary embedding the worker adds to it (the router node: its logs and traces).
#[derive(Default)]
pub struct Hooks<'a> {
    /// Runs inside the worker's runtime before the worker starts (e.g. installs a log
    /// subscriber and a trace exporter); what it returns is dropped once the worker stopped.
    /// An error is a usage error (exit code 2).
    pub telemetry: Option<Telemetry<'a>>,
    /// Links every request's `worker.generate` span to its caller ([`SimConfig::trace_parent`]).
    pub trace_parent: Option<super::TraceParent>,
}

/// See [`Hooks::telemetry`].
pub type Telemetry<'a> = &'a dyn Fn() -> Result<Box<dyn std::any::Any + Send>, String>;

impl std::fmt::Debug for Hooks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("telemetry", &self.telemetry.is_some())
            .field("trace_parent", &self.trace_parent.is_some())
            .finish()
    }
}

/// Runs `router-tools worker` until Ctrl-C or SIGTERM, reading bodies with `prompts`' reader.
pub fn run(args: &SimArgs, prompts: LoadPrompts<'_>) -> ExitCode {
    run_with(args, prompts, &Hooks::default())
}

/// [`run`] with the embedding binary's [`Hooks`].
pub fn run_with(args: &SimArgs, prompts: LoadPrompts<'_>, hooks: &Hooks<'_>) -> ExitCode {
    if !args.sim {
        eprintln!(
            "router-tools worker: only the simulated engine exists; pass --sim \
             (e.g. `router-tools worker --sim --standalone`)"
        );
        return ExitCode::from(2);
    }
    if args.nats.is_none() && !args.standalone {
        eprintln!(
            "router-tools worker: no --nats URL, so routers in other processes cannot see this \
             worker; pass --nats nats://HOST:PORT, or --standalone to serve it alone (curl tests)"
        );
        return ExitCode::from(2);
    }
    let prompts = match prompts() {
        Ok(prompts) => prompts,
        Err(e) => {
            eprintln!("router-tools worker: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("router-tools worker: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        let telemetry = match hooks.telemetry.map(|start| start()).transpose() {
            Ok(telemetry) => telemetry,
            Err(message) => {
                eprintln!("router-tools worker: {message}");
                return ExitCode::from(2);
            }
        };
        let served = serve(args, prompts, hooks.trace_parent).await;
        // Flushes what the hook started (spans) before the runtime goes.
        drop(telemetry);
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("router-tools worker: {message}");
                ExitCode::from(1)
            }
        }
    })
}

async fn serve(
    args: &SimArgs,
    prompts: Arc<dyn PromptReader>,
    trace_parent: Option<super::TraceParent>,
) -> Result<(), String> {
    let cfg = SimConfig {
        prompts,
        trace_parent,
        ..args.config()
    };
    let bus: Arc<dyn Bus> = match &args.nats {
        Some(url) => Arc::new(
            NatsBus::connect_secured(url, &args.nats_security.security())
                .await
                .map_err(|e| {
                    format!(
                        "cannot connect to NATS at {}: {e}",
                        router_actors::bus::nats_security::redact_url(url)
                    )
                })?,
        ),
        None => Arc::new(LocalBus::new()),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let role = role_name(cfg.role);
    let id = cfg.worker_id;
    let cluster = cfg.cluster.clone();
    let worker = SimWorker::start(listener, bus, cfg)
        .await
        .map_err(|e| e.to_string())?;
    let via = match &args.nats {
        Some(url) => format!("announced on {url} (cluster {cluster})"),
        None => "standalone, not announced to any router".to_owned(),
    };
    println!(
        "router-tools worker: simulated {role} engine {id} serving {} ({via}); Ctrl-C stops it",
        worker.endpoint()
    );
    worker
        .run_until(stop_signal())
        .await
        .map_err(|e| format!("serving stopped: {e}"))
}

/// Resolves at Ctrl-C (SIGINT) or, on Unix, SIGTERM. Without signal handling it never
/// resolves (the worker serves until killed).
async fn stop_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
