//! The OpenAI-compatible HTTP frontend of a router node (axum).
//!
//! One request's path: `auth` checks its API key when the node has keys (401 without a
//! valid one; the key's classes and rates: 403, 429), `handlers` reads the body under a size
//! limit and a read timeout, `openai` parses it (prompt, chat messages, `max_tokens`,
//! `stream`), `limits` checks it before any work in proportion to its size, then a
//! concurrency permit is taken and the prompt tokenized; `classify` picks the class once,
//! before any hop (the profile's `[[classifiers]]`, or the `x-policy-class` header, else the
//! default); the pool's `RouterHandle::route` admits or rejects it; `proxy` looks up the
//! admitted worker's endpoint in the [`WorkerDirectory`], forwards the body with
//! `stream: true`, tells the router `prefill_done` at the first upstream chunk and streams the
//! chunks back (or assembles one JSON body for a non-streaming client). A
//! [`proxy::BookingGuard`] owned by the response releases the booking however the request
//! ends, including at the request's deadline. Every error is a JSON body built in `error`.
//!
//! Two listeners, each served by `server` under its connection limits: the public one
//! ([`app`]: the OpenAI API, `/health`, `/ready`) and the admin one ([`admin_app`]:
//! `/metrics`, the node's Prometheus text from `crate::metrics`, `/debug/state`, `/health`,
//! `/ready`; optionally behind a bearer token).
//!
//! With a paired decode pool ([`AppState::with_decode`]) a request runs a prefill leg and a
//! decode leg instead (`disagg`).
//!
//! Files: `mod.rs` (state, the apps and `serve`), `limits.rs` (the [`Limits`], the checks
//! before tokenizing and the request's [`Deadline`]), `server.rs` (a listener's accept loop:
//! connection cap, header timeout, graceful shutdown), `admin.rs` (the admin app, its token
//! and the probes), `auth.rs` (API keys: authentication, entitlements, rate limits),
//! `handlers.rs`, `openai.rs` (the parsed request and the worker's body), `classify.rs` (the
//! request's class from the profile's classifiers), `admit.rs`, `proxy.rs`, `disagg/`,
//! `error.rs`, `upstream.rs` (the upstream legs' HTTP client: hyper's, pooled),
//! `upstream_url.rs` (the workers' route URLs, parsed once), `timer.rs` (hyper's timer for
//! the listeners: a deadline that passed while the node was stopped gets a grace). The
//! tokenizer and chat rendering are router-tokenizer's [`Prompter`].

mod admin;
mod admit;
mod assemble;
mod assembled;
mod auth;
mod breaker;
mod classify;
mod disagg;
mod error;
mod handlers;
mod key_errors;
mod limits;
mod openai;
mod placement;
mod pools;
mod proxy;
mod server;
mod timer;
mod upstream;
mod upstream_url;

pub use crate::metrics::Metrics;
pub use admin::{AdminToken, admin_app};
#[cfg(test)]
pub(crate) use assemble::SseAssembler;
pub use classify::{ClassifierCounts, RuleCounts};
pub use disagg::{DisaggConvention, PREFILL_HEADER};
pub use error::{ApiError, Stage};
pub use handlers::CLASS_HEADER;
pub use limits::{Deadline, Limits, longest_run};
pub use openai::ParsedRequest;
pub use pools::{Pool, Pools};
pub use proxy::BookingGuard;
pub use server::{ConnectionLimits, serve_app};
pub use upstream::{UpstreamClient, UpstreamError};

use crate::auth::KeyStore;
use axum::Router;
use axum::routing::{get, post};
use router_actors::registry::ServedModel;
use router_actors::{Liveness, RouterHandle};
use router_core::{PolicyProfile, WorkerId};
use router_tokenizer::{Prompter, TokenizeGate};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// Where each worker's OpenAI API lives. The worker registry actor implements it; tests use
/// [`StaticDirectory`].
pub trait WorkerDirectory: Send + Sync {
    /// Base URL of the worker's OpenAI API (`http://host:port`, no trailing `/v1`).
    fn endpoint(&self, worker: WorkerId) -> Option<String>;

    /// Every worker it knows (to place a request anywhere but some workers). `None`: it
    /// cannot list them (placement then cannot avoid a failing worker).
    fn workers(&self) -> Option<Vec<WorkerId>> {
        None
    }

    /// The longest sequence every worker takes (the shortest context length they
    /// announced), when any announced one: the prompt limit without `http.max_prompt_tokens`.
    fn max_model_len(&self) -> Option<u64> {
        None
    }

    /// The models and LoRA adapters the live workers serve, sorted by name (`/v1/models`;
    /// a request whose `model` is an adapter goes only where it is loaded).
    fn served_models(&self) -> Vec<ServedModel> {
        Vec::new()
    }

    /// Whether some live worker serves `model` (a base model or an adapter).
    fn serves_model(&self, model: &str) -> bool {
        self.served_models().iter().any(|m| m.id == model)
    }

    /// Whether `model` is a LoRA adapter some live worker serves.
    fn is_adapter(&self, model: &str) -> bool {
        self.served_models()
            .iter()
            .any(|m| m.adapter && m.id == model)
    }
}

