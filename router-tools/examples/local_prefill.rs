//! Conditional disaggregation, measured: one disaggregated fleet (2 prefill and 2 decode
//! simulated engines behind one router node, all in this process over real HTTP), the same
//! mixed workload sent once per rule, TTFT by kind of request and goodput.
//!
//! The workload, seeded: Poisson arrivals at `--rate` requests/s for `--seconds`; 40% short
//! prompts (64-256 tokens, unique), 30% long ones (3,000-6,000 tokens, unique), 30% follow-ups
//! of an earlier long one (its prompt and 128 tokens more: a conversation's next turn, its
//! prefix on the decode worker that served the turn before). 32 output tokens each.
//! Goodput: the share of requests answered with their first token within the SLO (500 ms
//! short and follow-ups, 2 s long).
//!
//! ```text
//! cargo run --release -p router-tools --example local_prefill -- --rate 12 --seconds 30
//! ```
//!
//! Options: `--rate` (12), `--seconds` (30), `--speedup` (the engines', 1.0), `--line`
//! (`local_prefill_below_tokens` of the rules that use it, 512), `--seed` (7).

use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_core::WorkerId;
use router_node::config::{BusKind, Config, TopologyKind};
use router_node::serve::{Listeners, serve_with_bus};
use router_sim::{Role, SimConfig, SimWorker};
use router_tools::loadgen::{Outcome, send_streaming};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
struct Args {
    rate: f64,
    seconds: f64,
    speedup: f64,
    line: u64,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        rate: 12.0,
        seconds: 30.0,
        speedup: 1.0,
        line: 512,
        seed: 7,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--rate" => args.rate = number(&value)?,
            "--seconds" => args.seconds = number(&value)?,
            "--speedup" => args.speedup = number(&value)?,
            "--line" => args.line = number(&value)? as u64,
            "--seed" => args.seed = number(&value)? as u64,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(args)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Short,
    Long,
    FollowUp,
}

impl Kind {
    fn slo(self) -> Duration {
        match self {
            Self::Long => Duration::from_secs(2),
            Self::Short | Self::FollowUp => Duration::from_millis(500),
        }
    }
}

/// A small deterministic generator (the workload is the same for every rule).
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

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// The requests: when each is sent (from the start), its kind and its prompt.
fn workload(args: &Args) -> Vec<(Duration, Kind, Vec<u32>)> {
    let mut rng = Rng(args.seed);
    let mut at = 0.0;
    let mut longs: Vec<Vec<u32>> = Vec::new();
    let mut out = Vec::new();
    let fresh = |rng: &mut Rng, n: u64| -> Vec<u32> {
        (0..n).map(|_| 10 + (rng.next() % 50_000) as u32).collect()
    };
    while at < args.seconds {
        at += -(1.0 - rng.unit()).ln() / args.rate;
        let pick = rng.unit();
        let (kind, prompt) = if pick < 0.4 || (pick >= 0.7 && longs.is_empty()) {
            let n = rng.between(64, 256);
            (Kind::Short, fresh(&mut rng, n))
        } else if pick < 0.7 {
            let n = rng.between(3_000, 6_000);
            let prompt = fresh(&mut rng, n);
            longs.push(prompt.clone());
            (Kind::Long, prompt)
        } else {
            let i = (rng.next() % longs.len() as u64) as usize;
            let mut prompt = longs[i].clone();
            prompt.extend(fresh(&mut rng, 128));
            longs[i] = prompt.clone();
            (Kind::FollowUp, prompt)
        };
        out.push((Duration::from_secs_f64(at), kind, prompt));
    }
    out
}

/// One router node over 2 prefill and 2 decode engines, with `rule` set; its API URL.
async fn fleet(
    args: &Args,
    below: u64,
    waits: bool,
) -> Result<(String, Vec<SimWorker>, tokio::sync::oneshot::Sender<()>), String> {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let cluster = format!("local-prefill-{}", uuid::Uuid::new_v4().simple());
    let mut workers = Vec::new();
    for (i, role) in [Role::Prefill, Role::Prefill, Role::Decode, Role::Decode]
        .into_iter()
        .enumerate()
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let cfg = SimConfig {
            worker_id: WorkerId(i as u64 + 1),
            role,
            speedup: args.speedup,
            cluster: cluster.clone(),
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
    config.node.topology = TopologyKind::Disaggregated;
    config.bus.kind = BusKind::InProcess;
    config.http.listen = "127.0.0.1:0".to_owned();
    config.admin.listen = "127.0.0.1:0".to_owned();
    config.peer_sync.heartbeat_ms = 100;
    config.peer_sync.lease_ms = 500;
    config.disagg.local_prefill_below_tokens = below;
    config.disagg.local_prefill_when_prefill_waits = waits;
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
        let ready = client.get(format!("{url}/ready")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            // Both pools know their workers.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return Ok((url, workers, stop));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("the node never became ready".to_owned())
}

/// Sends the workload open loop; (kind, ttft) of every request (`None`: refused or failed).
async fn run(url: &str, requests: &[(Duration, Kind, Vec<u32>)]) -> Vec<(Kind, Option<Duration>)> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .build()
        .unwrap_or_default();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (at, kind, prompt) in requests.iter().cloned() {
        tokio::time::sleep_until(start + at).await;
        let (client, url) = (client.clone(), format!("{url}/v1/completions"));
        tasks.push(tokio::spawn(async move {
            let body = json!({"model": "sim", "prompt": prompt, "max_tokens": 32, "stream": true});
            let ttft = match send_streaming(&client, &url, None, &body).await {
                Outcome::Admitted(s) if s.completed => s.ttft,
                _ => None,
            };
            (kind, ttft)
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(rule: &str, results: &[(Kind, Option<Duration>)]) {
    let mut cells = Vec::new();
    for kind in [Kind::Short, Kind::Long, Kind::FollowUp] {
        let mut ttfts: Vec<Duration> = results
            .iter()
            .filter(|(k, _)| *k == kind)
            .filter_map(|(_, t)| *t)
            .collect();
        ttfts.sort();
        cells.push(format!(
            "{:.0} / {:.0} ms",
            percentile(&ttfts, 0.5).as_secs_f64() * 1e3,
            percentile(&ttfts, 0.99).as_secs_f64() * 1e3
        ));
    }
    let good = results
        .iter()
        .filter(|(k, t)| t.is_some_and(|t| t <= k.slo()))
        .count();
    let failed = results.iter().filter(|(_, t)| t.is_none()).count();
    println!(
        "| {rule} | {} | {:.1} % | {failed} |",
        cells.join(" | "),
        100.0 * good as f64 / results.len().max(1) as f64
    );
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("local_prefill: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("local_prefill: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let requests = workload(&args);
    println!(
        "{} requests at {} req/s, engines at speedup {}; TTFT p50 / p99 by kind, goodput",
        requests.len(),
        args.rate,
        args.speedup
    );
    println!("| rule | short | long | follow-up | goodput | failed |");
    println!("|---|---:|---:|---:|---:|---:|");
    let rules = [
        ("off (every prefill remote)", 0, false),
        ("uncached below the line", args.line, false),
        ("prefill waits", 0, true),
        ("both", args.line, true),
    ];
    for (name, below, waits) in rules {
        let outcome = runtime.block_on(async {
            let (url, workers, stop) = fleet(&args, below, waits).await?;
            let results = run(&url, &requests).await;
            let _ = stop.send(());
            for worker in workers {
                let _ = worker.shutdown().await;
            }
            Ok::<_, String>(results)
        });
        match outcome {
            Ok(results) => report(name, &results),
            Err(e) => {
                eprintln!("local_prefill: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
