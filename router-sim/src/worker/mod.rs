//! `worker --sim`: the simulated engine (the "mocker") behind an OpenAI-compatible HTTP API,
//! announcing itself, its KV events and its load on the bus like a real worker would.
//!
//! [`SimWorker::start`] takes an already-bound listener, a bus and a [`SimConfig`]. It owns
//! one [`Engine`] in an engine task (`engine_task`: the pass loop on tokio time) and serves
//! HTTP with axum (`http`). Bodies are parsed and tokenized by [`SimConfig::prompts`], a
//! [`PromptReader`] (`prompt`; the router node gives it its frontend's tokenizer and chat
//! rendering, so the worker counts the routers' tokens; the default [`TokenIds`] reads
//! token-id prompts only), and block hashes are scoped by adapter and salt as the router's
//! are (`router_core::HashScope`), so the KV events name the blocks the routers look
//! requests up by.
//!
//! # Routes
//!
//! - `POST /v1/completions`, `POST /v1/chat/completions`: bodies are parsed by the
//!   [`PromptReader`] (with the node's: the frontend's fields and 400s naming the field).
//!   Extra fields read here: `cache_salt` (string; with `model` naming one of the configured
//!   LoRAs it namespaces the hashes) and `kv_transfer_params` (below). `max_tokens` defaults
//!   to [`SimConfig::default_max_tokens`]. Every request generates exactly `max_tokens`
//!   tokens of filler text, `"tok "` per token, `finish_reason: "length"`.
//!   - `stream: true`: SSE. Per token one event
//!     `data: {"id","object":"text_completion","created","model","choices":[{"index":0,"text":"tok ","finish_reason":null}]}`
//!     (chat: `"object":"chat.completion.chunk"` and `"delta":{"content":"tok "}`, the first
//!     delta also has `"role":"assistant"`); then one final event with empty text (chat: an
//!     empty delta), `"finish_reason":"length"` and `usage`; then `data: [DONE]`.
//!   - otherwise one JSON: `{"id","object":"text_completion","created","model",
//!     "choices":[{"index":0,"text":"tok tok ","finish_reason":"length"}],"usage":{
//!     "prompt_tokens","completion_tokens","total_tokens"}}` (chat: `"object":"chat.completion"`
//!     and `"message":{"role":"assistant","content":..}`).
//!
//!   A client that disconnects cancels its sequence (its blocks are freed at once).
//! - `GET /v1/models`, `GET /health` (`{"status":"ok"}`), `GET /load` (the engine's load and
//!   the worker's counters: [`engine_task::LoadReport`] plus `worker_id` and `role`).
//! - `POST /v1/kv/pull/{request_id}` (prefill role): the decode side took the staged KV of
//!   `request_id`; 200 `{"request_id","released":true}` frees it, 404 when it is not staged
//!   (unknown, pulled already, or expired), 400 when the id is not a UUID.
//! - `POST /v1/kv/bootstrap/{room}` (prefill role, SGLang convention): the decode side took
//!   the KV staged under bootstrap room `room` (a u64); 200 `{"bootstrap_room","released":true}`
//!   frees it, 404 when it is not staged (not yet, pulled already, or expired), 400 when
//!   `room` is not a u64.
//!
//! # Prefill / decode (vLLM `kv_transfer_params` convention)
//!
//! 1. The proxy sends the prefill worker the request with
//!    `"kv_transfer_params": {"do_remote_decode": true}` (and usually `max_tokens: 1`).
//!    A prefill engine always stops after one token. It answers as above (non-streaming JSON,
//!    or SSE whose token event is the first event) with, at the top level of the JSON / of
//!    that first event:
//!    ```json
//!    "kv_transfer_params": {
//!      "do_remote_prefill": true, "do_remote_decode": false,
//!      "remote_engine_id": "worker-7", "remote_block_ids": [<sequence hashes of the prompt's
//!      full blocks>], "remote_host": "127.0.0.1", "remote_port": 8001,
//!      "request_id": "<uuid>", "tp_size": 1
//!    }
//!    ```
//!    Its KV stays held (staged, visible as `staged` in `/load`) until the decode side pulls
//!    it or [`SimConfig::staging_timeout`] passes; then it is freed and counted as `stranded`.
//!    A prefill worker given no `do_remote_decode` runs the request and frees it at once.
//! 2. The proxy sends the decode worker the original request with those params (as vLLM's
//!    proxy does, `do_remote_prefill: true` included). The decode (or agg) worker pulls with
//!    `POST http://<remote_host>:<remote_port>/v1/kv/pull/<request_id>` and then decodes with
//!    the whole prompt staged ([`SeqRequest::staged_prefix`]): blocks, no prefill compute.
//!    A failed pull (unreachable, 404, timeout [`SimConfig::pull_timeout`]) is counted as
//!    `pull_failures` and the prompt is recomputed locally, like vLLM's recompute policy.
//!
//! # Prefill / decode (SGLang bootstrap convention)
//!
//! The proxy sends both legs at once, each body with the same three top-level fields:
//! ```json
//! "bootstrap_host": "127.0.0.1", "bootstrap_port": 8001, "bootstrap_room": 1234567890123
//! ```
//! (host and port: the prefill worker's HTTP address, where this simulator serves its
//! bootstrap; room: a u64 naming the request on both sides).
//!
//! 1. A prefill-role worker given `bootstrap_room` runs the request (usually `max_tokens: 1`)
//!    and stages its KV under the room, then answers as usual (no `kv_transfer_params`).
//!    Unpulled staged KV is freed after [`SimConfig::staging_timeout`] (`stranded`). A room
//!    already in flight on this worker is a 500 `duplicate_request`.
//! 2. A decode (or agg) worker given all three fields pulls with
//!    `POST http://<bootstrap_host>:<bootstrap_port>/v1/kv/bootstrap/<bootstrap_room>`,
//!    retrying every 10 ms while the answer is 404 or the connection fails (the prefill may
//!    still be running) for at most 2 s (and at most [`SimConfig::pull_timeout`]); then it
//!    decodes with the whole prompt staged. A pull that never succeeds is counted in
//!    `pull_failures` and the prompt is recomputed. `bootstrap_room` without host and port
//!    is a 400 on a non-prefill worker.
//!
//! The modelled KV transfer takes no time (the reference's bandwidth model is not applied).
//!
//! # Bus
//!
//! On start and every [`SimConfig::heartbeat`] the worker announces itself through a
//! [`WorkerLink`] (`workers.<pool>.announce`: spec from the config, endpoint
//! `http://<bound addr>` unless [`SimConfig::advertise`]), publishes each pass's KV events
//! on `kv.<pool>.events` and its load ([`WorkerLoad`]) on `workers.<pool>.load` every
//! heartbeat.

