//! The simulated worker's HTTP API (see the module doc of `worker` for the JSON): the shared
//! state, the route table and the error answers, plus the small routes (`/v1/models`,
//! `/health`, `/load`).
//!
//! - `generate.rs`: the two OpenAI routes, from body to engine submission.
//! - `reply.rs`: the OpenAI answers: one JSON body, or SSE events as tokens arrive.
//! - `kv_transfer.rs`: prefill/decode KV hand-over: the `kv_transfer_params` and SGLang
//!   bootstrap fields, the pull routes a prefill worker serves, and the pulls a decode worker
//!   makes.

mod generate;
mod kv_transfer;
mod reply;

use super::engine_task::EngineHandle;
use super::prompt::BadRequest;
use super::{SimConfig, role_name};
use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::{ListenerExt as _, TapIo};
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::{TcpListener, TcpStream};

/// Largest accepted request body.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// The filler text of one generated token.
pub const TOKEN_TEXT: &str = "tok ";

#[derive(Clone)]
pub(super) struct WorkerState {
    engine: EngineHandle,
    cfg: Arc<SimConfig>,
    host: Arc<str>,
    port: u16,
    http: reqwest::Client,
    pull_failures: Arc<AtomicU64>,
}

impl WorkerState {
    pub(super) fn new(
        engine: EngineHandle,
        cfg: SimConfig,
        host: String,
        port: u16,
        http: reqwest::Client,
    ) -> Self {
        Self {
            engine,
            cfg: Arc::new(cfg),
            host: host.into(),
            port,
            http,
            pull_failures: Arc::new(AtomicU64::new(0)),
        }
    }
}

pub(super) fn app(state: WorkerState) -> Router {
    Router::new()
        .route("/v1/completions", post(generate::completions))
        .route("/v1/chat/completions", post(generate::chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/load", get(load))
        .route("/v1/kv/pull/{request_id}", post(kv_transfer::pull))
        .route("/v1/kv/bootstrap/{room}", post(kv_transfer::bootstrap))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// `listener` with `TCP_NODELAY` on every accepted connection: SSE events go out in small
/// writes, which Nagle's algorithm would hold back for the peer's delayed ACK.
pub(super) fn nodelay(listener: TcpListener) -> TapIo<TcpListener, fn(&mut TcpStream)> {
    fn set(stream: &mut TcpStream) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
    }
    listener.tap_io(set as fn(&mut TcpStream))
}

fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"message": message.into(), "type": kind, "code": status.as_u16()}})),
    )
        .into_response()
}

fn engine_gone() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "engine_stopped",
        "the simulated engine has stopped",
    )
}

/// Why a request was refused before the engine ran it. Answered in the router frontend's
/// error shape (`{"error": {"message", "type", "class", "stage", "reason"}}`), so a client
/// reads a worker's 400 as it reads the router's.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    /// A malformed request (400, reason `invalid_body`).
    #[error(transparent)]
    Bad(#[from] BadRequest),
    /// Our own inconsistency (500), with its stable reason.
    #[error("{message}")]
    Internal {
        reason: &'static str,
        message: String,
    },
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, kind, stage, reason) = match &self {
            Self::Bad(_) => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "request",
                "invalid_body",
            ),
            Self::Internal { reason, .. } => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "admission",
                *reason,
            ),
        };
        let body = json!({"error": {"message": self.to_string(), "type": kind,
                                    "class": null, "stage": stage, "reason": reason}});
        (status, Json(body)).into_response()
    }
}

/// A 400 naming `field`.
fn bad(field: &str, why: impl std::fmt::Display) -> Refusal {
    Refusal::Bad(BadRequest::field(field, why))
}

/// The base model, then its adapters with `parent`, as vLLM lists them.
async fn models(State(state): State<WorkerState>) -> Json<Value> {
    let max_model_len = state.cfg.max_model_len;
    let base = &state.cfg.model;
    let data: Vec<Value> = std::iter::once((base, None))
        .chain(state.cfg.loras.iter().map(|l| (l, Some(base))))
        .map(|(id, parent)| {
            json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard-sim",
                   "parent": parent, "max_model_len": max_model_len})
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

#[derive(Serialize)]
struct LoadBody {
    worker_id: u64,
    role: &'static str,
    #[serde(flatten)]
    load: super::LoadReport,
}

async fn load(State(state): State<WorkerState>) -> Response {
    match state.engine.load().await {
        Ok(mut load) => {
            load.pull_failures = state.pull_failures.load(Ordering::Relaxed);
            Json(LoadBody {
                worker_id: state.cfg.worker_id.0,
                role: role_name(state.cfg.role),
                load,
            })
            .into_response()
        }
        Err(_) => engine_gone(),
    }
}
