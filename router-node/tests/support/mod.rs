//! Test harness for the HTTP frontend: a stand-in OpenAI worker (it plays a GPU engine:
//! streams N SSE chunks with a delay before each, then `data: [DONE]`, and records what it
//! was sent), and a node (a real RouterActor over a real PoolRouter, the frontend's public
//! and admin listeners on 127.0.0.1:0) with a reqwest client pointed at it.

#![allow(dead_code, clippy::unwrap_used)]

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use ractor::Actor;
use router_actors::{Clock, RouterActor, RouterArgs, RouterHandle};
use router_core::{
    PolicyProfile, PoolRole, PoolRouterConfig, PrefixMode, RouterId, SchedulerConfig, WorkerId,
    WorkerSpec,
};
use router_node::frontend::{AppState, Limits, StaticDirectory, serve, serve_admin};
use router_tokenizer::Prompter;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

/// A port that refuses every connection for as long as this value lives: a socket bound to it
/// that never listens. (A port bound and closed again is free for the OS to hand to another
/// test's listener running beside this one, which would then answer.)
pub struct RefusingPort {
    _socket: tokio::net::TcpSocket,
    pub url: String,
}

impl RefusingPort {
    pub fn bind() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let url = format!("http://{}", socket.local_addr().unwrap());
        Self {
            _socket: socket,
            url,
        }
    }
}

pub const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 2000
quantum = 100
[[classes]]
name = "batch"
slo_ms = 10000
quantum = 10
prefill_busy_threshold = 100
[[classes]]
name = "realtime"
slo_ms = 100
quantum = 100
never_queue = true
prefill_busy_threshold = 100
"#;

/// What the stand-in worker received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub body: Value,
    pub traceparent: Option<String>,
    /// The `Authorization` header, if the router sent one.
    pub authorization: Option<String>,
}

/// How the stand-in worker misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Answers this status with a JSON error body instead of streaming.
    Status(u16),
    /// Breaks the connection after this many chunks.
    BreakAfter(usize),
    /// Sends this many chunks, then nothing more (keeps the connection open).
    StallAfter(usize),
    /// Answers a 307 to another path of itself.
    Redirect,
}

#[derive(Clone)]
struct WorkerState {
    chunks: usize,
    delay: Duration,
    fault: Fault,
    seen: Arc<Mutex<Vec<Seen>>>,
}

pub struct StandInWorker {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    _stop: oneshot::Sender<()>,
}

/// A stand-in worker streaming `chunks` chunks, `delay` before each.
pub async fn spawn_worker(chunks: usize, delay: Duration) -> StandInWorker {
    spawn_faulty_worker(chunks, delay, Fault::None).await
}

pub async fn spawn_faulty_worker(chunks: usize, delay: Duration, fault: Fault) -> StandInWorker {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = WorkerState {
        chunks,
        delay,
        fault,
        seen: seen.clone(),
    };
    let app = axum::Router::new()
        .route("/v1/completions", post(stream_chunks))
        .route("/v1/chat/completions", post(stream_chunks))
        .with_state(state);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    StandInWorker {
        url,
        seen,
        _stop: stop,
    }
}

