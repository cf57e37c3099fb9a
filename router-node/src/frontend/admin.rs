//! The operational endpoints: the admin listener's app, on a listener of its own
//! (`[admin] listen`, loopback by default) so the public one serves only the OpenAI API and
//! the probes, and the probes both listeners serve.
//!
//! - `GET /metrics`: the node's Prometheus text (`crate::metrics`), its actors observed now;
//! - `GET /debug/state`: the admitting router's snapshot, the classifier decisions, the
//!   worker circuit breaker, the API keys in use and every actor's snapshot;
//! - `GET /health` (the node's supervisor still runs) and `GET /ready` (the node admits): on
//!   both listeners.
//!
//! With an [`AdminToken`] (`[admin] token_file`) every request must carry
//! `Authorization: Bearer <token>` (compared in constant time); without it the answer is a
//! 401 in the frontend's error shape, counted as `http_refused_total{reason="unauthorized"}`.

use super::AppState;
use super::error::ApiError;
use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use router_tokenizer::Lane;
use serde_json::{Value, json};
use std::sync::Arc;
use subtle::ConstantTimeEq as _;

/// The bearer token of the admin listener. Its `Debug` never shows it.
#[derive(Clone)]
pub struct AdminToken(Arc<[u8]>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

impl AdminToken {
    pub fn new(token: &str) -> Self {
        Self(Arc::from(token.as_bytes()))
    }

    /// Whether an `Authorization` header value carries this token (`Bearer <token>`, the
    /// scheme in any case).
    pub fn matches(&self, authorization: &str) -> bool {
        let Some((scheme, token)) = authorization.trim().split_once(' ') else {
            return false;
        };
        scheme.eq_ignore_ascii_case("bearer") && bool::from(token.trim().as_bytes().ct_eq(&self.0))
    }
}

/// The admin routes over `state`, behind `token` when given.
pub fn admin_app(state: AppState, token: Option<AdminToken>) -> Router {
    let state = Arc::new(state);
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/debug/state", get(debug_state))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(Arc::clone(&state));
    match token {
        Some(token) => router.layer(middleware::from_fn_with_state(
            (token, state),
            require_token,
        )),
        None => router,
    }
}

async fn require_token(
    State((token, state)): State<(AdminToken, Arc<AppState>)>,
    request: Request,
    next: Next,
) -> Response {
    let carried = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| token.matches(v));
    if carried {
        next.run(request).await
    } else {
        state.metrics.refused("admin", "unauthorized");
        ApiError::admin_unauthorized().into_response()
    }
}

/// The frontend's metrics and, with a node attached, its actors' state observed now (each
/// actor within the scrape timeout; a silent one is counted, never an error answer).
async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let gate = &state.tokenize_gate;
    state.metrics.tokenizer(
        state.prompter.cache().map(|c| c.stats()),
        [Lane::Quick, Lane::Bulk].map(|lane| (lane.label(), gate.lane_in_use(lane))),
    );
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.scrape().await,
    )
        .into_response()
}

/// The admitting router's `Observe` snapshot at the top level, the classifier decisions per
/// rule under `classifiers`, workers that refused connections under `worker_breaker`, the
/// API keys in use under `auth` (names, classes, limits; never a key or digest) and, when
/// the node is attached, every actor's snapshot under `node` (routers of all pools, peer
/// sync, KV events, registry), and each model's pool's under `pools`.
async fn debug_state(State(state): State<Arc<AppState>>) -> Response {
    let Ok(snapshot) = state.router.observe().await else {
        return ApiError::router_gone().into_response();
    };
    let mut body = match serde_json::to_value(&snapshot) {
        Ok(body) => body,
        Err(_) => return ApiError::router_gone().into_response(),
    };
    if let Some(map) = body.as_object_mut() {
        let counts = serde_json::to_value(state.classified.snapshot()).unwrap_or_default();
        map.insert("classifiers".to_owned(), counts);
        let breaker = serde_json::to_value(state.breaker.snapshot()).unwrap_or_default();
        map.insert("worker_breaker".to_owned(), breaker);
        let auth = match &state.auth {
            Some(store) => serde_json::to_value(store.snapshot()).unwrap_or_default(),
            None => json!({"mode": "open"}),
        };
        map.insert("auth".to_owned(), auth);
        if let Some(node) = state.metrics.node() {
            map.insert("node".to_owned(), node.gather().await.to_json());
        }
        let pools = state.metrics.pools();
        if !pools.is_empty() {
            let mut by_model = serde_json::Map::new();
            for (model, node) in pools.iter() {
                by_model.insert(model.clone(), node.gather().await.to_json());
            }
            map.insert("pools".to_owned(), Value::Object(by_model));
        }
    }
    Json(body).into_response()
}

/// 200 while the node's actors run (or are being restarted); 503 with the reason once its
/// supervisor gave up or a required actor or task is gone for good.
pub(super) async fn health(State(state): State<Arc<AppState>>) -> Response {
    let failed = state.alive.borrow().reason().map(str::to_owned);
    match failed {
        None => Json(json!({"status": "ok"})).into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "reason": reason})),
        )
            .into_response(),
    }
}

/// 200 while the node admits. The body also says whether the node's bus connection is up:
/// a replica that lost NATS keeps routing with the fleet it last knew (its peers' bookings
/// kept, its room credits its own), and says so.
pub(super) async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let bus = state.bus_connected.as_ref().map(|connected| {
        if connected() {
            "connected"
        } else {
            "disconnected"
        }
    });
    let mut body = if *state.ready.borrow() {
        json!({"status": "ready"})
    } else {
        json!({"status": "not_ready"})
    };
    if let (Some(bus), Some(map)) = (bus, body.as_object_mut()) {
        map.insert("bus".to_owned(), json!(bus));
    }
    if *state.ready.borrow() {
        Json(body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::AdminToken;

    #[test]
    fn the_token_matches_only_as_a_bearer_credential() {
        let token = AdminToken::new("s3cret-s3cret-s3cret");
        assert!(token.matches("Bearer s3cret-s3cret-s3cret"));
        assert!(token.matches("bearer s3cret-s3cret-s3cret"));
        assert!(!token.matches("Bearer s3cret-s3cret-s3cre"));
        assert!(!token.matches("Bearer s3cret-s3cret-s3cret-and-more"));
        assert!(!token.matches("Basic s3cret-s3cret-s3cret"));
        assert!(!token.matches("s3cret-s3cret-s3cret"));
        assert!(!format!("{token:?}").contains("s3cret"));
    }
}