pub mod cmd;
mod engine_task;
mod http;
mod prompt;

pub use engine_task::{
    COMMAND_CAPACITY, DELIVERY_CAPACITY, Delivery, EngineGone, EngineHandle, LoadReport,
};
pub use prompt::{BadRequest, PromptReader, PromptRequest, TokenIds};

use crate::engine::{Engine, EngineConfig, Role, SeqRequest};
use router_actors::WorkerLink;
use router_actors::bus::Bus;
use router_actors::wire::{Subjects, WorkerAnnounce, WorkerLoad};
use router_actors::worker_link::LinkError;
use router_core::{PoolRole, WorkerId, WorkerSpec};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Everything a simulated worker is.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub worker_id: WorkerId,
    pub role: Role,
    /// Tokens per KV block (the routers' block size must match).
    pub block_size: usize,
    pub total_kv_blocks: usize,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// The longest sequence served, in tokens (`max_model_len`): a longer prompt is a 400.
    pub max_model_len: u64,
    /// Divides every modelled duration (not a positive finite number: 1).
    pub speedup: f64,
    /// Every pass takes no time: tokens are handed out as soon as a pass is computed (the
    /// engine still schedules, books KV and publishes events). For measuring the router's
    /// own overhead; `speedup` is then unused.
    pub instant: bool,
    /// The base model served (`/v1/models`).
    pub model: String,
    /// LoRA adapters served too (announced; a request whose `model` names one is namespaced).
    pub loras: Vec<String>,
    /// Adapters loaded at once (0: any number, loaded for free); a load takes
    /// `engine::timing::LORA_LOAD_MS`.
    pub max_loras: usize,
    /// With `max_loras`: the adapters running and the slots go out with the load reports,
    /// as vLLM's `vllm:lora_requests_info` says them (the routers prefer where an adapter
    /// runs).
    pub report_adapters: bool,
    /// The bus subject prefix.
    pub cluster: String,
    pub heartbeat: Duration,
    /// Routers drop the worker when no announcement arrives for this long.
    pub lease: Duration,
    /// How long staged KV waits for a pull (prefill role).
    pub staging_timeout: Duration,
    /// Output tokens of a request without `max_tokens`.
    pub default_max_tokens: u32,
    /// Longest a decode worker waits for a pull.
    pub pull_timeout: Duration,
    /// The base URL to announce instead of `http://<bound addr>`.
    pub advertise: Option<String>,
    /// Parses bodies and tokenizes prompts; must tokenize as the routers do for their
    /// hashes to match (default: [`TokenIds`], token-id prompts only).
    pub prompts: Arc<dyn PromptReader>,
    /// Makes the caller's W3C trace context (`traceparent` in the request headers) the
    /// parent of each request's `worker.generate` span (default: none; the router node
    /// passes its OpenTelemetry propagation).
    pub trace_parent: Option<TraceParent>,
}

