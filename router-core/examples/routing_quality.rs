//! Routing quality on the Mooncake conversation trace: block-level prefix hit rate of round
//! robin, seeded random and the cost selector with 4, 8 and 16 capacity-bound workers,
//! against one infinite cache (the ideal) and one LRU of the fleet's total size (pooled).
//!
//! ```text
//! cargo run --release -p router-core --example routing_quality -- \
//!     [--requests N] [--capacity BLOCKS] [--speedup X] [--trace PATH] \
//!     [--overlap-credit X] [--prefill-load-scale X] [--fleets 4,8,16]
//! ```
//!
//! The model is described in `tests/support/routing_sim.rs`.

#[path = "../tests/support/routing_sim.rs"]
mod sim;

use router_core::SelectionConfig;
use sim::{Policy, SimConfig, SimReport};
use std::path::PathBuf;
use std::process::ExitCode;

const FLEETS: [u32; 3] = [4, 8, 16];

#[derive(Debug)]
struct Args {
    requests: Option<usize>,
    capacity: Option<usize>,
    speedup: Option<f64>,
    trace: Option<PathBuf>,
    selection: SelectionConfig,
    fleets: Vec<u32>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        requests: None,
        capacity: None,
        speedup: None,
        trace: None,
        selection: SelectionConfig::default(),
        fleets: FLEETS.to_vec(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--requests" => args.requests = Some(number(&flag, &value()?)?),
            "--capacity" => args.capacity = Some(number(&flag, &value()?)?),
            "--speedup" => args.speedup = Some(number(&flag, &value()?)?),
            "--trace" => args.trace = Some(PathBuf::from(value()?)),
            "--overlap-credit" => args.selection.overlap_credit = number(&flag, &value()?)?,
            "--prefill-load-scale" => args.selection.prefill_load_scale = number(&flag, &value()?)?,
            "--fleets" => {
                args.fleets = value()?
                    .split(',')
                    .map(|v| number(&flag, v.trim()))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    args.selection
        .validate()
        .map_err(|e| format!("invalid selection setting: {e}"))?;
    if args.fleets.is_empty() || args.fleets.contains(&0) {
        return Err("--fleets needs worker counts of at least 1".to_owned());
    }
    Ok(args)
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag}: {v:?} is not a valid number"))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("routing_quality: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let path = match args.trace {
        Some(p) => p,
        None => sim::trace_path().map_err(|e| e.to_string())?,
    };
    let trace = sim::load_trace(&path, args.requests).map_err(|e| e.to_string())?;
    let blocks: usize = trace.iter().map(|r| r.hash_ids.len()).sum();
    let ideal = sim::ideal(&trace);

    let base = SimConfig::new(FLEETS[0]);
    let capacity = args.capacity.unwrap_or(base.capacity_blocks);
    let speedup = args.speedup.unwrap_or(base.speedup);
    println!(
        "Mooncake conversation trace: {} requests, {blocks} blocks of {} tokens ({})",
        trace.len(),
        sim::TRACE_BLOCK_TOKENS,
        path.display()
    );
    println!(
        "Selection: overlap_credit {}, prefill_load_scale {}",
        args.selection.overlap_credit, args.selection.prefill_load_scale
    );
    println!(
        "KV per worker: {capacity} blocks ({} tokens); completion: uncached / {} tok/ms + output x {} ms; arrivals x{speedup}",
        capacity as u64 * u64::from(sim::TRACE_BLOCK_TOKENS),
        base.prefill_tokens_per_ms,
        base.decode_ms_per_token,
    );
    println!();
    println!(
        "Block-level prefix hit rate (largest share of requests on one worker in parentheses)."
    );
    println!();
    println!(
        "| workers | round robin | random | cost selector | pooled LRU (N x C) | ideal (one infinite cache) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");

    let mut reports: Vec<SimReport> = Vec::new();
    for &workers in &args.fleets {
        let config = SimConfig {
            capacity_blocks: capacity,
            speedup,
            selection: args.selection,
            ..SimConfig::new(workers)
        };
        let row: Vec<SimReport> = Policy::ALL
            .iter()
            .map(|&p| sim::simulate(&trace, &config, p))
            .collect();
        let pooled = sim::pooled_lru(&trace, capacity * workers as usize);
        let cells: Vec<String> = row
            .iter()
            .map(|r| format!("{:.1} % ({:.0} %)", r.hits.rate(), r.max_share()))
            .collect();
        println!(
            "| {workers} | {} | {:.1} % | {:.1} % |",
            cells.join(" | "),
            pooled.rate(),
            ideal.rate()
        );
        reports.extend(row);
    }

    println!();
    println!(
        "| workers | policy | reachable hit | TTFT p50 | TTFT p99 | uncached prompt tokens | index/cache disagreements | event errors | not admitted | bookings left |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut sound = true;
    for r in &reports {
        println!(
            "| {} | {} | {:.1} % | {:.0} ms | {:.0} ms | {:.1} % | {} | {} | {} | {} |",
            r.workers,
            r.policy.name(),
            100.0 * r.reachable_hit_blocks as f64 / r.hits.total_blocks.max(1) as f64,
            r.ttft_ms(0.5),
            r.ttft_ms(0.99),
            r.uncached_token_pct,
            r.index_disagreements,
            r.event_errors,
            r.not_admitted,
            r.bookings_left
        );
        sound &= r.index_disagreements == 0
            && r.event_errors == 0
            && r.not_admitted == 0
            && r.bookings_left == 0;
    }
    if sound {
        Ok(())
    } else {
        Err("the replay was not consistent (see the second table)".to_owned())
    }
}
