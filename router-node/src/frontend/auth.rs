//! API keys at the frontend (`crate::auth`), when the node has a keys file: who the request
//! is, whether its key may use its class, whether the key is within its rates, and the
//! `switchyard_auth_requests_total{key,outcome}` count of each request.
//!
//! The order on an OpenAI request: the key (`Authorization: Bearer <key>`; none or an
//! unknown one is a 401) before anything else, then, before the body is read, the class
//! when the header alone decides it (403 when the key may not use it) and the key's
//! requests bucket (429 with `Retry-After`); after tokenizing and classifying, the class
//! again (classifiers) and the tokens bucket (prompt + `max_tokens` as booked; 429, or 413
//! when more than the burst). `/v1/models` needs a valid key too; `/health`, `/ready`,
//! `/metrics` and `/debug/state` do not.

use super::AppState;
use super::admit::Class;
use super::classify::{class_header, known_class};
use super::error::ApiError;
use crate::auth::{ApiKey, NO_KEY, TokensRefused, retry_after_secs};
use axum::http::{HeaderMap, header};
use std::sync::Arc;

/// The request's key: `Ok(None)` when the node has no keys (open), a 401 when it has and
/// the request carries no valid one. The request span gets the key's name as `key`.
pub(super) fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Arc<ApiKey>>, ApiError> {
    let Some(store) = &state.auth else {
        return Ok(None);
    };
    let presented = bearer(headers)?;
    let key = store
        .authenticate(presented)
        .ok_or_else(|| ApiError::unauthenticated(false))?;
    tracing::Span::current().record("key", key.name());
    Ok(Some(key))
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case); a missing header,
/// another scheme or an empty token is a 401 saying how to send a key.
fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthenticated(true))?;
    // Bytes that are not visible ASCII cannot be a key: invalid, not missing.
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthenticated(false))?;
    let (scheme, token) = value.trim().split_once(' ').unwrap_or((value, ""));
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::unauthenticated(true));
    }
    Ok(token)
}

/// What is known before the body: the class header's value, and the class when it alone
/// decides it.
pub(super) type BeforeBody<'h> = (Option<&'h str>, Option<Class>);

/// A request refused before its body was read, with its class when that was known.
#[derive(Debug)]
pub(super) struct Refused {
    pub class: Option<Class>,
    pub error: ApiError,
}

/// Everything before the body is read: the API key (into `key`), the class header, the
/// class when the header alone decides it (and whether the key may use it), the key's
/// request rate.
pub(super) fn before_body<'h>(
    state: &AppState,
    headers: &'h HeaderMap,
    key: &mut Option<Arc<ApiKey>>,
) -> Result<BeforeBody<'h>, Box<Refused>> {
    let refused = |class: Option<Class>| move |error| Box::new(Refused { class, error });
    *key = authenticate(state, headers).map_err(refused(None))?;
    let key = key.as_deref();
    let requested = class_header(headers).map_err(refused(None))?;
    let known = known_class(state, requested, key).map_err(refused(None))?;
    if let Some(class) = &known {
        tracing::Span::current().record("class", class.name.as_str());
        entitle(key, class).map_err(|e| refused(Some(class.clone()))(e))?;
    }
    if let Err(e) = limit_requests(key) {
        return Err(refused(known)(e));
    }
    Ok((requested, known))
}

/// 403 when `key` may not use `class`.
pub(super) fn entitle(key: Option<&ApiKey>, class: &Class) -> Result<(), ApiError> {
    match key {
        Some(key) if !key.may_use(class.id) => {
            let allowed: Vec<&str> = key.class_names().collect();
            Err(ApiError::class_not_entitled(
                key.name(),
                class.name.clone(),
                &allowed,
            ))
        }
        _ => Ok(()),
    }
}

/// 403 when the key may not use the request's `model`.
pub(super) fn entitle_model(key: Option<&ApiKey>, model: &str) -> Result<(), ApiError> {
    match key {
        Some(key) if !key.may_use_model(model) => Err(ApiError::model_not_entitled(
            key.name(),
            model,
            key.models(),
        )),
        _ => Ok(()),
    }
}

/// Takes one request from the key's requests bucket; 429 with the wait when it is empty.
pub(super) fn limit_requests(key: Option<&ApiKey>) -> Result<(), ApiError> {
    let Some(key) = key else { return Ok(()) };
    key.limits().request().map_err(|wait| {
        let per_s = key.limits().spec().requests.map_or(0.0, |r| r.per_s);
        ApiError::key_rate_limited(key.name(), "requests", per_s, retry_after_secs(wait))
    })
}

/// Takes `prompt + output` tokens from the key's tokens bucket: 429 with the wait when over
/// the rate, 413 when more than the burst.
pub(super) fn limit_tokens(key: Option<&ApiKey>, prompt: u64, output: u64) -> Result<(), ApiError> {
    let Some(key) = key else { return Ok(()) };
    match key.limits().tokens(prompt.saturating_add(output)) {
        Ok(()) => Ok(()),
        Err(TokensRefused::Wait(wait)) => {
            let per_s = key.limits().spec().tokens.map_or(0.0, |r| r.per_s);
            Err(ApiError::key_rate_limited(
                key.name(),
                "tokens",
                per_s,
                retry_after_secs(wait),
            ))
        }
        Err(TokensRefused::OverBurst { burst, .. }) => {
            Err(ApiError::over_key_burst(key.name(), prompt, output, burst))
        }
    }
}

/// Counts one request in `switchyard_auth_requests_total` (nothing without keys): under
/// its key's name (`none` without a valid key) and the first key check it failed, or `ok`
/// when it passed them all (it may still fail for another reason).
pub(super) fn record(state: &AppState, key: Option<&ApiKey>, error: Option<&ApiError>) {
    if state.auth.is_none() {
        return;
    }
    let outcome = match error.map(|e| e.reason) {
        Some("missing_api_key" | "invalid_api_key") => "unauthenticated",
        Some("class_not_entitled") => "forbidden",
        Some("key_requests_rate") => "requests_limited",
        Some("key_tokens_rate" | "key_tokens_burst") => "tokens_limited",
        _ => "ok",
    };
    state
        .metrics
        .auth_request(key.map_or(NO_KEY, ApiKey::name), outcome);
}
