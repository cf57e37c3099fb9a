//! The OpenAI-compatible HTTP frontend of a router node (axum).
//!
//! One request's path: `auth` checks its API key when the node has keys (401 without a
//! valid one; the key's classes and rates: 403, 429), `handlers` reads the body under a
//! size limit and `openai` parses it
//! (prompt, chat messages, `max_tokens`, `stream`) and tokenizes the prompt; `classify` picks
//! the class once, before any hop (the profile's `[[classifiers]]`, or the `x-policy-class`
//! header, else the default); the pool's `RouterHandle::route` admits or rejects it;
//! `proxy` looks up the admitted worker's endpoint in the [`WorkerDirectory`], forwards the
//! body with `stream: true`, tells the router `prefill_done` at the first upstream chunk and
//! streams the chunks back (or assembles one JSON body for a non-streaming client). A
//! [`proxy::BookingGuard`] owned by the response releases the booking however the request
//! ends. Every error is a JSON body built in `error`; `/metrics` serves the node's
//! Prometheus text (`crate::metrics`).
//!
//! With a paired decode pool ([`AppState::with_decode`]) a request runs a prefill leg and a
//! decode leg instead (`disagg`).
//!
//! Files: `mod.rs` (state, limits, the app and `serve`), `handlers.rs`, `auth.rs` (API
//! keys: authentication, entitlements, rate limits), `openai.rs`,
//! `classify.rs` (the request's class from the profile's classifiers), `admit.rs`, `proxy.rs`,
//! `disagg/`, `error.rs`, `prompter.rs` (the [`Prompter`]: tokenizer and chat rendering),
//! `tokenizer.rs` (the [`Tokenizer`]), `huggingface.rs` (a `tokenizer.json`), `split.rs`
//! (long text encoded in parallel pieces), `o200k.rs` (the default encoding without
//! fancy-regex), `model_dir.rs` (a model directory's tokenizer and
//! chat template), `chat_template.rs`.

mod admit;
mod assemble;
mod auth;
mod breaker;
mod chat_template;
mod classify;
mod disagg;
mod error;
mod handlers;
mod huggingface;
mod model_dir;
mod o200k;
mod openai;
mod prompter;
mod proxy;
mod split;
mod tokenizer;

pub use crate::metrics::Metrics;
#[cfg(test)]
pub(crate) use assemble::SseAssembler;
pub use chat_template::{ChatTemplate, ChatTemplateError};
pub use classify::{ClassifierCounts, RuleCounts};
pub use disagg::DisaggConvention;
pub use error::{ApiError, Stage};
pub use handlers::CLASS_HEADER;
pub use huggingface::{HuggingFaceTokenizer, SpecialTokens};
pub use model_dir::ModelDirError;
pub use openai::{Endpoint, ParsedRequest, PromptInput, render_chat, tokenize, warm_tokenizer};
pub use prompter::{INLINE_TOKENIZE_MAX_BYTES, Prompter};
pub use proxy::BookingGuard;
pub use split::{SPLIT_MIN_BYTES, pieces};
pub use tokenizer::{TiktokenEncoding, Tokenizer, TokenizerLoadError};