/// Sets a span's parent from a request's headers (see [`SimConfig::trace_parent`]).
pub type TraceParent = fn(&tracing::Span, &axum::http::HeaderMap);

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            worker_id: WorkerId(1),
            role: Role::Agg,
            block_size: 16,
            total_kv_blocks: 16_384,
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            max_model_len: 262_144,
            speedup: 1.0,
            instant: false,
            model: "sim".to_owned(),
            loras: Vec::new(),
            max_loras: 0,
            report_adapters: true,
            cluster: "switchyard".to_owned(),
            heartbeat: Duration::from_secs(1),
            lease: Duration::from_secs(5),
            staging_timeout: Duration::from_secs(30),
            default_max_tokens: 16,
            pull_timeout: Duration::from_secs(5),
            advertise: None,
            prompts: Arc::new(TokenIds),
            trace_parent: None,
        }
    }
}

impl SimConfig {
    /// The pool this role announces into.
    pub fn pool(&self) -> PoolRole {
        match self.role {
            Role::Agg => PoolRole::Aggregated,
            Role::Prefill => PoolRole::Prefill,
            Role::Decode => PoolRole::Decode,
        }
    }

    fn spec(&self) -> WorkerSpec {
        WorkerSpec {
            id: self.worker_id,
            dp_start: 0,
            dp_size: 1,
            total_kv_blocks: Some(self.total_kv_blocks as u64),
            max_num_batched_tokens: Some(self.max_num_batched_tokens as u64),
            block_size: u32::try_from(self.block_size).unwrap_or(u32::MAX),
            model: Some(self.model.clone()),
            loras: self.loras.clone(),
            kv_events: true,
            max_model_len: Some(self.max_model_len),
        }
    }
}

