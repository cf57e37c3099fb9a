//! The errors of API keys (`auth.rs`): no valid key (401), a class the key may not use
//! (403), over the key's rates (429 with the wait) or its token burst (413). Constructors of
//! the frontend's one [`ApiError`], kept beside the other key code.

use super::error::{ApiError, Stage};
use axum::http::StatusCode;

impl ApiError {
    /// No valid API key: `missing` when the request sent none (or not as `Bearer`).
    pub fn unauthenticated(missing: bool) -> Self {
        let (reason, message) = if missing {
            (
                "missing_api_key",
                "an API key is required: send it as `Authorization: Bearer <key>`",
            )
        } else {
            ("invalid_api_key", "the API key is not valid")
        };
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            Stage::Request,
            reason,
        )
        .message(message)
    }

    /// The request's class is not one its API key may use.
    pub fn class_not_entitled(key: &str, class: String, allowed: &[&str]) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            Stage::Request,
            "class_not_entitled",
        )
        .message(format!(
            "API key `{key}` may not use policy class `{class}` (it may use: {})",
            allowed.join(", ")
        ))
        .class(Some(class))
    }

    /// A model the API key may not use.
    pub fn model_not_entitled(key: &str, model: &str, allowed: &[String]) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            Stage::Request,
            "model_not_entitled",
        )
        .message(format!(
            "API key `{key}` may not use the model `{model}` (it may use: {})",
            allowed.join(", ")
        ))
    }

    /// Over an API key's rate (`what`: `requests` or `tokens`); retry after `retry_after`
    /// seconds.
    pub fn key_rate_limited(key: &str, what: &'static str, per_s: f64, retry_after: u64) -> Self {
        let reason = if what == "tokens" {
            "key_tokens_rate"
        } else {
            "key_requests_rate"
        };
        let mut err = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            Stage::Request,
            reason,
        )
        .message(format!(
            "API key `{key}` is over its limit of {per_s} {what}/s: retry after {retry_after} s"
        ));
        err.retry_after = Some(u32::try_from(retry_after).unwrap_or(u32::MAX));
        err
    }

    /// More tokens than an API key's burst: the request can never pass under that key.
    pub fn over_key_burst(key: &str, prompt: u64, output: u64, burst: u32) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            Stage::Request,
            "key_tokens_burst",
        )
        .message(format!(
            "this request counts {prompt} prompt + {output} output tokens, more than API key \
             `{key}` may use at once ({burst}): lower `max_tokens` or shorten the prompt"
        ))
    }
}
