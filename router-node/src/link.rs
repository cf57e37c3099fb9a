//! `router-node link`: a sidecar next to one real engine (vLLM, SGLang). It runs the engine
//! link (router-engine's `EngineLinkActor`) over NATS: the engine is announced to every
//! router of the cluster, its KV events and load relayed, and it leaves the fleet when it
//! stops answering or when the sidecar stops.
//!
//! Exit codes: 0 after Ctrl-C / SIGTERM, 1 when NATS cannot be reached or the link cannot
//! start, 2 for a usage error.

use crate::config::{EngineRole, EngineSection};
use clap::{Args, ValueEnum};
use router_actors::bus::Bus;
use router_actors::bus::nats::NatsBus;
use router_actors::wire::Subjects;
use router_engine::{EngineKind, EngineLinkArgs, EngineLinkConfig, EngineLinkHandle};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    Vllm,
    Sglang,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    Agg,
    Prefill,
    Decode,
}

/// The arguments of `router-node link`.
#[derive(Debug, Args)]
pub struct LinkArgs {
    /// The engine's kind.
    #[arg(long, value_enum)]
    pub engine: EngineArg,
    /// The engine's OpenAI base URL (announced to the routers as the worker's endpoint).
    #[arg(long, value_name = "http://HOST:PORT")]
    pub url: String,
    /// The engine's ZMQ KV event publisher (vLLM: --kv-events-config endpoint); absent: the
    /// engine publishes no events.
    #[arg(long, value_name = "tcp://HOST:PORT")]
    pub kv_events: Option<String>,
    /// Bind --kv-events and let the engine's publisher connect to it (vLLM given a concrete
    /// `tcp://IP:PORT` endpoint connects; given `tcp://*:PORT` it binds).
    #[arg(long, requires = "kv_events")]
    pub kv_events_bind: bool,
    /// Report the engine's KV events silent when it prefills with no batch for this long,
    /// milliseconds.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub silent_after_ms: u64,
    /// The engine's ZMQ replay service, used to fill lost event batches.
    #[arg(long, value_name = "tcp://HOST:PORT")]
    pub replay: Option<String>,
    /// The publisher's topic.
    #[arg(long, default_value = "kv-events")]
    pub topic: String,
    /// The part the engine plays.
    #[arg(long, value_enum, default_value_t = RoleArg::Agg)]
    pub role: RoleArg,
    /// NATS server of the routers (nats://host:port).
    #[arg(long, env = "SWITCHYARD_NATS_URL")]
    pub nats: String,
    /// Credentials and TLS of the NATS connection.
    #[command(flatten)]
    pub nats_security: router_actors::bus::NatsSecurityArgs,
    /// Cluster name: the prefix of every bus subject (the routers' node.cluster).
    #[arg(long, default_value = "switchyard", env = "SWITCHYARD_CLUSTER")]
    pub cluster: String,
    /// The routers' pool the engine joins: its model's `[[models]]` name (or the model
    /// directory the routers' `[[engines]]` name); absent: the cluster's default pool.
    #[arg(long, value_name = "MODEL")]
    pub pool: Option<String>,
    /// Worker id (default: derived from --url, as a router's [[engines]] entry derives it).
    #[arg(long)]
    pub worker_id: Option<u64>,
    /// The engine's --max-num-batched-tokens (engines do not report it).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_num_batched_tokens: Option<u64>,
    /// A LoRA adapter the engine serves (repeatable).
    #[arg(long = "lora")]
    pub loras: Vec<String>,
    /// How often the engine is probed and announced, milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub poll_ms: u64,
    /// Routers drop the engine after this long without an announcement, milliseconds.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub lease_ms: u64,
}

impl LinkArgs {
    /// The link's configuration, or a usage error.
    pub fn config(&self) -> Result<EngineLinkConfig, String> {
        let kind = match self.engine {
            EngineArg::Vllm => EngineKind::Vllm,
            EngineArg::Sglang => EngineKind::Sglang,
        };
        let role = match self.role {
            RoleArg::Agg => EngineRole::Agg,
            RoleArg::Prefill => EngineRole::Prefill,
            RoleArg::Decode => EngineRole::Decode,
        };
        let scheme = |flag: &str, value: &str, schemes: &[&str]| {
            if router_engine::has_scheme(value, schemes) {
                Ok(())
            } else {
                Err(format!(
                    "{flag} must be {}://HOST:PORT, got {value:?}",
                    schemes.join(" or ")
                ))
            }
        };
        scheme("--url", &self.url, &["http", "https"])?;
        for (flag, value) in [("--kv-events", &self.kv_events), ("--replay", &self.replay)] {
            if let Some(value) = value {
                scheme(flag, value, &["tcp"])?;
            }
        }
        if self.lease_ms <= self.poll_ms {
            return Err(format!(
                "--lease-ms ({}) must be above --poll-ms ({})",
                self.lease_ms, self.poll_ms
            ));
        }
        // The same entry a node's `[[engines]]` holds, so both build the link alike; the
        // routers' block size is not known here (each router checks what it is announced).
        let entry = EngineSection {
            kind,
            url: self.url.clone(),
            model: None,
            model_dir: None,
            kv_events: self.kv_events.clone(),
            kv_events_bind: self.kv_events_bind,
            silent_after_ms: self.silent_after_ms,
            replay: self.replay.clone(),
            topic: self.topic.clone(),
            role,
            id: self.worker_id,
            max_num_batched_tokens: self.max_num_batched_tokens,
            loras: self.loras.clone(),
            poll_ms: self.poll_ms,
            lease_ms: self.lease_ms,
        };
        let link = entry.link_config(None);
        Ok(link)
    }
}

/// Runs `router-node link` until Ctrl-C or SIGTERM.
pub fn run(args: &LinkArgs) -> ExitCode {
    let config = match args.config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("router-node link: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match crate::runtime::start("router-node link") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(serve(args, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("router-node link: {message}");
            ExitCode::from(1)
        }
    }
}

async fn serve(args: &LinkArgs, config: EngineLinkConfig) -> Result<(), String> {
    // Signal handlers first: a SIGTERM during start-up stops the link cleanly.
    let stop = crate::serve::shutdown_signal();
    // Logs as `serve` writes them by default (RUST_LOG filters).
    let _telemetry = crate::telemetry::init(&crate::config::TelemetrySection::default())
        .map_err(|e| e.to_string())?;
    let security = args.nats_security.security();
    let bus: Arc<dyn Bus> = Arc::new(
        NatsBus::connect_secured(&args.nats, &security)
            .await
            .map_err(|e| {
                format!(
                    "cannot connect to NATS at {}: {e}",
                    crate::serve::redact_url(&args.nats)
                )
            })?,
    );
    let url = config.url.clone();
    let worker = config.worker;
    let kind = config.kind;
    let (link, _join) = EngineLinkHandle::spawn(EngineLinkArgs {
        bus: bus.clone(),
        subjects: Subjects::new(match &args.pool {
            Some(model) => router_actors::wire::pool_cluster(&args.cluster, model),
            None => args.cluster.clone(),
        }),
        config,
    })
    .await
    .map_err(|e| format!("cannot start the link: {e}"))?;
    println!(
        "router-node link: {} engine at {url} is worker {worker} of cluster {} on {}; it joins \
         when it answers /health. Ctrl-C stops the link (the engine leaves the fleet).",
        kind.name(),
        args.cluster,
        crate::serve::redact_url(&args.nats),
    );
    stop.await;
    link.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), bus.flush()).await;
    Ok(())
}
