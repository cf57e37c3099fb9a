//! The frontend's one error type and its HTTP mapping. Every error answers with a JSON body
//! `{"error": {"message", "type", "class", "stage", "reason"}}` (plus `"rule"` when a
//! classifier rule decided); `reason` is a stable, bounded label (the router's
//! `RejectReason::label()` or one of the frontend's own), also used as the metric label, and
//! `stage` says where the request stopped.
//!
//! Status codes: malformed input or a request over a limit (prompt tokens, `max_tokens`, a
//! run of one kind of character) 400, oversized body 413, a body not sent in time 408 (the
//! connection closes), a shed request (queue full, deadline, may-not-queue, overload) 429
//! with `Retry-After: 1`, no worker or no router 503, a failing worker 502, a request past
//! its deadline 504, anything that is our bug 500; a class the `x-policy-class` header may
//! not pick 403, a classifier's refusal the rule's own status, and an admin request without
//! the admin token 401. With API keys: no valid key 401 (with `WWW-Authenticate: Bearer`), a
//! class the key may not use 403, over the key's rate 429 with the wait as `Retry-After`,
//! more tokens than the key's burst 413.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use router_core::RejectReason;
use serde::Serialize;

/// Where a request stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Reading and validating the HTTP request.
    Request,
    /// The router's admission decision.
    Admission,
    /// Finding and calling the admitted worker.
    Dispatch,
    /// Reading the worker's response.
    Upstream,
}

/// An error answer. Build it with the constructors; it turns into a response by itself.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    /// The request's class, when known (boxed: the error stays small).
    pub class: Option<Box<str>>,
    pub stage: Stage,
    pub reason: &'static str,
    /// The classifier rule that decided, when one did (boxed: the error stays small).
    pub rule: Option<Box<str>>,
    /// `Retry-After` of a 429, in seconds (1 unless set; u32 keeps the error small).
    pub retry_after: Option<u32>,
    /// Set when the leg never reached its worker: what a retry elsewhere decides on.
    pub unreached: Option<Unreached>,
    /// The gate refused a request that may not wait because it would have had to: what
    /// conditional disaggregation decides on (`disagg/local.rs`).
    pub would_wait: bool,
}

/// A leg that never reached its worker: nothing was sent, so the request may be placed once
/// more elsewhere (`frontend/placement.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreached {
    pub worker: router_core::WorkerId,
    pub cause: UnreachedCause,
}

/// Why a leg never reached its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreachedCause {
    /// The connection was refused or failed: the worker's breaker counts it.
    Refused,
    /// The worker left the fleet between the admission and the send: not its failure.
    Gone,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    class: Option<&'a str>,
    stage: Stage,
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
}

impl ApiError {
    pub(super) fn new(
        status: StatusCode,
        kind: &'static str,
        stage: Stage,
        reason: &'static str,
    ) -> Self {
        Self {
            status,
            kind,
            message: String::new(),
            class: None,
            stage,
            reason,
            rule: None,
            retry_after: None,
            unreached: None,
            would_wait: false,
        }
    }

    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub fn class(mut self, class: Option<String>) -> Self {
        self.class = class.map(String::into_boxed_str);
        self
    }

