//! `cluster-burst`: issue #15's burst as a command with a report. Starts the cluster harness
//! (a real nats-server, N `serve` replicas behind a real HAProxy, 2 prefill and 2 decode
//! simulated workers), sends the burst `--runs` times (fresh prompts each run, the same
//! fleet) and prints a table (per run: the peak KV blocks each decode worker really used,
//! the overshoot over the class's limit in blocks and in % of capacity, requests ok and
//! failed, the peak's share of the limit, the decode workers' preemptions) and a JSON line
//! with every figure. `--line prefill` tests the prefill pool's line instead: a class with a
//! 3,000-token `prefill_busy_threshold` and no decode fraction; the figure that counts is
//! then the most prompts each prefill worker held at once (its own `peak_requests`, over the
//! runs so far), against what one router gives it.
//!
//! ```sh
//! cargo build --release -p router-node
//! cargo run --release -p switchyard-system-tests --bin cluster-burst -- --replicas 3 --runs 10
//! cargo run --release -p switchyard-system-tests --bin cluster-burst -- --replicas 3 --line prefill
//! ```
//!
//! It runs the `router-node` of its own profile (`SWITCHYARD_ROUTER_NODE_BIN` for another),
//! the nats-server of `NATS_SERVER_BIN` or `.tools/nats`, the HAProxy of `HAPROXY_BIN` or
//! `.tools/haproxy` (`scripts/install-nats.sh`, `scripts/install-haproxy.sh`).
//!
//! Exit codes: 0 when every request of every run completed and every ledger returned to
//! idle; 1 otherwise; 3 when `--max-overshoot-blocks` was given and a run went further
//! over the limit, or `--max-prefill-held` and a prefill worker held more prompts at once;
//! 2 for usage errors.

use clap::Parser;
use serde_json::json;
use std::process::ExitCode;
use std::time::Duration;
use switchyard_system_tests::burst::{BurstLine, BurstReport, BurstSpec, run_burst};

/// The class line to test.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Line {
    /// `decode_busy_threshold_frac = 0.5` of the decode workers' KV.
    Decode,
    /// `prefill_busy_threshold = 3000` tokens on the prefill workers.
    Prefill,
}