async fn stream_chunks(
    State(state): State<WorkerState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let chat = uri.path().contains("chat");
    state.seen.lock().unwrap().push(Seen {
        path: uri.path().to_owned(),
        body: serde_json::from_str(&body).unwrap_or(Value::Null),
        traceparent: headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    });
    if state.fault == Fault::Redirect {
        return Response::builder()
            .status(307)
            .header("location", "/v1/elsewhere")
            .body(Body::empty())
            .unwrap();
    }
    if let Fault::Status(code) = state.fault {
        return Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(r#"{"error":{"message":"engine says no"}}"#))
            .unwrap();
    }
    let delay = state.delay;
    let fault = state.fault;
    let events = futures::stream::iter(0..=state.chunks).then(move |i| async move {
        tokio::time::sleep(delay).await;
        if fault == Fault::BreakAfter(i) {
            return Err(std::io::Error::other("engine crashed"));
        }
        if fault == Fault::StallAfter(i) {
            futures::future::pending::<()>().await;
        }
        let event = if i == state.chunks {
            "data: [DONE]\n\n".to_owned()
        } else if chat {
            "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"tok\"},\"index\":0}]}\n\n"
                .to_owned()
        } else {
            "data: {\"id\":\"c1\",\"choices\":[{\"text\":\"tok\",\"index\":0}]}\n\n".to_owned()
        };
        Ok(event)
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(events))
        .unwrap()
}

pub struct Node {
    /// The public listener: the OpenAI API, `/health`, `/ready`.
    pub url: String,
    /// The admin listener: `/metrics`, `/debug/state`, `/health`, `/ready`.
    pub admin_url: String,
    pub router: RouterHandle,
    pub state: AppState,
    pub http: reqwest::Client,
    pub ready: watch::Sender<bool>,
    _stop: oneshot::Sender<()>,
    _stop_admin: oneshot::Sender<()>,
}

/// A simulated worker's config reading bodies with the default prompter (the frontend's
/// tokenizer and chat rendering) and parenting its request spans on the caller's
/// `traceparent`, as `router-tools worker --sim` runs it.
pub fn sim_config() -> router_sim::SimConfig {
    router_sim::SimConfig {
        prompts: Arc::new(Prompter::default()),
        trace_parent: Some(router_node::telemetry::propagation::set_remote_parent),
        ..router_sim::SimConfig::default()
    }
}

/// A simulated engine (`worker --sim`, id 1) at `speedup`, on 127.0.0.1:0 and a bus of its
/// own: a real worker for a node from [`spawn_node`] to route to.
pub async fn spawn_sim_worker(speedup: f64) -> router_sim::SimWorker {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = router_sim::SimConfig {
        worker_id: router_core::WorkerId(1),
        speedup,
        heartbeat: Duration::from_millis(100),
        ..sim_config()
    };
    let bus = Arc::new(router_actors::bus::local::LocalBus::new());
    router_sim::SimWorker::start(listener, bus, cfg)
        .await
        .unwrap()
}

/// A node over one aggregated pool whose workers (ids 1..) are served at `workers`.
pub async fn spawn_node(workers: &[&str], limits: Limits) -> Node {
    spawn_node_with(workers, limits, Prompter::default()).await
}

/// [`spawn_node`] with the tokenizer and chat rendering of `prompter`.
pub async fn spawn_node_with(workers: &[&str], limits: Limits, prompter: Prompter) -> Node {
    spawn_node_profiled(workers, limits, prompter, PROFILE).await
}

/// [`spawn_node_with`] under the policy profile `profile` (TOML).
pub async fn spawn_node_profiled(
    workers: &[&str],
    limits: Limits,
    prompter: Prompter,
    profile: &str,
) -> Node {
    spawn_node_tuned(workers, limits, prompter, profile, |state| state).await
}

/// [`spawn_node_profiled`] with the frontend's state changed by `tune` before serving.
pub async fn spawn_node_tuned(
    workers: &[&str],
    limits: Limits,
    prompter: Prompter,
    profile: &str,
    tune: impl FnOnce(AppState) -> AppState,
) -> Node {
    let profile = PolicyProfile::from_toml_str(profile).unwrap();
    let clock = Clock::start();
    let args = RouterArgs {
        recheck_every: Duration::from_millis(50),
        ..RouterArgs::new(
            PoolRouterConfig {
                scheduler: SchedulerConfig::new(
                    PoolRole::Aggregated,
                    RouterId(uuid::Uuid::from_u128(7)),
                ),
                block_size: 16,
                prefix: PrefixMode::Events,
            },
            profile.clone(),
            clock,
        )
    };
    let (actor, _) = Actor::spawn(None, RouterActor, args).await.unwrap();
    let router = RouterHandle::new(actor, clock);
    let mut directory = HashMap::new();
    for (i, url) in workers.iter().enumerate() {
        let id = i as u64 + 1;
        router
            .upsert_worker(WorkerSpec::new(id, 1, 1000, 2000))
            .unwrap();
        directory.insert(WorkerId(id), (*url).to_owned());
    }
    let (ready, ready_rx) = watch::channel(false);
    let state = AppState::new(
        router.clone(),
        Arc::new(StaticDirectory(directory)),
        profile,
        limits,
        ready_rx,
    )
    .with_models(["stand-in".to_owned()])
    .with_prompter(prompter);
    let state = tune(state);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_url = format!("http://{}", admin.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let (stop_admin, admin_stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, state.clone(), async {
        let _ = stopped.await;
    }));
    tokio::spawn(serve_admin(admin, state.clone(), None, async {
        let _ = admin_stopped.await;
    }));
    Node {
        url,
        admin_url,
        router,
        state,
        http: reqwest::Client::new(),
        ready,
        _stop: stop,
        _stop_admin: stop_admin,
    }
}

impl Node {
    /// POSTs `body` as JSON to `path` and returns the response (no extra headers).
    pub async fn call(&self, path: &str, body: Value) -> reqwest::Response {
        self.post(path).json(&body).send().await.unwrap()
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(format!("{}{}", self.url, path))
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{}", self.url, path))
            .send()
            .await
            .unwrap()
    }

    /// GET `path` on the admin listener (`/metrics`, `/debug/state`).
    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{}", self.admin_url, path))
            .send()
            .await
            .unwrap()
    }

    pub async fn bookings(&self) -> usize {
        self.router
            .observe()
            .await
            .unwrap()
            .scheduler
            .ledger
            .bookings
    }

    /// Waits (bounded) until the ledger holds `n` bookings.
    pub async fn wait_bookings(&self, n: usize) {
        for _ in 0..200 {
            if self.bookings().await == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "ledger never reached {n} bookings: {}",
            self.bookings().await
        );
    }

    /// Waits (bounded) until the router's ledger is idle and nothing is in flight.
    pub async fn assert_idle(&self) {
        for _ in 0..300 {
            let snap = self.router.observe().await.unwrap();
            if snap.scheduler.ledger.is_idle() && self.state.metrics.inflight() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let snap = self.router.observe().await.unwrap();
        panic!("router not idle: {:?}", snap.scheduler.ledger);
    }
}

/// An error body's `error` object.
pub async fn error_of(response: reqwest::Response) -> Value {
    let body: Value = response.json().await.unwrap();
    body.get("error").cloned().unwrap_or(Value::Null)
}

/// Sends a 300-token request whose first chunk comes after the worker's delay, and waits
/// until it is booked (the pool is then prefill-busy for the gated classes).
pub async fn occupy(node: &Node) -> tokio::task::JoinHandle<u16> {
    let long: Vec<u32> = (0..300).collect();
    let call = node
        .post("/v1/completions")
        .json(&serde_json::json!({"model": "m", "prompt": long}));
    let first = tokio::spawn(async move { call.send().await.unwrap().status().as_u16() });
    node.wait_bookings(1).await;
    first
}
