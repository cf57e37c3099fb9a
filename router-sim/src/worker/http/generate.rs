//! The two OpenAI routes of the simulated worker: read the body with the worker's
//! [`PromptReader`](crate::worker::PromptReader), read the worker's own fields (`cache_salt`,
//! the KV hand-over fields), pull staged KV when this is a decode leg, submit the sequence
//! to the engine and answer as it runs (`reply`), all under a `worker.generate` span.

use super::kv_transfer::{
    BOOTSTRAP_WAIT, Bootstrap, Transfer, bootstrap_pull, parse_bootstrap, parse_transfer, pull_kv,
    room_id,
};
use super::reply::{CancelGuard, Reply, collect_response, stream_response};
use super::{Refusal, WorkerState, bad, engine_gone};
use crate::engine::BlockScope;
use crate::engine::{Role, SubmitError};
use crate::worker::prompt::PromptRequest;
use crate::worker::{role_name, seq_request};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use router_core::Endpoint;
use router_core::HashScope;
use router_core::RequestId;
use router_core::hashing::token_sequence_hashes;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use tracing::Instrument as _;

pub(super) async fn completions(
    State(state): State<WorkerState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    generate(state, Endpoint::Completions, &headers, body).await
}

pub(super) async fn chat_completions(
    State(state): State<WorkerState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    generate(state, Endpoint::Chat, &headers, body).await
}

/// One request under its `worker.generate` span (a child of the caller's trace context when
/// the worker is configured to read it), which lasts until the answer ends: the response
/// (its stream, when streaming) holds it.
async fn generate(
    state: WorkerState,
    route: Endpoint,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let span = tracing::info_span!(
        "worker.generate",
        otel.kind = "server",
        worker = state.cfg.worker_id.0,
        role = role_name(state.cfg.role),
        http.route = route.path(),
        prompt_tokens = tracing::field::Empty,
        staged_prefix = tracing::field::Empty,
    );
    if let Some(set_parent) = state.cfg.trace_parent {
        set_parent(&span, headers);
    }
    match try_generate(state, route, body, span.clone())
        .instrument(span)
        .await
    {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn try_generate(
    state: WorkerState,
    route: Endpoint,
    body: Bytes,
    span: tracing::Span,
) -> Result<Response, Refusal> {
    let request = state.cfg.prompts.read(route, &body).await?;
    drop(body);
    let max_tokens = match request.max_tokens {
        None => state.cfg.default_max_tokens,
        Some(n) => u32::try_from(n).map_err(|_| bad("max_tokens", "must be at most 4294967295"))?,
    };
    let scope = block_scope(&state, &request)?;
    let transfer = parse_transfer(&request.body)?;
    let bootstrap = parse_bootstrap(&request.body)?;
    let tokens = request.tokens;
    let prompt_tokens = tokens.len();
    if prompt_tokens as u64 > state.cfg.max_model_len {
        return Err(bad(
            "prompt",
            format!(
                "this model's maximum context length is {} tokens; the prompt has {prompt_tokens}",
                state.cfg.max_model_len
            ),
        ));
    }
    let is_prefill = state.cfg.role == Role::Prefill;
    // SGLang: a prefill worker stages the KV under the room (its id names the room).
    let room = bootstrap.as_ref().filter(|_| is_prefill).map(|b| b.room);
    let id = room.map_or_else(|| RequestId(uuid::Uuid::now_v7()), room_id);
    let stage = is_prefill && (transfer == Transfer::RemoteDecode || room.is_some());
    let pulled = if is_prefill {
        None
    } else {
        pull_staged(&state, bootstrap.as_ref(), &transfer).await?
    };
    let staged_prefix = match pulled {
        Some(true) => Some(prompt_tokens),
        Some(false) => {
            state.pull_failures.fetch_add(1, Ordering::Relaxed);
            None
        }
        None => None,
    };
    span.record("prompt_tokens", prompt_tokens);
    span.record("staged_prefix", staged_prefix.is_some());
    let transfer_params = (stage && transfer == Transfer::RemoteDecode)
        .then(|| staged_params(&state, &tokens, scope.hash_scope(), id));
    let req = seq_request(id, tokens, max_tokens, scope, staged_prefix);
    let deliveries = match state.engine.submit(req, stage).await {
        Err(_) => return Ok(engine_gone()),
        Ok(Err(e)) => return Err(submit_error(&e)),
        Ok(Ok(rx)) => rx,
    };
    let guard = CancelGuard {
        engine: state.engine.clone(),
        id,
        armed: true,
        _span: span,
    };
    let reply = Reply {
        route,
        completion_id: format!(
            "{}-{}",
            match route {
                Endpoint::Completions => "cmpl",
                Endpoint::Chat => "chatcmpl",
            },
            id.0.simple()
        ),
        created: router_actors::wire::now_us() / 1_000_000,
        model: request.model,
        prompt_tokens,
        transfer: transfer_params,
    };
    if request.stream {
        Ok(stream_response(reply, deliveries, guard))
    } else {
        Ok(collect_response(reply, deliveries, guard).await)
    }
}

/// What the request's blocks are hashed under: its LoRA (when `model` names a served one)
/// and its `cache_salt`.
fn block_scope(state: &WorkerState, request: &PromptRequest) -> Result<BlockScope, Refusal> {
    let salt = match request.body.get("cache_salt") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(bad("cache_salt", "must be a string")),
    };
    let lora = state
        .cfg
        .loras
        .iter()
        .find(|l| **l == request.model)
        .cloned();
    Ok(BlockScope { lora, salt })
}

/// The `kv_transfer_params` a staging prefill answers with (vLLM convention): where and
/// under which id the decode side pulls the prompt's KV.
fn staged_params(
    state: &WorkerState,
    tokens: &[u32],
    scope: HashScope<'_>,
    id: RequestId,
) -> Value {
    let block_ids: Vec<u64> = token_sequence_hashes(tokens, state.cfg.block_size, scope)
        .into_iter()
        .map(|h| h.0)
        .collect();
    json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": state.cfg.worker_id.to_string(),
        "remote_block_ids": block_ids,
        "remote_host": &*state.host,
        "remote_port": state.port,
        "request_id": id.0.to_string(),
        "tp_size": 1,
    })
}