#[derive(Debug, Parser)]
#[command(
    name = "cluster-burst",
    about = "Issue #15's burst through N replicas behind HAProxy"
)]
struct Args {
    /// `serve` replicas behind HAProxy.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=16))]
    replicas: u64,
    /// Bursts to send, one after the other, on the same fleet.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    runs: u64,
    /// Concurrent requests of one burst.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=2000))]
    requests: u64,
    /// The simulated workers' speedup.
    #[arg(long, default_value_t = 10.0)]
    speedup: f64,
    /// Workers' announcement and load period and the replicas' peer heartbeat, ms.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    heartbeat_ms: u64,
    /// Seed of the first run's prompts (run i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The class line the burst runs against.
    #[arg(long, value_enum, default_value_t = Line::Decode)]
    line: Line,
    /// Replicas admit on their own views, without room credits (the design before, for
    /// contrast).
    #[arg(long)]
    no_credits: bool,
    /// Prefill admissions do not hold decode room (and so no credits either): what
    /// reservations buy, for contrast.
    #[arg(long)]
    no_reservations: bool,
    /// Exit with code 3 when a run's worst peak goes more than this many blocks over the
    /// limit (issue #15's goal: 10, 1 % of 1,024).
    #[arg(long)]
    max_overshoot_blocks: Option<u64>,
    /// Exit with code 3 when a prefill worker held more than this many prompts at once (one
    /// router's bound with `--line prefill`: 4).
    #[arg(long)]
    max_prefill_held: Option<u64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !(args.speedup.is_finite() && args.speedup > 0.0) {
        eprintln!("cluster-burst: --speedup must be a positive number");
        return ExitCode::from(2);
    }
    let runtime = match router_node::runtime::start("cluster-burst") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let base = match args.line {
        Line::Decode => BurstSpec::default(),
        Line::Prefill => BurstSpec::prefill_line(),
    };
    let spec = BurstSpec {
        replicas: args.replicas as usize,
        requests: args.requests as usize,
        speedup: args.speedup,
        heartbeat_ms: args.heartbeat_ms,
        room_credits: !(args.no_credits || args.no_reservations),
        decode_reservations: !args.no_reservations,
        ..base
    };
    eprintln!(
        "cluster-burst: starting nats-server, {} replica(s) behind HAProxy, {} prefill + {} \
         decode workers (decode KV {} blocks), {}",
        spec.replicas,
        spec.prefill_workers,
        spec.decode_workers,
        spec.decode_kv_blocks,
        match spec.line {
            BurstLine::Decode => format!("class limit {} decode blocks", spec.limit()),
            BurstLine::Prefill => format!(
                "class prefill line {} tokens ({} prompts of {} per prefill worker)",
                spec.prefill_busy_threshold,
                spec.prefill_limit(),
                spec.prompt_tokens
            ),
        }
    );
    let cluster = spec.cluster().start().await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    println!(
        "{:>4} {:>8} {:>14} {:>16} {:>10} {:>8} {:>9} {:>11} {:>8} {:>7}",
        "run",
        "replicas",
        "prefill held",
        "peak per decode",
        "over (blk)",
        "over %",
        "ok/failed",
        "peak/limit",
        "preempt",
        "wall s"
    );
    let mut reports: Vec<BurstReport> = Vec::new();
    for run in 0..args.runs {
        if let Err(held) = cluster.wait_ledgers_idle(Duration::from_secs(30)).await {
            eprintln!(
                "cluster-burst: the fleet is not idle before run {}: {held}",
                run + 1
            );
            return ExitCode::from(1);
        }
        let report = run_burst(&cluster, &spec, args.seed + run).await;
        println!(
            "{:>4} {:>8} {:>14} {:>16} {:>10} {:>7.1}% {:>9} {:>11.2} {:>8} {:>7.1}",
            run + 1,
            report.replicas,
            report.prefill_peaks_text(),
            report.peaks_text(),
            report.overshoot_blocks(),
            report.overshoot_pct(),
            format!("{}/{}", report.ok, report.failed),
            report.utilisation(),
            report.preemptions,
            report.wall.as_secs_f64(),
        );
        for failure in &report.failures {
            eprintln!("cluster-burst: run {}: {failure}", run + 1);
        }
        if let Err(held) = &report.ledgers_idle {
            eprintln!("cluster-burst: run {}: {held}", run + 1);
        }
        reports.push(report);
    }
    let worst = reports
        .iter()
        .map(BurstReport::overshoot_blocks)
        .max()
        .unwrap_or(0);
    let prefill_held = reports
        .iter()
        .map(BurstReport::prefill_peak)
        .max()
        .unwrap_or(0);
    let failed: usize = reports.iter().map(|r| r.failed).sum();
    let idle = reports.iter().all(|r| r.ledgers_idle.is_ok());
    println!(
        "{}",
        json!({
            "scenario": "cluster-burst",
            "line": format!("{:?}", spec.line).to_lowercase(),
            "replicas": spec.replicas,
            "runs": reports.iter().map(BurstReport::to_json).collect::<Vec<_>>(),
            "requests_per_run": spec.requests,
            "prompt_tokens": spec.prompt_tokens,
            "max_tokens": spec.max_tokens,
            "speedup": spec.speedup,
            "heartbeat_ms": spec.heartbeat_ms,
            "decode_kv_blocks": spec.decode_kv_blocks,
            "limit_blocks": spec.limit(),
            "max_overshoot_blocks": worst,
            "max_overshoot_pct_of_capacity": 100.0 * worst as f64 / spec.decode_kv_blocks as f64,
            "prefill_busy_threshold": spec.prefill_busy_threshold,
            "prefill_limit_requests": spec.prefill_limit(),
            "max_prefill_held": prefill_held,
            "failed": failed,
            "ledgers_idle": idle,
        })
    );
    for (name, stopped) in cluster.stop() {
        if name != "haproxy" && stopped.code != Some(0) {
            eprintln!(
                "cluster-burst: {name} exited with {:?}: {}",
                stopped.code, stopped.stderr
            );
        }
    }
    if failed > 0 || !idle {
        ExitCode::from(1)
    } else if args.max_overshoot_blocks.is_some_and(|max| worst > max)
        || args.max_prefill_held.is_some_and(|max| prefill_held > max)
    {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
