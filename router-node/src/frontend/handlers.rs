//! The route handlers of the OpenAI API: the two OpenAI routes (read, parse, check,
//! tokenize, admit, proxy) and `/v1/models` (the probes, `/health` and `/ready`, are in
//! `admin.rs`).
//!
//! An OpenAI request goes: API key (`auth.rs`) → class header (and, without classifiers, the
//! key's entitlement to it) → the key's request rate → body under the size limit and the
//! body read timeout → parse → the checks before tokenizing (`limits.rs`) → permit →
//! tokenize → prompt token count → classify (once, before any hop: `classify.rs`; then the
//! key's entitlement) → the key's token rate → `route` → on admission a [`BookingGuard`] at
//! once (no await in between, so a dropped handler can never leak a booking) →
//! `proxy::forward`. A slow or oversized body never holds a permit. The whole request runs
//! under its deadline (`http.request_timeout_ms`): past it the handler is dropped (its
//! booking and permit with it) and the client gets a 504, or, once streaming, the stream
//! ends with one error event (`proxy.rs`). Every failure is an [`ApiError`] counted under its
//! class (`unknown` before the request was classified) and reason.

use super::admit::Class;
use super::auth;
use super::classify::classify;
use super::error::ApiError;
use super::limits::{Deadline, check_prompt_tokens};
use super::openai::ParsedRequest;
use super::placement;
use super::{AppState, Limits};
use crate::auth::ApiKey;
use crate::metrics::{RequestObserver, RequestOutcome, Stage};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use router_core::Endpoint;
use router_core::{Phase, Prompt};
use router_tokenizer::{PromptError, PromptInput, RequestBody};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

/// The header naming a request's policy class (absent or empty: the default class).
pub const CLASS_HEADER: &str = "x-policy-class";

pub(super) async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    openai(state, Endpoint::Completions, headers, body).await
}

pub(super) async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    openai(state, Endpoint::Chat, headers, body).await
}

