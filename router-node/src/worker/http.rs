//! The simulated worker's HTTP API (see the module doc of `worker` for the JSON).

use super::engine_task::{Delivery, EngineHandle};
use super::{SimConfig, namespace, role_name, seq_request};
use crate::engine::{Role, SubmitError};
use crate::frontend::{ApiError, Endpoint};
use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use router_core::RequestId;
use router_core::hashing::token_sequence_hashes;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// Largest accepted request body.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// The filler text of one generated token.
pub const TOKEN_TEXT: &str = "tok ";
/// SGLang convention: how long a decode worker waits for the room's KV to be staged (both
/// legs start at once), at most its pull timeout.
const BOOTSTRAP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Between two bootstrap pulls answered "not staged (yet)".
const BOOTSTRAP_RETRY: std::time::Duration = std::time::Duration::from_millis(10);
/// The high half of the request id a prefill worker stages a bootstrap room's KV under
/// (the low half is the room); never a UUID v7 of an ordinary request.
const ROOM_ID_TAG: u64 = 0x5347_4c41_4e47_0000;

/// The request id a bootstrap room's KV is staged under.
fn room_id(room: u64) -> RequestId {
    RequestId(uuid::Uuid::from_u64_pair(ROOM_ID_TAG, room))
}

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
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/load", get(load))
        .route("/v1/kv/pull/{request_id}", post(pull))
        .route("/v1/kv/bootstrap/{room}", post(bootstrap))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
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

async fn completions(State(state): State<WorkerState>, body: Bytes) -> Response {
    generate(state, Endpoint::Completions, body).await
}

async fn chat_completions(State(state): State<WorkerState>, body: Bytes) -> Response {
    generate(state, Endpoint::Chat, body).await
}

async fn models(State(state): State<WorkerState>) -> Json<Value> {
    let data: Vec<Value> = std::iter::once(&state.cfg.model)
        .chain(&state.cfg.loras)
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard-sim"}))
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

async fn pull(State(state): State<WorkerState>, Path(request_id): Path<String>) -> Response {
    let Ok(uuid) = uuid::Uuid::parse_str(&request_id) else {
        return ApiError::bad_field("request_id", "must be a UUID").into_response();
    };
    if state.cfg.role != Role::Prefill {
        return error(
            StatusCode::NOT_FOUND,
            "not_staged",
            "this worker is not a prefill worker",
        );
    }
    match state.engine.release(RequestId(uuid)).await {
        Ok(true) => Json(json!({"request_id": request_id, "released": true})).into_response(),
        Ok(false) => error(
            StatusCode::NOT_FOUND,
            "not_staged",
            format!("no staged KV for {request_id} (unknown, pulled already, or expired)"),
        ),
        Err(_) => engine_gone(),
    }
}

/// SGLang convention: the decode side took the KV staged under `room`.
async fn bootstrap(State(state): State<WorkerState>, Path(room): Path<String>) -> Response {
    let Ok(room) = room.parse::<u64>() else {
        return ApiError::bad_field("room", "must be an unsigned 64-bit integer").into_response();
    };
    if state.cfg.role != Role::Prefill {
        return error(
            StatusCode::NOT_FOUND,
            "not_staged",
            "this worker is not a prefill worker",
        );
    }
    match state.engine.release(room_id(room)).await {
        Ok(true) => Json(json!({"bootstrap_room": room, "released": true})).into_response(),
        Ok(false) => error(
            StatusCode::NOT_FOUND,
            "not_staged",
            format!("no staged KV in room {room} (not yet, pulled already, or expired)"),
        ),
        Err(_) => engine_gone(),
    }
}

/// The SGLang fields of a request (`bootstrap_room`, with `bootstrap_host` and
/// `bootstrap_port` on the decode side).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bootstrap {
    room: u64,
    /// Host and port of the prefill worker (absent on a prefill-only body).
    peer: Option<(String, u16)>,
}

