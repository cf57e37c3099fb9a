//! What the in-process measurement examples share (`local_prefill`, `lora_placement`): a
//! seeded generator, simulated engines and one `serve` node on one in-process bus over real
//! HTTP, an open-loop sender of streamed completions, and percentiles.

use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_core::WorkerId;
use router_node::config::{BusKind, Config};
use router_node::serve::{Listeners, serve_with_bus};
use router_sim::{SimConfig, SimWorker};
use router_tools::loadgen::{Outcome, send_streaming};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A small deterministic generator: the same workload for every configuration compared.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1_000_000.0
    }

    /// Uniform in [low, high].
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    /// The gap to the next Poisson arrival at `rate` per second, in seconds.
    pub fn arrival_gap(&mut self, rate: f64) -> f64 {
        -(1.0 - self.unit()).ln() / rate
    }

    /// `n` unique-looking token ids.
    pub fn prompt(&mut self, n: u64) -> Vec<u32> {
        (0..n).map(|_| 10 + (self.next() % 50_000) as u32).collect()
    }
}

/// A node and its engines, running until [`Fleet::stop`].
pub struct Fleet {
    pub url: String,
    pub workers: Vec<SimWorker>,
    stop: oneshot::Sender<()>,
}

impl Fleet {
    /// Starts one simulated engine per `engines` entry (given a fresh cluster, ids from 1,
    /// fast heartbeats) and a node configured by `tune` over them, all on one in-process
    /// bus; returns once `ready` says the node's view of the fleet is complete.
    pub async fn start(
        engines: Vec<SimConfig>,
        tune: impl FnOnce(&mut Config),
        ready: impl AsyncFn(&reqwest::Client, &str) -> bool,
    ) -> Result<Self, String> {
        let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
        let cluster = format!("example-{}", uuid::Uuid::new_v4().simple());
        let mut workers = Vec::new();
        for (i, cfg) in engines.into_iter().enumerate() {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let cfg = SimConfig {
                worker_id: WorkerId(i as u64 + 1),
                cluster: cluster.clone(),
                heartbeat: Duration::from_millis(100),
                lease: Duration::from_secs(2),
                ..cfg
            };
            workers.push(
                SimWorker::start(listener, Arc::clone(&bus), cfg)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let mut config = Config::default();
        config.node.cluster = cluster;
        config.bus.kind = BusKind::InProcess;
        config.http.listen = "127.0.0.1:0".to_owned();
        config.admin.listen = "127.0.0.1:0".to_owned();
        config.peer_sync.heartbeat_ms = 100;
        config.peer_sync.lease_ms = 500;
        tune(&mut config);
        config.validate().map_err(|e| e.to_string())?;
        let listeners = Listeners::bind(&config).await.map_err(|e| e.to_string())?;
        let url = format!(
            "http://{}",
            listeners.public.local_addr().map_err(|e| e.to_string())?
        );
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(serve_with_bus(config, listeners, bus, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::new();
        for _ in 0..500 {
            if ready(&client, &url).await {
                // Every pool's router has heard every announcement by now.
                tokio::time::sleep(Duration::from_millis(300)).await;
                return Ok(Self { url, workers, stop });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err("the node never saw its whole fleet".to_owned())
    }

    /// Adds up one number of every engine's load report.
    pub async fn engines_sum(&self, of: impl Fn(&router_sim::worker::LoadReport) -> u64) -> u64 {
        let mut sum = 0;
        for worker in &self.workers {
            if let Some(engine) = worker.engine() {
                sum += engine.load().await.map_or(0, |l| of(&l));
            }
        }
        sum
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        for worker in self.workers {
            let _ = worker.shutdown().await;
        }
    }
}

/// Sends `requests` (when, what it is, its body) open loop to `url`'s completions, streamed;
/// each one's tag and time to first token (`None`: refused or failed).
pub async fn send_all<T: Clone + Send + 'static>(
    url: &str,
    requests: &[(Duration, T, Value)],
) -> Vec<(T, Option<Duration>)> {
    let client = reqwest::Client::new();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (at, tag, body) in requests.iter().cloned() {
        tokio::time::sleep_until(start + at).await;
        let (client, url) = (client.clone(), format!("{url}/v1/completions"));
        tasks.push(tokio::spawn(async move {
            let ttft = match send_streaming(&client, &url, None, &body).await {
                Outcome::Admitted(s) if s.completed => s.ttft,
                _ => None,
            };
            (tag, ttft)
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        if let Ok(result) = task.await {
            out.push(result);
        }
    }
    out
}

/// The `p` quantile of sorted durations, in milliseconds (0 when empty).
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}