/// A fixed map from worker to base URL.
#[derive(Debug, Clone, Default)]
pub struct StaticDirectory(pub HashMap<WorkerId, String>);

impl WorkerDirectory for StaticDirectory {
    fn endpoint(&self, worker: WorkerId) -> Option<String> {
        self.0.get(&worker).cloned()
    }

    fn workers(&self) -> Option<Vec<WorkerId>> {
        Some(self.0.keys().copied().collect())
    }
}

/// Everything a handler needs. Cheap to clone (handles and `Arc`s).
#[derive(Clone)]
pub struct AppState {
    /// The pool's router; with `decode` set, the prefill pool's (the admission gate).
    pub router: RouterHandle,
    /// The paired decode pool: requests then run a prefill and a decode leg (`disagg`).
    pub decode: Option<RouterHandle>,
    /// How the two legs of a disaggregated request meet (vLLM or SGLang, see `disagg`).
    pub convention: DisaggConvention,
    /// Conditional disaggregation: when a disaggregated request is prefilled by its decode
    /// worker (`disagg/local.rs`; off by default).
    pub local_prefill: router_core::LocalPrefillRule,
    pub directory: Arc<dyn WorkerDirectory>,
    /// The HTTP client of the upstream legs.
    pub http: UpstreamClient,
    /// The workers' route URLs, parsed once per endpoint.
    pub(crate) upstream_urls: Arc<upstream_url::UpstreamUrls>,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<Limits>,
    /// The pool's policy profile: the classifiers, class names for metric labels and error
    /// bodies.
    pub profile: Arc<PolicyProfile>,
    /// Classifier decisions per rule, shown by `/debug/state`.
    pub classified: Arc<ClassifierCounts>,
    /// Model names `GET /v1/models` lists besides what the workers announce
    /// (`http.models`).
    pub models: Arc<[String]>,
    /// `GET /ready` answers 200 while this says `true`.
    pub ready: watch::Receiver<bool>,
    /// `GET /health` answers 503, with the reason, once this is `Failed` (the node's
    /// supervisor gave up, or a required actor or task is gone: `Node::alive`). Always alive
    /// unless set with [`AppState::with_alive`].
    pub alive: watch::Receiver<Liveness>,
    /// One permit per OpenAI request in progress (`limits.max_concurrent_requests`).
    pub permits: Arc<Semaphore>,
    /// The tokenizer and chat rendering (default: tiktoken o200k_base, plain rendering),
    /// under [`Self::tokenize_gate`].
    pub prompter: Prompter,
    /// Text prompts tokenized at once across the node (one per core by default): a request
    /// that gets no slot within `limits::tokenize_wait` is a 503 `tokenizer_saturated`.
    pub tokenize_gate: TokenizeGate,
    /// A completion's text prompt goes to the worker as the router's token ids
    /// (`[tokenizer] forward_token_ids`; default off).
    pub forward_token_ids: bool,
    /// Whether the node's bus connection is up (`/ready` says so in its body). `None`: no
    /// bus to lose (a frontend without a node).
    pub bus_connected: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    /// Workers that refused connections: a request is retried once elsewhere, and a worker
    /// that keeps refusing is ejected for a while (`breaker`).
    pub breaker: Arc<breaker::WorkerBreaker>,
    /// The API keys (`auth.rs`); `None`: open, every client may use every class.
    pub auth: Option<Arc<KeyStore>>,
    /// The node's pools, one per model (`pools.rs`): a request runs with its model's pool's
    /// router, tokenizer and directory in place of the fields above. `None`: one pool, the
    /// fields above.
    pub pools: Option<Arc<Pools>>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("limits", &self.limits)
            .field("models", &self.models)
            .field("tokenizer", &self.prompter.tokenizer().describe())
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// A state with fresh metrics and an upstream client built from `limits`.
    pub fn new(
        router: RouterHandle,
        directory: Arc<dyn WorkerDirectory>,
        profile: PolicyProfile,
        limits: Limits,
        ready: watch::Receiver<bool>,
    ) -> Self {
        let gate = TokenizeGate::per_core();
        Self {
            permits: Arc::new(Semaphore::new(limits.max_concurrent_requests)),
            router,
            decode: None,
            convention: DisaggConvention::default(),
            local_prefill: router_core::LocalPrefillRule::default(),
            directory,
            http: limits.http_client(),
            upstream_urls: Arc::default(),
            metrics: Arc::new(Metrics::new()),
            limits: Arc::new(limits),
            profile: Arc::new(profile),
            classified: Arc::default(),
            models: Arc::from(Vec::new()),
            ready,
            alive: watch::channel(Liveness::Alive).1,
            prompter: Prompter::default().with_gate(gate.clone()),
            tokenize_gate: gate,
            forward_token_ids: false,
            bus_connected: None,
            breaker: Arc::new(breaker::WorkerBreaker::default()),
            auth: None,
            pools: None,
        }
    }

    /// Requires an API key of `keys` on the OpenAI routes (and `/v1/models`).
    pub fn with_auth(mut self, keys: Arc<KeyStore>) -> Self {
        self.metrics.auth_keys(keys.keys().len());
        self.auth = Some(keys);
        self
    }