fn parse_bootstrap(body: &Map<String, Value>) -> Result<Option<Bootstrap>, ApiError> {
    let room = match body.get("bootstrap_room") {
        None | Some(Value::Null) => return Ok(None),
        Some(room) => room
            .as_u64()
            .ok_or_else(|| bad("bootstrap_room", "must be an unsigned 64-bit integer"))?,
    };
    let host = match body.get("bootstrap_host") {
        None | Some(Value::Null) => None,
        Some(Value::String(h)) if !h.is_empty() => Some(h.clone()),
        Some(_) => return Err(bad("bootstrap_host", "must be a non-empty string")),
    };
    let port = match body.get("bootstrap_port") {
        None | Some(Value::Null) => None,
        Some(p) => Some(
            p.as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("bootstrap_port", "must be a port number"))?,
        ),
    };
    let peer = match (host, port) {
        (Some(host), Some(port)) => Some((host, port)),
        (None, None) => None,
        (None, Some(_)) => return Err(bad("bootstrap_host", "must be given with bootstrap_port")),
        (Some(_), None) => return Err(bad("bootstrap_port", "must be given with bootstrap_host")),
    };
    Ok(Some(Bootstrap { room, peer }))
}

/// What `kv_transfer_params` asks of this request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Transfer {
    None,
    /// Prefill leg: stage the KV for a decode worker.
    RemoteDecode,
    /// Decode leg: pull the KV from the prefill worker first.
    RemotePrefill {
        host: String,
        port: u16,
        request_id: String,
    },
}

fn bad(field: &str, why: &str) -> ApiError {
    ApiError::bad_field(field, why)
}

fn parse_transfer(body: &Map<String, Value>) -> Result<Transfer, ApiError> {
    const F: &str = "kv_transfer_params";
    let params = match body.get(F) {
        None | Some(Value::Null) => return Ok(Transfer::None),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(bad(F, "must be an object")),
    };
    let flag = |name: &str| -> Result<bool, ApiError> {
        match params.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(bad(&format!("{F}.{name}"), "must be a boolean")),
        }
    };
    let remote_decode = flag("do_remote_decode")?;
    let remote_prefill = flag("do_remote_prefill")?;
    if remote_prefill {
        let host = match params.get("remote_host") {
            Some(Value::String(h)) if !h.is_empty() => h.clone(),
            _ => {
                return Err(bad(
                    &format!("{F}.remote_host"),
                    "must be a non-empty string",
                ));
            }
        };
        let port = params
            .get("remote_port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| bad(&format!("{F}.remote_port"), "must be a port number"))?;
        let request_id = match params.get("request_id") {
            Some(Value::String(id)) if uuid::Uuid::parse_str(id).is_ok() => id.clone(),
            _ => return Err(bad(&format!("{F}.request_id"), "must be a UUID string")),
        };
        Ok(Transfer::RemotePrefill {
            host,
            port,
            request_id,
        })
    } else if remote_decode {
        Ok(Transfer::RemoteDecode)
    } else {
        Ok(Transfer::None)
    }
}

fn submit_error(e: &SubmitError) -> ApiError {
    match e {
        SubmitError::EmptyPrompt(_) => bad("prompt", "must not be empty"),
        SubmitError::NoTokens(_) => bad("max_tokens", "must be at least 1"),
        SubmitError::TooLarge {
            needed, capacity, ..
        } => bad(
            "prompt",
            &format!("with max_tokens needs {needed} KV blocks, the engine has {capacity}"),
        ),
        SubmitError::Duplicate(_) => ApiError::internal("duplicate_request", e.to_string()),
    }
}

/// Cancels the sequence when the response is dropped before the engine finished it.
struct CancelGuard {
    engine: EngineHandle,
    id: RequestId,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.engine.cancel(self.id);
        }
    }
}

/// Everything a response needs besides the tokens.
struct Reply {
    endpoint: Endpoint,
    completion_id: String,
    created: u64,
    model: String,
    prompt_tokens: usize,
    /// Set for a staging prefill request.
    transfer: Option<Value>,
}