async fn openai(
    state: Arc<AppState>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let span = tracing::info_span!(
        "http.request",
        otel.kind = "server",
        http.route = endpoint.path(),
        key = tracing::field::Empty,
        class = tracing::field::Empty,
        classifier.rule = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::propagation::set_remote_parent(&span, &headers);
    // Records the request's duration and tokens once, however it ends (dropped with this
    // future when the client goes away: `cancelled`).
    let mut observer = RequestObserver::new(state.metrics.clone());
    let deadline = Deadline::after(state.limits.request_timeout);
    // Boxed once here: the handler's state is kilobytes, and unboxed it would be copied at
    // every move on its way into the server's boxed future (the timeout, the span, axum).
    let handled = Box::pin(handle_openai(
        state.clone(),
        endpoint,
        headers,
        body,
        deadline,
        &mut observer,
    ));
    let response = match tokio::time::timeout_at(deadline.at, handled)
        .instrument(span.clone())
        .await
    {
        Ok(response) => response,
        // The handler is gone, and with it any booking and permit it held.
        Err(_) => past_deadline(&state, endpoint, deadline, &mut observer),
    };
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// The answer to a request whose deadline passed before it had a response: a 504, counted
/// under the class it had by then.
fn past_deadline(
    state: &AppState,
    endpoint: Endpoint,
    deadline: Deadline,
    observer: &mut RequestObserver,
) -> Response {
    let label = observer.class_name().to_owned();
    let err = ApiError::request_timeout(deadline.limit);
    state.metrics.request(endpoint.label(), &label);
    state.metrics.rejection(&label, err.reason);
    observer.finish(RequestOutcome::of_status(err.status.as_u16()));
    let class = (label != "unknown").then_some(label);
    err.class(class).into_response()
}

async fn handle_openai(
    state: Arc<AppState>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Body,
    deadline: Deadline,
    observer: &mut RequestObserver,
) -> Response {
    let mut key = None;
    // A refusal before the body was read leaves it on the connection: the answer closes it.
    let mut body_unread = false;
    let (class, outcome) = match auth::before_body(&state, &headers, &mut key) {
        Err(refused) => {
            body_unread = true;
            (refused.class, Err(refused.error))
        }
        Ok((requested, known)) => {
            // Kept for the error path alone: the class moves into `prepare` (no clone per request).
            let known_id = known.as_ref().map(|c| c.id);
            let key = key.as_deref();
            let prepared = prepare(
                &state, endpoint, &headers, body, requested, known, key, observer,
            );
            match prepared.await {
                Ok((mut prepared, class)) => {
                    prepared.request.deadline = Some(deadline);
                    observer.class(&class.name);
                    let outcome =
                        admit_and_forward(&state, &headers, prepared, &class, observer).await;
                    (Some(class), outcome)
                }
                Err(err) => {
                    let known = known_id.map(|id| Class {
                        id,
                        name: state.class_name(id),
                    });
                    (known, Err(err))
                }
            }
        }
    };
    auth::record(&state, key.as_deref(), outcome.as_ref().err());
    // A request that failed before its class was known has none: `unknown`.
    let label = class.as_ref().map_or("unknown", |c| c.name.as_str());
    state.metrics.request(endpoint.label(), label);
    observer.class(label);
    // A streaming answer took the observer over (its body records at its end).
    observer.finish(match &outcome {
        Ok(_) => RequestOutcome::Ok,
        Err(err) => RequestOutcome::of_status(err.status.as_u16()),
    });
    outcome.unwrap_or_else(|err| {
        state.metrics.rejection(label, err.reason);
        let err = match (&err.class, &class) {
            (None, Some(class)) => err.class(Some(class.name.clone())),
            _ => err,
        };
        if body_unread {
            err.into_closing_response()
        } else {
            err.into_response()
        }
    })
}

/// A request ready for its first hop: parsed, tokenized and hashed, holding its permit (its
/// class comes beside it).
struct Prepared {
    /// The state of its model's pool, when the node has several (`None`: the handler's).
    pool: Option<AppState>,
    request: ParsedRequest,
    /// The prompt's chained block hashes and length: every leg and retry routes with these
    /// (the tokens are gone by then).
    prompt: Prompt,
    permit: OwnedSemaphorePermit,
}

/// Everything before the first hop: the body under its limits, parsing, the checks before
/// tokenizing, a permit, tokenizing and the count, then the one classification (`classify`)
/// every hop runs under, and the API key's checks that need the class or the tokens.
#[allow(clippy::too_many_arguments)]
async fn prepare(
    state: &AppState,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
    requested: Option<&str>,
    known: Option<Class>,
    key: Option<&ApiKey>,
    observer: &mut RequestObserver,
) -> Result<(Prepared, Class), ApiError> {
    let limits = &state.limits;
    let bytes = read_body(body, headers, limits).await?;
    observer.stage(Stage::Read);
    let (parsed, pool) = parse_in_pool(state, endpoint, &bytes)?;
    auth::entitle_model(key, &parsed.model)?;
    let mut request: ParsedRequest = parsed.into();
    drop(bytes);
    // From here on, the request's model's pool: its tokenizer, directory and routers.
    let state = pool.as_ref().unwrap_or(state);
    request.take_engine_fields()?;
    request.read_scope(state.directory.as_ref())?;
    limits.check_max_tokens(request.max_tokens)?;
    let tokenizer = state.prompter.tokenizer();
    // The configured limit, else the shortest context the fleet's engines announce.
    let max_prompt = limits.prompt_limit(state.directory.max_model_len());
    limits.check_prompt(&request.prompt, tokenizer, max_prompt)?;
    // Only now, with the whole body read and checked: a slow client never holds a permit.
    let permit = state
        .permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::saturated(limits.max_concurrent_requests))?;
    // Tokenized once: every leg and hop below uses these ids.
    let prompt = std::mem::replace(&mut request.prompt, PromptInput::Tokens(Vec::new()));
    // One text prompt may go upstream as its ids (a batch stays text: its ids are joined).
    let forward_ids = state.forward_token_ids
        && endpoint == Endpoint::Completions
        && matches!(&prompt, PromptInput::Text(parts) if parts.len() == 1);
    observer.stage(Stage::Parse);
    // Under the node's tokenizer lanes (a 503 when no slot comes free in time), each chunk
    // not in the token cache checked for a piece over `max_word_bytes` (a 400) first.
    let until = tokio::time::Instant::now() + limits.tokenize_wait();
    let tokenized = state
        .prompter
        .tokenize_gated(endpoint, prompt, until, limits.max_word_bytes)
        .await?;
    observer.stage(Stage::Tokenize);
    observer.stage_moved(
        Stage::Tokenize,
        Stage::TokenizeWait,
        tokenized.waited.as_secs_f64(),
    );
    let tokens = tokenized.ids;
    // The text goes back into the request: the worker gets it unless its ids are forwarded.
    if let Some(text) = tokenized.text {
        request.prompt = PromptInput::Text(text);
    }
    check_prompt_tokens(tokens.len(), max_prompt)?;
    // Without classifiers the header already decided (`known`, its key checked before the
    // body): nothing more to evaluate.
    let class = match known {
        Some(class) => class,
        None => {
            let class = classify(state, &request, tokens.len(), headers, requested, key)?;
            auth::entitle(key, &class)?;
            class
        }
    };
    request.set_engine_priority(state.profile.class(class.id).engine_priority);
    let output = request.expected_output(&state.limits);
    auth::limit_tokens(key, tokens.len() as u64, output)?;
    // Hashed once, here, under the request's adapter and salt as the engine hashes them: the
    // pool's router actor does no hashing, and no leg clones tokens.
    let prompt = state.router.prompt(&tokens, request.hash_scope());
    if forward_ids {
        request.set_prompt_ids(tokens);
    }
    observer.stage(Stage::Classify);
    Ok((
        Prepared {
            pool,
            request,
            prompt,
            permit,
        },
        class,
    ))
}

/// Parses the body with the chat template of its model's pool and returns that pool's state
/// when the node has several pools (`None`: the node's one pool, `state`'s own). A model no
/// pool serves is a 404.
fn parse_in_pool(
    state: &AppState,
    endpoint: Endpoint,
    bytes: &[u8],
) -> Result<(RequestBody, Option<AppState>), ApiError> {
    let Some(pools) = &state.pools else {
        return Ok((state.prompter.parse(endpoint, bytes)?, None));
    };
    let mut chosen = None;
    let mut unknown = None;
    // A chat is rendered by its pool's template: the pool is picked as the body is read.
    let parsed = RequestBody::parse_with(endpoint, bytes, |body| {
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match pools.resolve(model) {
            Some(pool) => {
                let rendered = pool.prompter.render(body);
                chosen = Some(pool);
                rendered
            }
            None => {
                unknown = Some(model.to_owned());
                Err(PromptError::field("model", "is not served here"))
            }
        }
    });
    if let Some(model) = unknown {
        return Err(ApiError::unknown_model(&model));
    }
    let parsed = parsed?;
    let pool = match chosen {
        Some(pool) => pool,
        None => pools
            .resolve(&parsed.model)
            .ok_or_else(|| ApiError::unknown_model(&parsed.model))?,
    };
    Ok((parsed, Some(state.for_pool(&pool))))
}

async fn admit_and_forward(
    state: &AppState,
    headers: &HeaderMap,
    prepared: Prepared,
    class: &Class,
    observer: &mut RequestObserver,
) -> Result<Response, ApiError> {
    let Prepared {
        pool,
        request,
        prompt,
        permit,
    } = prepared;
    let state = pool.as_ref().unwrap_or(state);
    if let Some(decode) = &state.decode {
        let d = super::disagg::Disagg {
            request,
            prompt,
            class,
            headers,
            permit,
        };
        // Boxed: the two-leg path's state is several kilobytes, which every aggregated
        // request's future would otherwise carry (and copy at each move).
        return Box::pin(super::disagg::admit_and_forward(state, decode, d, observer)).await;
    }
    placement::single_leg(
        state,
        &state.router,
        (Phase::Aggregated, "aggregated"),
        &request,
        &prompt,
        class,
        headers,
        permit,
        observer,
    )
    .await
}

/// The request body, at most `limits.max_body_bytes` (checked against `Content-Length`
/// first, then while reading), all of it within `limits.body_read_timeout` (else a 408,
/// which closes the connection).
async fn read_body(body: Body, headers: &HeaderMap, limits: &Limits) -> Result<Bytes, ApiError> {
    let limit = limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::with_capacity(declared.map_or(0, |l| l as usize).min(limit));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::bad_field("body", format!("could not be read: {e}")))?;
            if buf.len().saturating_add(chunk.len()) > limit {
                return Err(ApiError::too_large(limit));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(buf))
    };
    tokio::time::timeout(limits.body_read_timeout, read)
        .await
        .unwrap_or_else(|_| Err(ApiError::body_timeout(limits.body_read_timeout)))
}

/// The model list; with API keys, for a valid key only.
pub(super) async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match auth::authenticate(&state, &headers) {
        Ok(key) => auth::record(&state, key.as_deref(), None),
        Err(error) => {
            auth::record(&state, None, Some(&error));
            return error.into_response();
        }
    }
    // What the workers announce (adapters with their base model as `parent`, as vLLM lists
    // them), then the configured names no worker announced.
    let served = match &state.pools {
        Some(pools) => pools.served_models(),
        None => state.directory.served_models(),
    };
    let configured = state
        .models
        .iter()
        .filter(|id| !served.iter().any(|m| &m.id == *id))
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard"}));
    let data: Vec<_> = served
        .iter()
        .map(|m| {
            let mut entry =
                json!({"id": m.id, "object": "model", "created": 0, "owned_by": "switchyard"});
            if let Some(parent) = &m.parent {
                entry["parent"] = json!(parent);
            }
            entry
        })
        .chain(configured)
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}