use crate::auth::KeyStore;
use axum::Router;
use axum::routing::{get, post};
use axum::serve::{ListenerExt as _, TapIo};
use router_actors::{Liveness, RouterHandle};
use router_core::{PolicyProfile, WorkerId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
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

/// The frontend's bounds. Every one of them is enforced; none is unlimited.
#[derive(Debug, Clone)]
pub struct Limits {
    /// OpenAI requests handled at once (parsing, waiting for admission or streaming);
    /// one more is a 429 `frontend_saturated`.
    pub max_concurrent_requests: usize,
    /// Largest accepted request body; a larger one is a 413.
    pub max_body_bytes: usize,
    /// Output tokens assumed when a request gives no `max_tokens`.
    pub default_max_tokens: u64,
    /// `max_tokens` above this is booked as this many tokens (the worker still sees the
    /// request's own value).
    pub max_expected_output_tokens: u64,
    /// Largest assembled body for a non-streaming client; beyond it the request is a 502.
    pub max_response_bytes: usize,
    /// Connecting to a worker.
    pub connect_timeout: Duration,
    /// Longest silence between two upstream reads (including before the first chunk).
    pub read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_concurrent_requests: 4096,
            max_body_bytes: 4 * 1024 * 1024,
            default_max_tokens: 256,
            max_expected_output_tokens: 32_768,
            max_response_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// An HTTP client for the upstream workers under these limits (no TLS, HTTP/1 and h2).
    pub fn http_client(&self) -> reqwest::Result<reqwest::Client> {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .read_timeout(self.read_timeout)
            .pool_max_idle_per_host(64)
            .build()
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
    pub directory: Arc<dyn WorkerDirectory>,
    pub http: reqwest::Client,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<Limits>,
    /// The pool's policy profile: the classifiers, class names for metric labels and error
    /// bodies.
    pub profile: Arc<PolicyProfile>,
    /// Classifier decisions per rule, shown by `/debug/state`.
    pub classified: Arc<ClassifierCounts>,
    /// Model names served by `GET /v1/models`.
    pub models: Arc<[String]>,
    /// `GET /ready` answers 200 while this says `true`.
    pub ready: watch::Receiver<bool>,
    /// `GET /health` answers 503, with the reason, once this is `Failed` (the node's
    /// supervisor gave up, or a required actor or task is gone: `Node::alive`). Always alive
    /// unless set with [`AppState::with_alive`].
    pub alive: watch::Receiver<Liveness>,
    /// One permit per OpenAI request in progress (`limits.max_concurrent_requests`).
    pub permits: Arc<Semaphore>,
    /// The tokenizer and chat rendering (default: tiktoken o200k_base, plain rendering).
    pub prompter: Prompter,
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
    /// A state with fresh metrics and an HTTP client built from `limits`.
    pub fn new(
        router: RouterHandle,
        directory: Arc<dyn WorkerDirectory>,
        profile: PolicyProfile,
        limits: Limits,
        ready: watch::Receiver<bool>,
    ) -> reqwest::Result<Self> {
        Ok(Self {
            permits: Arc::new(Semaphore::new(limits.max_concurrent_requests)),
            router,
            decode: None,
            convention: DisaggConvention::default(),
            directory,
            http: limits.http_client()?,
            metrics: Arc::new(Metrics::new()),
            limits: Arc::new(limits),
            profile: Arc::new(profile),
            classified: Arc::default(),
            models: Arc::from(Vec::new()),
            ready,
            alive: watch::channel(Liveness::Alive).1,
            prompter: Prompter::default(),
            forward_token_ids: false,
            bus_connected: None,
            breaker: Arc::new(breaker::WorkerBreaker::default()),
            auth: None,
        })
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

    /// Sets the P/D convention of the disaggregated path (default: vLLM's).
    pub fn with_convention(mut self, convention: DisaggConvention) -> Self {
        self.convention = convention;
        self
    }

    /// Sets the tokenizer and chat rendering.
    pub fn with_prompter(mut self, prompter: Prompter) -> Self {
        self.prompter = prompter;
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

    /// The name of a class id from this pool's profile (`"unknown"` for a foreign id).
    pub(crate) fn class_name(&self, id: router_core::ClassId) -> String {
        self.profile
            .classes()
            .get(id.index())
            .map_or_else(|| "unknown".to_owned(), |c| c.name.clone())
    }
}

/// The frontend's routes over `state` (shared behind one `Arc`: each request clones a
/// pointer, not the state's dozen handles).
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(handlers::health))
        .route("/ready", get(handlers::ready))
        .route("/metrics", get(handlers::metrics))
        .route("/debug/state", get(handlers::debug_state))
        .with_state(Arc::new(state))
}

/// `listener` with `TCP_NODELAY` set on every accepted connection. Responses go out in
/// small writes (SSE events, a streamed body after its headers); with Nagle's algorithm on,
/// each write after the first waits for the peer's delayed ACK (~40 ms on Linux).
pub fn nodelay(listener: TcpListener) -> TapIo<TcpListener, fn(&mut TcpStream)> {
    fn set(stream: &mut TcpStream) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
    }
    listener.tap_io(set as fn(&mut TcpStream))
}

/// Serves the frontend on an already-bound listener until `shutdown` resolves, then drains
/// open connections. The tokenizer is built in the background as serving starts.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tokio::spawn(state.prompter.clone().warm());
    axum::serve(nodelay(listener), app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests;