impl Reply {
    fn object(&self, stream: bool) -> &'static str {
        match (self.endpoint, stream) {
            (Endpoint::Completions, _) => "text_completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Chat, false) => "chat.completion",
        }
    }

    /// vLLM's usage, with `prompt_tokens_details.cached_tokens`: the prompt tokens the
    /// engine found in its prefix cache.
    fn usage(&self, completion: u64, cached: u32) -> Value {
        let prompt = self.prompt_tokens as u64;
        json!({"prompt_tokens": prompt, "completion_tokens": completion,
               "total_tokens": prompt + completion,
               "prompt_tokens_details": {"cached_tokens": cached}})
    }

    fn chunk(&self, choice: Value, extra: Option<(&str, Value)>) -> bytes::Bytes {
        let mut body = json!({
            "id": self.completion_id, "object": self.object(true), "created": self.created,
            "model": self.model, "choices": [choice],
        });
        if let (Some((key, value)), Value::Object(map)) = (extra, &mut body) {
            map.insert(key.to_owned(), value);
        }
        bytes::Bytes::from(format!("data: {body}\n\n"))
    }

    /// An SSE event with every field of `extra` (an object) at the top level.
    fn chunk_with(&self, choice: Value, extra: Value) -> bytes::Bytes {
        let mut body = json!({
            "id": self.completion_id, "object": self.object(true), "created": self.created,
            "model": self.model, "choices": [choice],
        });
        if let (Value::Object(extra), Value::Object(map)) = (extra, &mut body) {
            map.extend(extra);
        }
        bytes::Bytes::from(format!("data: {body}\n\n"))
    }

    fn token_choice(&self, first: bool) -> Value {
        match self.endpoint {
            Endpoint::Completions => {
                json!({"index": 0, "text": TOKEN_TEXT, "finish_reason": null})
            }
            Endpoint::Chat if first => json!({"index": 0,
                "delta": {"role": "assistant", "content": TOKEN_TEXT}, "finish_reason": null}),
            Endpoint::Chat => {
                json!({"index": 0, "delta": {"content": TOKEN_TEXT}, "finish_reason": null})
            }
        }
    }

    fn final_choice(&self) -> Value {
        match self.endpoint {
            Endpoint::Completions => json!({"index": 0, "text": "", "finish_reason": "length"}),
            Endpoint::Chat => json!({"index": 0, "delta": {}, "finish_reason": "length"}),
        }
    }

    fn full(&self, completion: u64, cached: u32) -> Value {
        let text = TOKEN_TEXT.repeat(usize::try_from(completion).unwrap_or(0));
        let choice = match self.endpoint {
            Endpoint::Completions => {
                json!({"index": 0, "text": text, "finish_reason": "length", "logprobs": null})
            }
            Endpoint::Chat => json!({"index": 0,
                "message": {"role": "assistant", "content": text}, "finish_reason": "length"}),
        };
        let mut body = json!({
            "id": self.completion_id, "object": self.object(false), "created": self.created,
            "model": self.model, "choices": [choice], "usage": self.usage(completion, cached),
        });
        if let (Some(params), Value::Object(map)) = (&self.transfer, &mut body) {
            map.insert("kv_transfer_params".to_owned(), params.clone());
        }
        body
    }
}

