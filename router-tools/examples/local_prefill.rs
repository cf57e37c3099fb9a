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

// Shared with `lora_placement`, which uses all of it.
#[path = "support/fleet.rs"]
#[allow(dead_code)]
mod fleet;

use fleet::{Fleet, Rng, percentile_ms, send_all};
use router_node::config::TopologyKind;
use router_sim::{Role, SimConfig};
use serde_json::{Value, json};
use std::time::Duration;

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

/// The requests: when each is sent (from the start), its kind and its body.
fn workload(args: &Args) -> Vec<(Duration, Kind, Value)> {
    let mut rng = Rng(args.seed);
    let mut at = 0.0;
    let mut longs: Vec<Vec<u32>> = Vec::new();
    let mut out = Vec::new();
    while at < args.seconds {
        at += rng.arrival_gap(args.rate);
        let pick = rng.unit();
        let (kind, prompt) = if pick < 0.4 || (pick >= 0.7 && longs.is_empty()) {
            let n = rng.between(64, 256);
            (Kind::Short, rng.prompt(n))
        } else if pick < 0.7 {
            let n = rng.between(3_000, 6_000);
            let prompt = rng.prompt(n);
            longs.push(prompt.clone());
            (Kind::Long, prompt)
        } else {
            let i = (rng.next() % longs.len() as u64) as usize;
            let mut prompt = longs[i].clone();
            prompt.extend(rng.prompt(128));
            longs[i] = prompt.clone();
            (Kind::FollowUp, prompt)
        };
        let body = json!({"model": "sim", "prompt": prompt, "max_tokens": 32, "stream": true});
        out.push((Duration::from_secs_f64(at), kind, body));
    }
    out
}

/// One node over 2 prefill and 2 decode engines, with the rule set.
async fn fleet(args: &Args, below: u64, waits: bool) -> Result<Fleet, String> {
    let engines = [Role::Prefill, Role::Prefill, Role::Decode, Role::Decode]
        .map(|role| SimConfig {
            role,
            speedup: args.speedup,
            ..SimConfig::default()
        })
        .to_vec();
    let tune = |config: &mut router_node::config::Config| {
        config.node.topology = TopologyKind::Disaggregated;
        config.disagg.local_prefill_below_tokens = below;
        config.disagg.local_prefill_when_prefill_waits = waits;
    };
    Fleet::start(engines, tune, async |client, url| {
        let ready = client.get(format!("{url}/ready")).send().await;
        ready.is_ok_and(|r| r.status().is_success())
    })
    .await
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
            percentile_ms(&ttfts, 0.5),
            percentile_ms(&ttfts, 0.99)
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
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return std::process::ExitCode::FAILURE;
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
            let fleet = fleet(&args, below, waits).await?;
            let results = send_all(&fleet.url, &requests).await;
            fleet.stop().await;
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