/// A decode leg takes the prompt's staged KV from its prefill worker: SGLang's bootstrap
/// room when given, else vLLM's `kv_transfer_params`. `None`: nothing to pull; `Some(false)`:
/// the pull failed (the prompt is then recomputed).
async fn pull_staged(
    state: &WorkerState,
    bootstrap: Option<&Bootstrap>,
    transfer: &Transfer,
) -> Result<Option<bool>, Refusal> {
    if let Some(b) = bootstrap {
        // SGLang: the KV of the room, once the prefill worker has staged it.
        let Some((host, port)) = &b.peer else {
            return Err(bad(
                "bootstrap_host",
                "a decode worker needs bootstrap_host and bootstrap_port with bootstrap_room",
            ));
        };
        let wait = BOOTSTRAP_WAIT.min(state.cfg.pull_timeout);
        return Ok(Some(
            bootstrap_pull(&state.http, host, *port, b.room, wait).await,
        ));
    }
    Ok(match transfer {
        Transfer::RemotePrefill {
            host,
            port,
            request_id,
        } => Some(pull_kv(&state.http, host, *port, request_id).await),
        _ => None,
    })
}

fn submit_error(e: &SubmitError) -> Refusal {
    match e {
        SubmitError::EmptyPrompt(_) => bad("prompt", "must not be empty"),
        SubmitError::NoTokens(_) => bad("max_tokens", "must be at least 1"),
        SubmitError::TooLarge {
            needed, capacity, ..
        } => bad(
            "prompt",
            format!("with max_tokens needs {needed} KV blocks, the engine has {capacity}"),
        ),
        SubmitError::Duplicate(_) => Refusal::Internal {
            reason: "duplicate_request",
            message: e.to_string(),
        },
    }
}