async fn generate(state: WorkerState, endpoint: Endpoint, body: Bytes) -> Response {
    match try_generate(state, endpoint, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn try_generate(
    state: WorkerState,
    endpoint: Endpoint,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = state.cfg.prompter.parse(endpoint, &body)?;
    drop(body);
    let max_tokens = match request.max_tokens {
        None => state.cfg.default_max_tokens,
        Some(n) => u32::try_from(n).map_err(|_| bad("max_tokens", "must be at most 4294967295"))?,
    };
    let cache_salt = match request.body.get("cache_salt") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(bad("cache_salt", "must be a string")),
    };
    let transfer = parse_transfer(&request.body)?;
    let bootstrap = parse_bootstrap(&request.body)?;
    let lora = state
        .cfg
        .loras
        .iter()
        .find(|l| **l == request.model)
        .cloned();
    let ns = namespace(lora.as_deref(), cache_salt.as_deref());
    let tokens = state.cfg.prompter.tokenize(request.prompt.clone()).await;
    let prompt_tokens = tokens.len();
    let is_prefill = state.cfg.role == Role::Prefill;
    // SGLang: a prefill worker stages the KV under the room (its id names the room).
    let room = bootstrap.as_ref().filter(|_| is_prefill).map(|b| b.room);
    let id = room.map_or_else(|| RequestId(uuid::Uuid::now_v7()), room_id);
    let stage = is_prefill && (transfer == Transfer::RemoteDecode || room.is_some());
    let pulled = if let Some(b) = bootstrap.as_ref().filter(|_| !is_prefill) {
        // SGLang: the KV of the room, once the prefill worker has staged it.
        let Some((host, port)) = &b.peer else {
            return Err(bad(
                "bootstrap_host",
                "a decode worker needs bootstrap_host and bootstrap_port with bootstrap_room",
            ));
        };
        let wait = BOOTSTRAP_WAIT.min(state.cfg.pull_timeout);
        Some(bootstrap_pull(&state.http, host, *port, b.room, wait).await)
    } else {
        match &transfer {
            Transfer::RemotePrefill {
                host,
                port,
                request_id,
            } if !is_prefill => Some(pull_kv(&state.http, host, *port, request_id).await),
            _ => None,
        }
    };
    let staged_prefix = match pulled {
        Some(true) => Some(prompt_tokens),
        Some(false) => {
            state.pull_failures.fetch_add(1, Ordering::Relaxed);
            None
        }
        None => None,
    };
    let transfer_params = (stage && transfer == Transfer::RemoteDecode).then(|| {
        let block_ids: Vec<u64> =
            token_sequence_hashes(&tokens, state.cfg.block_size, ns.as_deref())
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
    });
    let req = seq_request(id, tokens, max_tokens, ns, staged_prefix);
    let deliveries = match state.engine.submit(req, stage).await {
        Err(_) => return Ok(engine_gone()),
        Ok(Err(e)) => return Err(submit_error(&e)),
        Ok(Ok(rx)) => rx,
    };
    let guard = CancelGuard {
        engine: state.engine.clone(),
        id,
        armed: true,
    };
    let reply = Reply {
        endpoint,
        completion_id: format!(
            "{}-{}",
            match endpoint {
                Endpoint::Completions => "cmpl",
                Endpoint::Chat => "chatcmpl",
            },
            id.0.simple()
        ),
        created: router_actors::wire::now_us() / 1_000_000,
        model: request.model.clone(),
        prompt_tokens,
        transfer: transfer_params,
    };
    if request.stream {
        Ok(stream_response(reply, deliveries, guard))
    } else {
        Ok(collect_response(reply, deliveries, guard).await)
    }
}

/// Tells the prefill worker we took its staged KV; false when it did not confirm.
async fn pull_kv(http: &reqwest::Client, host: &str, port: u16, request_id: &str) -> bool {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let url = format!("http://{host}:{port}/v1/kv/pull/{request_id}");
    match http.post(&url).send().await {
        Ok(response) if response.status().is_success() => true,
        Ok(response) => {
            tracing::debug!(%url, status = %response.status(), "KV pull refused");
            false
        }
        Err(e) => {
            tracing::debug!(%url, error = %e, "KV pull failed");
            false
        }
    }
}

/// SGLang convention: takes the KV staged in `room` on the prefill worker at `host:port`,
/// retrying while it is not staged yet (both legs start at once) for up to `wait`; false
/// when it never came (the prompt is then recomputed).
async fn bootstrap_pull(
    http: &reqwest::Client,
    host: &str,
    port: u16,
    room: u64,
    wait: std::time::Duration,
) -> bool {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let url = format!("http://{host}:{port}/v1/kv/bootstrap/{room}");
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let call = http.post(&url).timeout(wait).send();
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(response)) if response.status().is_success() => return true,
            Ok(Ok(response)) if response.status() == StatusCode::NOT_FOUND => {
                tracing::trace!(%url, "KV not staged yet");
            }
            Ok(Ok(response)) => {
                tracing::debug!(%url, status = %response.status(), "bootstrap pull refused");
                return false;
            }
            Ok(Err(e)) => tracing::debug!(%url, error = %e, "bootstrap pull failed"),
            Err(_) => {
                tracing::debug!(%url, "bootstrap pull timed out");
                return false;
            }
        }
        if tokio::time::Instant::now() + BOOTSTRAP_RETRY >= deadline {
            tracing::debug!(%url, "the room's KV was never staged");
            return false;
        }
        tokio::time::sleep(BOOTSTRAP_RETRY).await;
    }
}