/// The role's name as used on the command line and in `/load`.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Agg => "agg",
        Role::Prefill => "prefill",
        Role::Decode => "decode",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid worker configuration: {0}")]
    Config(String),
    #[error("cannot read the listener's address: {0}")]
    Listener(#[from] std::io::Error),
    #[error("cannot announce the worker on the bus: {0}")]
    Link(#[from] LinkError),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// A running simulated worker.
#[derive(Debug)]
pub struct SimWorker {
    addr: SocketAddr,
    endpoint: String,
    engine: Option<EngineHandle>,
    link: Option<Arc<WorkerLink>>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<std::io::Result<()>>,
    engine_task: JoinHandle<()>,
    load_task: JoinHandle<()>,
}

impl SimWorker {
    /// Starts the engine, announces the worker and serves HTTP on `listener`.
    pub async fn start(
        listener: TcpListener,
        bus: Arc<dyn Bus>,
        cfg: SimConfig,
    ) -> Result<Self, SimError> {
        if cfg.heartbeat.is_zero() {
            return Err(SimError::Config("heartbeat must be above zero".to_owned()));
        }
        let addr = listener.local_addr()?;
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            addr.ip().to_string()
        };
        let url_host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let endpoint = cfg
            .advertise
            .clone()
            .unwrap_or_else(|| format!("http://{url_host}:{}", addr.port()));
        let engine = Engine::new(EngineConfig {
            worker_id: cfg.worker_id,
            dp_rank: 0,
            block_size: cfg.block_size,
            total_kv_blocks: cfg.total_kv_blocks,
            max_num_batched_tokens: cfg.max_num_batched_tokens,
            max_num_seqs: cfg.max_num_seqs,
            speedup: cfg.speedup,
            role: cfg.role,
            staging_timeout_us: u64::try_from(cfg.staging_timeout.as_micros()).unwrap_or(u64::MAX),
            max_loras: cfg.max_loras,
        })
        .map_err(|e| SimError::Config(e.to_string()))?;
        let http_client = reqwest::Client::builder()
            .connect_timeout(cfg.pull_timeout)
            .timeout(cfg.pull_timeout)
            .build()
            .map_err(|e| SimError::Http(e.to_string()))?;
        let subjects = Subjects::new(cfg.cluster.clone());
        let announce = WorkerAnnounce {
            spec: cfg.spec(),
            pool: cfg.pool(),
            endpoint: endpoint.clone(),
            heartbeat_ms: 0,
            lease_ms: u64::try_from(cfg.lease.as_millis()).unwrap_or(u64::MAX),
            leaving: false,
        };
        let link =
            Arc::new(WorkerLink::start(bus.clone(), &subjects, announce, cfg.heartbeat).await?);
        let (handle, engine_task) = engine_task::spawn(engine, Some(link.clone()), cfg.instant);
        let load_task = tokio::spawn(publish_load(link.clone(), cfg.clone(), handle.clone()));
        let warm = cfg.prompts.warm();
        let state = http::WorkerState::new(handle.clone(), cfg, host, addr.port(), http_client);
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(warm);
        let server = tokio::spawn(async move {
            axum::serve(http::nodelay(listener), http::app(state))
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
        });
        Ok(Self {
            addr,
            endpoint,
            engine: Some(handle),
            link: Some(link),
            shutdown: Some(tx),
            server,
            engine_task,
            load_task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The announced base URL (`http://host:port`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The engine task's handle (load, cancel, ...); `None` only during shutdown.
    pub fn engine(&self) -> Option<&EngineHandle> {
        self.engine.as_ref()
    }

    /// The bus link (announcements, KV events); `None` only during shutdown.
    pub fn link(&self) -> Option<&WorkerLink> {
        self.link.as_deref()
    }

    /// Stops serving (open connections drain), stops the engine and the heartbeats.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let served = (&mut self.server).await.unwrap_or(Ok(()));
        self.load_task.abort();
        let _ = (&mut self.load_task).await;
        self.engine = None;
        if tokio::time::timeout(Duration::from_secs(1), &mut self.engine_task)
            .await
            .is_err()
        {
            self.engine_task.abort();
        }
        if let Some(link) = self.link.take().and_then(|l| Arc::try_unwrap(l).ok())
            && let Err(error) = link.shutdown().await
        {
            tracing::warn!(%error, "stopping without flushing the bus");
        }
        served
    }

    /// Serves until the server stops by itself (an accept error) or `stop` resolves.
    pub async fn run_until(
        self,
        stop: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<()> {
        let mut this = self;
        tokio::select! {
            served = &mut this.server => {
                let served = served.unwrap_or(Ok(()));
                this.load_task.abort();
                this.engine_task.abort();
                served
            }
            () = stop => this.shutdown().await,
        }
    }
}

impl Drop for SimWorker {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.load_task.abort();
    }
}

/// Publishes the engine's load on `workers.<pool>.load` every heartbeat period, through the
/// worker's link (its sender id and sequence).
async fn publish_load(link: Arc<WorkerLink>, cfg: SimConfig, engine: EngineHandle) {
    let mut ticks = tokio::time::interval(cfg.heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Ok(load) = engine.load().await else {
            return;
        };
        let body = WorkerLoad {
            worker: cfg.worker_id,
            dp_rank: 0,
            kv_used_blocks: load.engine.kv_used_blocks as u64,
            waiting: load.engine.waiting as u64,
            running: load.engine.running as u64,
            adapters: (cfg.max_loras > 0 && cfg.report_adapters).then(|| {
                router_core::AdapterResidency {
                    running: load.engine.running_adapters.clone(),
                    slots: u32::try_from(cfg.max_loras).ok(),
                }
            }),
        };
        if let Err(e) = link.publish_load(&body).await {
            tracing::debug!(error = %e, "could not publish the worker's load");
        }
    }
}

/// Builds the engine request of one HTTP request (for tests and the handlers).
fn seq_request(
    id: router_core::RequestId,
    tokens: Vec<u32>,
    max_tokens: u32,
    scope: crate::engine::BlockScope,
    staged_prefix: Option<usize>,
) -> SeqRequest {
    SeqRequest {
        id,
        tokens,
        max_tokens,
        scope,
        staged_prefix,
    }
}

#[cfg(test)]
mod tests;
