//! `router-node worker --sim`: router-sim's simulated worker as the node runs it, reading
//! request bodies with the frontend's [`Prompter`] so it parses, renders chat and tokenizes
//! exactly as the routers do (their KV lookups then find the blocks its events announce).
//!
//! - [`WorkerArgs`] / [`run`]: the `worker` subcommand: router-sim's arguments plus
//!   `--tokenizer-config` (a node config whose `[tokenizer]` the worker uses).
//! - [`sim_config`]: a [`SimConfig`] reading bodies with the frontend's default prompter
//!   (tiktoken `o200k_base`, plain chat rendering); [`prompts`] for another prompter.
//! - `Prompter` implements [`PromptReader`]: the frontend's 400s become the worker's.
//! - Telemetry: warnings on stderr, and spans exported as the standard `OTEL_*` variables
//!   say (`crate::telemetry`); each request's `worker.generate` span is a child of the
//!   caller's `traceparent` (router-sim's `SimConfig::trace_parent`, set by [`sim_config`]).

use crate::frontend::{Endpoint, Prompter};
use clap::Args;
use futures::future::BoxFuture;
use router_sim::worker::cmd::Hooks;
use router_sim::worker::{BadRequest, PromptReader, PromptRequest, Route, SimConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// The arguments of `router-node worker`.
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

/// Runs `router-node worker` until Ctrl-C or SIGTERM (exit codes: router-sim's `cmd`).
/// Warnings go to stderr; spans are exported when the standard
/// `OTEL_*` variables (or `SWITCHYARD_OTLP_ENDPOINT`) name an OTLP endpoint, each request's
/// `worker.generate` span a child of the caller's `traceparent`.
pub fn run(args: &WorkerArgs) -> ExitCode {
    let load = || -> Result<Arc<dyn PromptReader>, String> {
        let prompter = match &args.tokenizer_config {
            None => Prompter::default(),
            Some(path) => crate::config::Config::load(Some(path))
                .and_then(|c| c.prompter())
                .map_err(|e| format!("--tokenizer-config: {e}"))?,
        };
        Ok(prompts(prompter))
    };
    let telemetry = || -> Result<Box<dyn std::any::Any + Send>, String> {
        let section = crate::config::TelemetrySection {
            log_filter: "warn".to_owned(),
            ..crate::config::TelemetrySection::default()
        };
        let guard = crate::telemetry::init(&section).map_err(|e| e.to_string())?;
        Ok(Box::new(guard))
    };
    let hooks = Hooks {
        telemetry: Some(&telemetry),
        trace_parent: Some(crate::telemetry::propagation::set_remote_parent),
    };
    router_sim::worker::cmd::run_with(&args.sim, &load, &hooks)
}

/// `prompter` as a simulated worker's body reader.
pub fn prompts(prompter: Prompter) -> Arc<dyn PromptReader> {
    Arc::new(prompter)
}

/// The default simulated worker, reading bodies like a default router node's frontend and
/// parenting its request spans on the caller's `traceparent`.
pub fn sim_config() -> SimConfig {
    SimConfig {
        prompts: prompts(Prompter::default()),
        trace_parent: Some(crate::telemetry::propagation::set_remote_parent),
        ..SimConfig::default()
    }
}

impl PromptReader for Prompter {
    fn read<'a>(
        &'a self,
        route: Route,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<PromptRequest, BadRequest>> {
        Box::pin(async move {
            let endpoint = match route {
                Route::Completions => Endpoint::Completions,
                Route::Chat => Endpoint::Chat,
            };
            let request = self
                .parse(endpoint, body)
                .map_err(|e| BadRequest(e.message))?;
            let tokens = self.tokenize_for(endpoint, request.prompt).await;
            Ok(PromptRequest {
                model: request.model,
                tokens,
                max_tokens: request.max_tokens,
                stream: request.stream,
                body: request.body,
            })
        })
    }

    fn warm(&self) -> BoxFuture<'static, ()> {
        Box::pin(self.clone().warm())
    }
}