async fn collect_response(
    reply: Reply,
    mut deliveries: mpsc::Receiver<Delivery>,
    mut guard: CancelGuard,
) -> Response {
    let mut completion = 0u64;
    loop {
        match deliveries.recv().await {
            Some(d) => {
                completion += u64::from(d.tokens);
                if d.finished {
                    guard.armed = false;
                    return Json(reply.full(completion, d.cached_tokens)).into_response();
                }
            }
            None => return engine_gone(),
        }
    }
}

struct StreamState {
    reply: Reply,
    deliveries: mpsc::Receiver<Delivery>,
    guard: CancelGuard,
    out: VecDeque<bytes::Bytes>,
    sent_tokens: u64,
    done: bool,
}

fn stream_response(
    reply: Reply,
    deliveries: mpsc::Receiver<Delivery>,
    guard: CancelGuard,
) -> Response {
    let state = StreamState {
        reply,
        deliveries,
        guard,
        out: VecDeque::new(),
        sent_tokens: 0,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(chunk) = st.out.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(chunk), st));
            }
            if st.done {
                return None;
            }
            match st.deliveries.recv().await {
                Some(d) => st.push(d),
                None => {
                    st.done = true;
                    st.out.push_back(bytes::Bytes::from_static(
                        b"data: {\"error\":{\"message\":\"the simulated engine has stopped\",\"type\":\"engine_stopped\"}}\n\n",
                    ));
                }
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| engine_gone())
}

impl StreamState {
    fn push(&mut self, d: Delivery) {
        for i in 0..d.tokens {
            let first = self.sent_tokens == 0;
            // The staged KV's parameters ride on the first event of the finishing delivery.
            let extra = (d.finished && i == 0)
                .then(|| self.reply.transfer.clone())
                .flatten()
                .map(|p| ("kv_transfer_params", p));
            let chunk = self.reply.chunk(self.reply.token_choice(first), extra);
            self.out.push_back(chunk);
            self.sent_tokens += 1;
        }
        if d.finished {
            self.guard.armed = false;
            self.done = true;
            let usage = self.reply.usage(self.sent_tokens, d.cached_tokens);
            let mut chunk = self
                .reply
                .chunk(self.reply.final_choice(), Some(("usage", usage)));
            if d.tokens == 0
                && let Some(params) = self.reply.transfer.clone()
            {
                let mut usage_and_params =
                    json!({"usage": self.reply.usage(self.sent_tokens, d.cached_tokens)});
                if let Value::Object(map) = &mut usage_and_params {
                    map.insert("kv_transfer_params".to_owned(), params);
                }
                chunk = self
                    .reply
                    .chunk_with(self.reply.final_choice(), usage_and_params);
            }
            self.out.push_back(chunk);
            self.out
                .push_back(bytes::Bytes::from_static(b"data: [DONE]\n\n"));
        }
    }
}

#[cfg(test)]
mod bootstrap_tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn bootstrap_fields_are_parsed_and_checked() {
        assert_eq!(parse_bootstrap(&body(json!({"x": 1}))).ok(), Some(None));
        assert_eq!(
            parse_bootstrap(&body(json!({"bootstrap_room": 7}))).ok(),
            Some(Some(Bootstrap {
                room: 7,
                peer: None
            }))
        );
        assert_eq!(
            parse_bootstrap(&body(json!({"bootstrap_room": 7, "bootstrap_host": "h",
                                         "bootstrap_port": 9})))
            .ok(),
            Some(Some(Bootstrap {
                room: 7,
                peer: Some(("h".to_owned(), 9))
            }))
        );
        for bad in [
            json!({"bootstrap_room": -1}),
            json!({"bootstrap_room": "7"}),
            json!({"bootstrap_room": 7, "bootstrap_host": "h"}),
            json!({"bootstrap_room": 7, "bootstrap_port": 9}),
            json!({"bootstrap_room": 7, "bootstrap_host": "", "bootstrap_port": 9}),
            json!({"bootstrap_room": 7, "bootstrap_host": "h", "bootstrap_port": 70000}),
        ] {
            assert!(parse_bootstrap(&body(bad.clone())).is_err(), "{bad}");
        }
        assert_ne!(room_id(7), room_id(8));
    }
}
