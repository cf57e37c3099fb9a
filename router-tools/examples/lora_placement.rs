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

#[path = "support/fleet.rs"]
mod fleet;

use fleet::{Fleet, Rng, percentile_ms, send_all};
use router_sim::SimConfig;
use serde_json::{Value, json};
use std::time::Duration;

const ADAPTERS: usize = 8;
const ENGINES: usize = 4;
const SLO: Duration = Duration::from_millis(500);

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// (when, adapter, body) of every request.
fn workload(rate: f64, seconds: f64, seed: u64) -> Vec<(Duration, usize, Value)> {
    let mut rng = Rng(seed);
    let weights: Vec<f64> = (0..ADAPTERS).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let total: f64 = weights.iter().sum();
    let mut at = 0.0;
    let mut out = Vec::new();
    while at < seconds {
        at += rng.arrival_gap(rate);
        let mut pick = rng.unit() * total;
        let mut adapter = ADAPTERS - 1;
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                adapter = i;
                break;
            }
            pick -= w;
        }
        let len = rng.between(256, 1_024);
        let body = json!({"model": format!("adapter-{adapter}"), "prompt": rng.prompt(len),
                          "max_tokens": 32, "stream": true});
        out.push((Duration::from_secs_f64(at), adapter, body));
    }
    out
}

/// The engines and the node, the engines reporting their adapters or not.
async fn fleet(report: bool) -> Result<Fleet, String> {
    let loras: Vec<String> = (0..ADAPTERS).map(|i| format!("adapter-{i}")).collect();
    let engine = SimConfig {
        loras,
        max_loras: 2,
        report_adapters: report,
        ..SimConfig::default()
    };
    // Ready when the model list names every adapter (their requests need them).
    Fleet::start(
        vec![engine; ENGINES],
        |_| {},
        async |client, url| {
            let models = client.get(format!("{url}/v1/models")).send().await;
            let listed = match models {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            listed.matches("adapter-").count() >= ADAPTERS
        },
    )
    .await
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
            let fleet = fleet(report).await?;
            let ttfts = send_all(&fleet.url, &requests).await;
            let loads = fleet.engines_sum(|l| l.lora_loads).await;
            fleet.stop().await;
            Ok::<_, String>((ttfts, loads))
        });
        let (ttfts, loads) = match outcome {
            Ok(done) => done,
            Err(e) => {
                eprintln!("lora_placement: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let mut ok: Vec<Duration> = ttfts.iter().filter_map(|(_, t)| *t).collect();
        ok.sort();
        let good = ok.iter().filter(|t| **t <= SLO).count();
        println!(
            "| {} | {:.0} / {:.0} ms | {:.2} | {:.1} % | {} |",
            if report { "yes" } else { "no" },
            percentile_ms(&ok, 0.5),
            percentile_ms(&ok, 0.99),
            loads as f64 / ttfts.len().max(1) as f64,
            100.0 * good as f64 / ttfts.len().max(1) as f64,
            ttfts.len() - ok.len()
        );
    }
    std::process::ExitCode::SUCCESS
}
