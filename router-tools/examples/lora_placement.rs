//! LoRA placement, measured: 4 simulated engines that each serve 8 adapters but hold 2 at once
//! (`max_loras`; a load takes 30 ms of engine time), behind one router node in this process
//! over HTTP. The same seeded workload twice: once with the engines reporting which adapters
//! run (the router then prefers an engine where the request's adapter runs, then one with a
//! free slot, then one where it must wait), once without (load and prefix alone decide).
//!
//! The workload: Poisson arrivals at `--rate` requests/s for `--seconds`; the adapter drawn
//! with skew (adapter i with weight 1 / (i + 1)); unique prompts of 256-1,024 tokens; 32
//! output tokens. Reported: TTFT p50 / p99, adapter loads per request, goodput (first token
//! within 500 ms).
//!
//! ```text
//! cargo run --release -p router-tools --example lora_placement -- --rate 20 --seconds 20
//! ```

use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_core::WorkerId;
use router_node::config::{BusKind, Config};
use router_node::serve::{Listeners, serve_with_bus};
use router_sim::{SimConfig, SimWorker};
use router_tools::loadgen::{Outcome, send_streaming};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;

const ADAPTERS: usize = 8;
const ENGINES: u64 = 4;
const SLO: Duration = Duration::from_millis(500);

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (the same workload for both runs).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    fn unit(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1_000_000.0
    }
}

/// (when, adapter, prompt) of every request.
fn workload(rate: f64, seconds: f64, seed: u64) -> Vec<(Duration, String, Vec<u32>)> {
    let mut rng = Rng(seed);
    let weights: Vec<f64> = (0..ADAPTERS).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let total: f64 = weights.iter().sum();
    let mut at = 0.0;
    let mut out = Vec::new();
    while at < seconds {
        at += -(1.0 - rng.unit()).ln() / rate;
        let mut pick = rng.unit() * total;
        let mut adapter = ADAPTERS - 1;
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                adapter = i;
                break;
            }
            pick -= w;
        }
        let len = 256 + rng.next() % 769;
        let prompt = (0..len)
            .map(|_| 10 + (rng.next() % 50_000) as u32)
            .collect();
        out.push((
            Duration::from_secs_f64(at),
            format!("adapter-{adapter}"),
            prompt,
        ));
    }
    out
}

/// One node over the engines; its API URL, the engines and the node's stop switch.
async fn fleet(
    report: bool,
) -> Result<(String, Vec<SimWorker>, tokio::sync::oneshot::Sender<()>), String> {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let cluster = format!("lora-{}", uuid::Uuid::new_v4().simple());
    let loras: Vec<String> = (0..ADAPTERS).map(|i| format!("adapter-{i}")).collect();
    let mut workers = Vec::new();
    for i in 0..ENGINES {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let cfg = SimConfig {
            worker_id: WorkerId(i + 1),
            cluster: cluster.clone(),
            loras: loras.clone(),
            max_loras: 2,
            report_adapters: report,
            heartbeat: Duration::from_millis(100),
            lease: Duration::from_secs(2),
            ..SimConfig::default()
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
    config.validate().map_err(|e| e.to_string())?;
    let listeners = Listeners::bind(&config).await.map_err(|e| e.to_string())?;
    let url = format!(
        "http://{}",
        listeners.public.local_addr().map_err(|e| e.to_string())?
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with_bus(config, listeners, bus, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    for _ in 0..500 {
        let models = client.get(format!("{url}/v1/models")).send().await;
        let listed = match models {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        // Every engine with every adapter known (the adapters' requests need them).
        if listed.matches("adapter-").count() >= ADAPTERS {
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok((url, workers, stop));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("the fleet never listed its adapters".to_owned())
}

async fn run(url: &str, requests: &[(Duration, String, Vec<u32>)]) -> Vec<Option<Duration>> {
    let client = reqwest::Client::new();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (at, adapter, prompt) in requests.iter().cloned() {
        tokio::time::sleep_until(start + at).await;
        let (client, url) = (client.clone(), format!("{url}/v1/completions"));
        tasks.push(tokio::spawn(async move {
            let body =
                json!({"model": adapter, "prompt": prompt, "max_tokens": 32, "stream": true});
            match send_streaming(&client, &url, None, &body).await {
                Outcome::Admitted(s) if s.completed => s.ttft,
                _ => None,
            }
        }));
    }
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.ok().flatten());
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

fn main() -> std::process::ExitCode {
    let (rate, seconds) = (arg("--rate", 20.0), arg("--seconds", 20.0));
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return std::process::ExitCode::FAILURE;
    };
    let requests = workload(rate, seconds, arg("--seed", 7.0) as u64);
    println!(
        "{} requests at {rate} req/s over {ADAPTERS} adapters, {ENGINES} engines of 2 slots",
        requests.len()
    );
    println!(
        "| engines report their adapters | TTFT p50 / p99 | adapter loads per request | goodput | failed |"
    );
    println!("|---|---:|---:|---:|---:|");
    for report in [false, true] {
        let outcome = runtime.block_on(async {
            let (url, workers, stop) = fleet(report).await?;
            let ttfts = run(&url, &requests).await;
            let mut loads = 0;
            for worker in &workers {
                if let Some(engine) = worker.engine() {
                    loads += engine.load().await.map_or(0, |l| l.lora_loads);
                }
            }
            let _ = stop.send(());
            for worker in workers {
                let _ = worker.shutdown().await;
            }
            Ok::<_, String>((ttfts, loads))
        });
        let (ttfts, loads) = match outcome {
            Ok(done) => done,
            Err(e) => {
                eprintln!("lora_placement: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let mut ok: Vec<Duration> = ttfts.iter().filter_map(|t| *t).collect();
        ok.sort();
        let good = ok.iter().filter(|t| **t <= SLO).count();
        println!(
            "| {} | {:.0} / {:.0} ms | {:.2} | {:.1} % | {} |",
            if report { "yes" } else { "no" },
            percentile(&ok, 0.5),
            percentile(&ok, 0.99),
            loads as f64 / ttfts.len().max(1) as f64,
            100.0 * good as f64 / ttfts.len().max(1) as f64,
            ttfts.len() - ok.len()
        );
    }
    std::process::ExitCode::SUCCESS
}
