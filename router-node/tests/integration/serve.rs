//! `router-node serve`: a node started in-process on the in-process bus (health, readiness
//! following a worker's announcement, metrics, a request through the worker registry, a
//! graceful drain). The binary as a process (exit codes, `print-config`, SIGTERM) is tested
//! with the whole-system tests (`tests/tests/system/serve_cli.rs`).

use crate::support;
use router_actors::WorkerLink;
use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_core::{PoolRole, WorkerSpec};
use router_node::config::{BusKind, Config};
use router_node::serve::{Listeners, ServeError, serve_with_bus};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub(crate) struct Served {
    pub(crate) url: String,
    pub(crate) admin: String,
    pub(crate) bus: Arc<dyn Bus>,
    stop: Option<oneshot::Sender<()>>,
    done: JoinHandle<Result<(), ServeError>>,
    pub(crate) http: reqwest::Client,
}

pub(crate) fn test_config(drain_ms: u64) -> Config {
    let mut config = Config::default();
    config.node.cluster = format!("serve-test-{}", uuid::Uuid::new_v4().simple());
    config.bus.kind = BusKind::InProcess;
    config.http.listen = "127.0.0.1:0".to_owned();
    config.admin.listen = "127.0.0.1:0".to_owned();
    config.http.drain_timeout_ms = drain_ms;
    config.http.models = vec!["stand-in".to_owned()];
    config.peer_sync.heartbeat_ms = 50;
    config.peer_sync.lease_ms = 300;
    config.peer_sync.snapshot_window_ms = 100;
    config.scheduler.recheck_ms = 50;
    config.validate().unwrap();
    config
}

pub(crate) async fn start(config: Config) -> Served {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let listeners = Listeners::bind(&config).await.unwrap();
    let url = format!("http://{}", listeners.public.local_addr().unwrap());
    let admin = format!("http://{}", listeners.admin.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(serve_with_bus(config, listeners, bus.clone(), async {
        let _ = stopped.await;
    }));
    Served {
        url,
        admin,
        bus,
        stop: Some(stop),
        done,
        http: reqwest::Client::new(),
    }
}

impl Served {
    pub(crate) async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{}", self.url, path))
            .send()
            .await
            .unwrap()
    }

    pub(crate) async fn wait_ready(&self, want: u16) {
        for _ in 0..300 {
            if self.get("/ready").await.status().as_u16() == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("/ready never answered {want}");
    }

    /// Announces worker 1 (one rank), served at `endpoint`, on the node's bus.
    async fn announce(&self, cluster: &str, endpoint: &str) -> WorkerLink {
        let announce = WorkerAnnounce {
            spec: WorkerSpec::new(1, 1, 10_000, 8192),
            pool: PoolRole::Aggregated,
            endpoint: endpoint.to_owned(),
            heartbeat_ms: 50,
            lease_ms: 1_000,
            leaving: false,
        };
        WorkerLink::start(
            self.bus.clone(),
            &Subjects::new(cluster),
            announce,
            Duration::from_millis(50),
        )
        .await
        .unwrap()
    }

    /// A simulated worker on the node's bus, as `cfg` has it (its cluster the node's, or a
    /// model's pool's), heart-beating every 50 ms.
    pub(crate) async fn sim_worker(&self, cfg: router_sim::SimConfig) -> router_sim::SimWorker {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cfg = router_sim::SimConfig {
            speedup: 50.0,
            heartbeat: Duration::from_millis(50),
            lease: Duration::from_millis(1_000),
            ..cfg
        };
        router_sim::SimWorker::start(listener, self.bus.clone(), cfg)
            .await
            .unwrap()
    }

    /// Posts `body` to `/v1/completions`.
    pub(crate) async fn complete(&self, body: serde_json::Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/completions", self.url))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// The admin listener's `path`, as text.
    pub(crate) async fn admin_text(&self, path: &str) -> String {
        self.http
            .get(format!("{}{path}", self.admin))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) async fn stop(mut self) -> Result<(), ServeError> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.done)
            .await
            .expect("serve returns after its shutdown")
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_ready_metrics_and_a_request_through_the_registry() {
    let config = test_config(5_000);
    let cluster = config.node.cluster.clone();
    let node = start(config).await;

    let health = node.get("/health").await;
    assert_eq!(health.status(), 200);
    // Not ready before any worker is known.
    assert_eq!(node.get("/ready").await.status(), 503);
    let metrics = node
        .http
        .get(format!("{}/metrics", node.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("# EOF"));
    let models: serde_json::Value = node.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "stand-in");

    let worker = support::spawn_worker(3, Duration::from_millis(1)).await;
    let link = node.announce(&cluster, &worker.url).await;
    node.wait_ready(200).await;

    // The admitted request reaches the worker whose endpoint the registry learned.
    let response = node
        .http
        .post(format!("{}/v1/completions", node.url))
        .json(&serde_json::json!({"model": "stand-in", "prompt": "hello there", "max_tokens": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["text"], "toktoktok");
    assert_eq!(worker.seen.lock().unwrap().len(), 1);

    // The worker goes away: its lease runs out and the node is no longer ready.
    link.shutdown().await.unwrap();
    node.wait_ready(503).await;

    node.stop().await.unwrap();
}

/// A node (drain timeout `drain_ms`) streaming from a stand-in worker that sends `chunks`
/// chunks 100 ms apart, its first chunk already read; the worker and its link stay alive.
async fn mid_stream(
    drain_ms: u64,
    chunks: usize,
) -> (
    Served,
    reqwest::Response,
    support::StandInWorker,
    WorkerLink,
) {
    let config = test_config(drain_ms);
    let cluster = config.node.cluster.clone();
    let node = start(config).await;
    let worker = support::spawn_worker(chunks, Duration::from_millis(100)).await;
    let link = node.announce(&cluster, &worker.url).await;
    node.wait_ready(200).await;
    let mut response = node
        .http
        .post(format!("{}/v1/completions", node.url))
        .json(&serde_json::json!({"model": "m", "prompt": "hi", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    (node, response, worker, link)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_an_in_flight_stream() {
    // Five chunks, 100 ms apart: the stream is still going when the shutdown comes.
    let (node, mut response, _worker, _link) = mid_stream(5_000, 5).await;

    let url = node.url.clone();
    let stopping = tokio::spawn(node.stop());
    // Draining: not ready, and no new connections.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fresh = reqwest::Client::new()
        .get(format!("{url}/health"))
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(fresh.is_err(), "a new connection was served while draining");

    // The in-flight stream runs to its end.
    let mut rest = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    let rest = String::from_utf8(rest).unwrap();
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    stopping.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_timeout_bounds_the_shutdown() {
    // A stream far longer than the drain timeout.
    let (node, mut response, _worker, _link) = mid_stream(200, 100).await;
    let started = std::time::Instant::now();
    node.stop().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The cut stream ends at once with an error event, not `[DONE]`.
    let rest = tokio::time::timeout(Duration::from_secs(3), async {
        let mut rest = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            rest.extend_from_slice(&chunk);
        }
        String::from_utf8(rest).unwrap()
    })
    .await
    .expect("the cut stream ends");
    assert!(rest.contains("shut down before the stream ended"), "{rest}");
    assert!(!rest.contains("[DONE]"), "{rest}");
}
