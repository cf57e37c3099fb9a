//! `router-tools worker --sim`: router-sim's simulated worker as a command, reading request
//! bodies with the routers' [`Prompter`] so it parses, renders chat and tokenizes exactly as
//! the routers do (their KV lookups then find the blocks its events announce).
//!
//! - [`WorkerArgs`] / [`run`]: the `worker` subcommand: router-sim's arguments plus
//!   `--tokenizer-config` (a node config whose `[tokenizer]` the worker uses).
//! - [`sim_config`]: a [`SimConfig`] reading bodies with the default prompter (tiktoken
//!   `o200k_base`, plain chat rendering), its request spans parented on the caller's
//!   `traceparent`.
//! - Telemetry: warnings on stderr, and spans exported as the standard `OTEL_*` variables
//!   say (the node's telemetry); each request's `worker.generate` span is a child of the
//!   caller's `traceparent` (router-sim's `SimConfig::trace_parent`).

use clap::Args;
use router_sim::worker::cmd::Hooks;
use router_sim::worker::{PromptReader, SimConfig};
use router_tokenizer::Prompter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// The arguments of `router-tools worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub sim: router_sim::worker::cmd::SimArgs,
    /// A router node config (TOML) whose `[tokenizer]` section this worker uses, so it
    /// tokenizes and renders chat exactly like the routers (default: tiktoken o200k_base and
    /// the plain chat rendering, the routers' default).
    #[arg(long, value_name = "NODE_TOML")]
    pub tokenizer_config: Option<PathBuf>,
}

/// Runs `router-tools worker` until Ctrl-C or SIGTERM (exit codes: router-sim's `cmd`).
/// Warnings go to stderr; spans are exported when the standard
/// `OTEL_*` variables (or `SWITCHYARD_OTLP_ENDPOINT`) name an OTLP endpoint, each request's
/// `worker.generate` span a child of the caller's `traceparent`.
pub fn run(args: &WorkerArgs) -> ExitCode {
    let load = || -> Result<Arc<dyn PromptReader>, String> {
        let prompter = match &args.tokenizer_config {
            None => Prompter::default(),
            Some(path) => router_node::config::Config::load(Some(path))
                .and_then(|c| c.prompter())
                .map_err(|e| format!("--tokenizer-config: {e}"))?,
        };
        Ok(Arc::new(prompter))
    };
    let telemetry = || -> Result<Box<dyn std::any::Any + Send>, String> {
        let section = router_node::config::TelemetrySection {
            log_filter: "warn".to_owned(),
            ..router_node::config::TelemetrySection::default()
        };
        let guard = router_node::telemetry::init(&section).map_err(|e| e.to_string())?;
        Ok(Box::new(guard))
    };
    let hooks = Hooks {
        telemetry: Some(&telemetry),
        trace_parent: Some(router_node::telemetry::propagation::set_remote_parent),
    };
    router_sim::worker::cmd::run_with(&args.sim, &load, &hooks)
}

/// The default simulated worker, reading bodies like a default router node's frontend and
/// parenting its request spans on the caller's `traceparent`.
pub fn sim_config() -> SimConfig {
    SimConfig {
        prompts: Arc::new(Prompter::default()),
        trace_parent: Some(router_node::telemetry::propagation::set_remote_parent),
        ..SimConfig::default()
    }
}