    /// A malformed or invalid request field (`field` is named in the message).
    pub fn bad_field(field: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Stage::Request,
            "invalid_body",
        )
        .message(format!("field `{field}`: {why}"))
    }

    /// A `model` no pool of the node serves (404, as OpenAI answers an unknown model).
    pub fn unknown_model(model: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            Stage::Request,
            "model_not_found",
        )
        .message(format!(
            "the model `{model}` does not exist here (GET /v1/models lists the models served)"
        ))
    }

    /// A bad header value (`name` is named in the message).
    pub fn bad_header(name: &str, why: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Stage::Request,
            "invalid_header",
        )
        .message(format!("header `{name}`: {why}"))
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            Stage::Request,
            "body_too_large",
        )
        .message(format!("request body is larger than {limit} bytes"))
    }

    /// The client did not send its whole body within `limit` (`http.body_read_timeout_ms`).
    /// A 408 closes the connection.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            Stage::Request,
            "body_timeout",
        )
        .message(format!(
            "the request body was not received within {} ms",
            limit.as_millis()
        ))
    }

    /// `max_tokens` (or `max_completion_tokens`) above `http.max_tokens_limit`.
    pub fn max_tokens_too_large(asked: u64, limit: u64) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Stage::Request,
            "max_tokens_too_large",
        )
        .message(format!(
            "field `max_tokens`: {asked} is more than this server's limit of {limit} tokens"
        ))
    }

    /// A prompt of `tokens` tokens (at least, when `bytes` gives the text's length and the
    /// most bytes one token stands for: counted without tokenizing) over `limit`.
    pub fn prompt_too_long(tokens: u64, bytes: Option<(usize, usize)>, limit: u64) -> Self {
        let counted = match bytes {
            None => format!("the prompt has {tokens} tokens"),
            Some((bytes, per_token)) => format!(
                "the prompt has at least {tokens} tokens ({bytes} bytes, at most {per_token}                  bytes per token)"
            ),
        };
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Stage::Request,
            "prompt_too_long",
        )
        .message(format!(
            "{counted}, more than this server's limit of {limit} prompt tokens"
        ))
    }

    /// A text prompt holding a tokenizer piece of `piece` bytes (letters with their marks,
    /// digits, whitespace or symbols the tokenizer would merge as one) over `limit`
    /// (`http.max_word_bytes`).
    pub fn word_too_long(piece: usize, limit: usize) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Stage::Request,
            "word_too_long",
        )
        .message(format!(
            "prompt: the tokenizer would merge at least {piece} bytes of it as one piece (letters and \
             their combining marks, digits, whitespace or symbols without a break); this \
             server's limit (http.max_word_bytes) is {limit}"
        ))
    }

    /// No tokenizer capacity came free within `waited` (every one of the node's `capacity`
    /// slots busy): a 503 the client may retry.
    pub fn tokenizer_saturated(busy: &router_tokenizer::TokenizerBusy) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            Stage::Request,
            "tokenizer_saturated",
        )
        .message(format!("prompt not tokenized: {busy}"))
    }

    /// The request was not finished within `limit` of its arrival (`http.request_timeout_ms`).
    pub fn request_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            Stage::Upstream,
            "request_timeout",
        )
        .message(format!(
            "the request did not finish within this server's limit of {} ms",
            limit.as_millis()
        ))
    }

    /// An admin request without the admin listener's bearer token (`admin.token_file`).
    pub fn admin_unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            Stage::Request,
            "unauthorized",
        )
        .message("this endpoint needs the admin token: Authorization: Bearer <token>")
    }

    pub fn unknown_class(err: &router_core::UnknownClass) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Stage::Admission,
            "unknown_class",
        )
        .message(err.to_string())
        .class(Some(err.class.clone()))
    }

    /// A classifier rule refused the request with its own status (4xx or 5xx) and message.
    pub fn refused_by_rule(status: u16, message: String, rule: String) -> Self {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
        let kind = match status {
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_server_error() => "service_unavailable",
            _ => "permission_error",
        };
        let mut err = Self::new(status, kind, Stage::Request, "refused_by_rule").message(message);
        err.rule = Some(rule.into_boxed_str());
        err
    }

    /// The `x-policy-class` header named a class that the matched rule (if any) does not let
    /// a request pick.
    pub fn class_not_permitted(class: String, rule: Option<String>) -> Self {
        let message = match &rule {
            Some(rule) => format!(
                "policy class `{class}` may not be requested by header (classifier `{rule}` does not allow it)"
            ),
            None => format!(
                "policy class `{class}` may not be requested by header (no classifier allows it)"
            ),
        };
        let mut err = Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            Stage::Request,
            "class_not_permitted",
        )
        .message(message)
        .class(Some(class));
        err.rule = rule.map(String::into_boxed_str);
        err
    }

    /// The router refused the request.
    pub fn rejected(reason: &RejectReason, class: String) -> Self {
        let (status, kind) = match reason {
            RejectReason::QueueFull { .. }
            | RejectReason::DeadlinePassed { .. }
            | RejectReason::WouldQueue { .. }
            | RejectReason::BehindBacklog
            | RejectReason::AllWorkersOverloaded => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
            }
            RejectReason::NoWorkers
            | RejectReason::NotReady
            | RejectReason::PinnedOverloaded { .. }
            | RejectReason::PinnedUnavailable { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable")
            }
            RejectReason::Duplicate | RejectReason::UnknownClass => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
            }
        };
        let mut error = Self::new(status, kind, Stage::Admission, reason.label())
            .message(reason.to_string())
            .class(Some(class));
        error.would_wait = matches!(
            reason,
            RejectReason::WouldQueue { .. } | RejectReason::BehindBacklog
        );
        error
    }

    /// A failed route call: the scheduler's refusal under its reason, a class id the router
    /// does not know (the frontend's profile and the router's differ: our bug), or a router
    /// that is gone.
    pub fn from_route(error: &router_actors::RouteError, class: &str) -> Self {
        use router_actors::RouteError;
        match error {
            RouteError::Rejected { reason, .. } => Self::rejected(reason, class.to_owned()),
            RouteError::UnknownClass(_) => {
                Self::internal("unknown_class", error.to_string()).class(Some(class.to_owned()))
            }
            RouteError::Unavailable => Self::router_gone().class(Some(class.to_owned())),
        }
    }

    /// Too many requests in progress at this node.
    pub fn saturated(limit: usize) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            Stage::Request,
            "frontend_saturated",
        )
        .message(format!("more than {limit} requests in progress"))
    }

    /// The router actor is gone (restarting or stopped).
    pub fn router_gone() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            Stage::Admission,
            "router_unavailable",
        )
        .message("the router is unavailable")
    }

    /// The admitted worker left the fleet before its leg was sent (nothing reached it).
    pub fn no_endpoint(worker: router_core::WorkerId) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            Stage::Dispatch,
            "no_endpoint",
        )
        .message(format!("no endpoint known for {worker}"));
        e.unreached = Some(Unreached {
            worker,
            cause: UnreachedCause::Gone,
        });
        e
    }

    /// The worker failed (connect error, bad status, broken stream, oversized answer).
    pub fn upstream(stage: Stage, reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "upstream_error", stage, reason).message(message)
    }

    /// This node ran out of file descriptors opening a connection to a worker: its own
    /// failure, not the worker's (a 503; the worker is not ejected).
    pub fn out_of_files(message: String) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            Stage::Dispatch,
            "node_out_of_files",
        )
        .message(message)
    }

    /// The connection to `worker` was refused or failed: nothing reached it.
    pub fn refused(worker: router_core::WorkerId, reason: &'static str, message: String) -> Self {
        let mut e = Self::upstream(Stage::Dispatch, reason, message);
        e.unreached = Some(Unreached {
            worker,
            cause: UnreachedCause::Refused,
        });
        e
    }

    pub fn internal(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            Stage::Admission,
            reason,
        )
        .message(message)
    }

    /// True when the client should simply retry later.
    pub fn retryable(&self) -> bool {
        self.status == StatusCode::TOO_MANY_REQUESTS
    }

    /// The JSON body alone (also sent as an SSE `data:` event when a stream breaks).
    pub fn body_json(&self) -> String {
        let body = Body {
            error: Inner {
                message: &self.message,
                kind: self.kind,
                class: self.class.as_deref(),
                stage: self.stage,
                reason: self.reason,
                rule: self.rule.as_deref(),
            },
        };
        serde_json::to_string(&body).unwrap_or_else(|_| String::from(r#"{"error":{}}"#))
    }
}

impl ApiError {
    /// The answer with `Connection: close`: for a refusal sent before the request's body was
    /// read, whose unread rest would otherwise sit on the connection the client reuses.
    pub fn into_closing_response(self) -> Response {
        let mut response = self.into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            self.body_json(),
        )
            .into_response();
        let headers = response.headers_mut();
        if self.retryable() {
            let after = HeaderValue::from(self.retry_after.unwrap_or(1));
            headers.insert(header::RETRY_AFTER, after);
        }
        match self.status {
            // The rest of a slow or oversized body is not read: the connection cannot carry
            // another request.
            StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            StatusCode::UNAUTHORIZED => {
                let challenge = if self.reason == "invalid_api_key" {
                    r#"Bearer error="invalid_token""#
                } else {
                    "Bearer"
                };
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(challenge),
                );
            }
            _ => {}
        }
        response
    }
}