    /// Reports the bus connection in `/ready`'s body.
    pub fn with_bus_status(mut self, connected: Arc<dyn Fn() -> bool + Send + Sync>) -> Self {
        self.bus_connected = Some(connected);
        self
    }

    /// Fails `/health` once `alive` is `Failed` (pass `Node::alive()`).
    pub fn with_alive(mut self, alive: watch::Receiver<Liveness>) -> Self {
        self.alive = alive;
        self
    }

    /// Runs every request disaggregated: `router` is the prefill pool's, `decode` the
    /// paired decode pool's (the directory must know both pools' workers).
    pub fn with_decode(mut self, decode: RouterHandle) -> Self {
        self.decode = Some(decode);
        self
    }

    /// Sets when a disaggregated request is prefilled by its decode worker.
    pub fn with_local_prefill(mut self, rule: router_core::LocalPrefillRule) -> Self {
        self.local_prefill = rule;
        self
    }

    /// Sets the P/D convention of the disaggregated path (default: vLLM's).
    pub fn with_convention(mut self, convention: DisaggConvention) -> Self {
        self.convention = convention;
        self
    }

    /// Sets the tokenizer and chat rendering.
    pub fn with_prompter(mut self, prompter: Prompter) -> Self {
        self.prompter = prompter.with_gate(self.tokenize_gate.clone());
        self
    }

    /// Bounds the node's concurrent tokenizer work by `gate` instead of one slot per core.
    pub fn with_tokenize_gate(mut self, gate: TokenizeGate) -> Self {
        self.prompter = self.prompter.with_gate(gate.clone());
        self.tokenize_gate = gate;
        self
    }

    /// Sends a completion's text prompt to the worker as the router's token ids, so the
    /// engine does not tokenize it again (the engine must tokenize as the prompter does).
    pub fn with_forward_token_ids(mut self, on: bool) -> Self {
        self.forward_token_ids = on;
        self
    }

    /// Sets the model list served by `GET /v1/models`.
    pub fn with_models(mut self, models: impl IntoIterator<Item = String>) -> Self {
        self.models = models.into_iter().collect();
        self
    }

    /// Routes each request by its `model` through `pools` (their prompters under this
    /// state's tokenizer gate).
    pub fn with_pools(mut self, pools: Arc<Pools>) -> Self {
        self.pools = Some(pools);
        self
    }

    /// The state a request for `pool`'s model runs with: the pool's routers, tokenizer,
    /// directory and convention in place of this state's (every other field shared).
    pub fn for_pool(&self, pool: &Pool) -> AppState {
        AppState {
            router: pool.router.clone(),
            decode: pool.decode.clone(),
            convention: pool.convention,
            local_prefill: pool.local_prefill,
            directory: Arc::clone(&pool.directory),
            prompter: pool.prompter.clone(),
            ..self.clone()
        }
    }

    /// The name of a class id from this pool's profile (`"unknown"` for a foreign id).
    pub(crate) fn class_name(&self, id: router_core::ClassId) -> String {
        self.profile
            .classes()
            .get(id.index())
            .map_or_else(|| "unknown".to_owned(), |c| c.name.clone())
    }
}

/// The public listener's routes over `state` (shared behind one `Arc`: each request clones
/// a pointer, not the state's dozen handles): the OpenAI API, `/health` and `/ready`. The
/// operational endpoints are on the admin listener ([`admin_app`]).
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(admin::health))
        .route("/ready", get(admin::ready))
        .with_state(Arc::new(state))
}

/// The public listener's connection limits from `limits`.
pub fn public_connection_limits(limits: &Limits) -> ConnectionLimits {
    ConnectionLimits {
        max_connections: limits.max_connections,
        header_read_timeout: limits.header_read_timeout,
    }
}

/// The admin listener's connection limits: a few connections (Prometheus, probes, an
/// operator), headers as promptly as on the public one.
pub fn admin_connection_limits(limits: &Limits) -> ConnectionLimits {
    ConnectionLimits {
        max_connections: ADMIN_MAX_CONNECTIONS,
        header_read_timeout: limits.header_read_timeout,
    }
}

/// Connections open at once on the admin listener.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Serves the public app ([`app`]) on an already-bound listener until `shutdown` resolves,
/// then drains open connections. The tokenizer is built in the background as serving
/// starts.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tokio::spawn(state.prompter.clone().warm());
    let limits = public_connection_limits(&state.limits);
    let metrics = Arc::clone(&state.metrics);
    serve_app(listener, app(state), limits, metrics, "public", shutdown).await
}

/// Serves the admin app ([`admin_app`], behind `token` when given) on an already-bound
/// listener until `shutdown` resolves.
pub async fn serve_admin(
    listener: TcpListener,
    state: AppState,
    token: Option<AdminToken>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = admin_connection_limits(&state.limits);
    let metrics = Arc::clone(&state.metrics);
    serve_app(
        listener,
        admin_app(state, token),
        limits,
        metrics,
        "admin",
        shutdown,
    )
    .await
}

#[cfg(test)]
mod tests;
