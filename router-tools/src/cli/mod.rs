//! The command line of `router-tools`: `demo` runs the embedded demo (over HTTP, or
//! `--offline` in simulated time); `worker --sim` runs a simulated engine
//! (`router_tools::worker`); `bench` replays a trace against an endpoint (`bench.rs`, over
//! `router_tools::bench`); `trace synth` writes a synthetic trace (`trace.rs`).
//!
//! Exit codes: 0 success (a bench run that finished, even with shed requests), 1 a demo
//! whose accounting or ledgers came out wrong, or a bench run whose every request failed in
//! transport or whose files could not be written, 2 a usage, configuration or trace error.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use router_tools::demo;

mod bench;
mod trace;

#[derive(Debug, Parser)]
#[command(
    name = "router-tools",
    version,
    about = "Switchyard's demo, load tools and simulated worker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The embedded demo: a router node and simulated engines in one process, a built-in
    /// workload over real HTTP, a summary; then it keeps serving (`--once` stops).
    Demo(DemoArgs),
    /// Run a simulated engine: an OpenAI API over the mocker, announced on the bus.
    Worker(Box<router_tools::worker::WorkerArgs>),
    /// Replay a Mooncake trace (or send synthetic load at a constant rate) against an OpenAI
    /// endpoint, open loop, and report TTFT / ITL / end-to-end percentiles, throughput, shed
    /// rate and prefix hit rate per class. Ctrl-C or SIGTERM stops sending; the requests
    /// already sent finish and are reported (a second Ctrl-C exits at once).
    Bench(Box<bench::BenchArgs>),
    /// Trace tools: `trace synth` writes a synthetic Mooncake trace with the prefix sharing
    /// asked for (system prompts, conversation depth, fan-out, arrival process).
    #[command(subcommand)]
    Trace(trace::TraceCommand),
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Disaggregated: a prefill pool and a decode pool of N workers each (over HTTP: not
    /// available yet; with --offline: simulated).
    #[arg(long)]
    disagg: bool,
    /// Workers per pool (one rank each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Requests in the built-in workload.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    requests: u32,
    /// Where the node serves the OpenAI API (port 0: any free port).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8080",
        conflicts_with = "offline"
    )]
    listen: SocketAddr,
    /// Where the node serves /metrics and /debug/state (port 0: any free port; printed).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:0",
        conflicts_with = "offline"
    )]
    admin_listen: SocketAddr,
    /// Exit after the summary instead of serving until Ctrl-C.
    #[arg(long)]
    once: bool,
    /// Seed of the workload generator (same seed, same workload).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// No HTTP: the admission schedulers over simulated engines in simulated time
    /// (deterministic, no network, about a second).
    #[arg(long)]
    offline: bool,
}

/// Parses `args` (including the program name) and runs the command.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match router_node::runtime::parse_args::<Cli>(args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match cli.command {
        Command::Demo(args) => run_demo(&args),
        Command::Worker(args) => router_tools::worker::run(&args),
        Command::Bench(args) => bench::run(*args),
        Command::Trace(command) => trace::run(command),
    }
}

fn run_demo(args: &DemoArgs) -> ExitCode {
    if args.offline {
        return run_offline_demo(args);
    }
    demo::http::main(&demo::http::HttpOptions {
        disagg: args.disagg,
        workers: args.workers,
        requests: args.requests,
        seed: args.seed,
        listen: args.listen,
        admin_listen: args.admin_listen,
        once: args.once,
        json: args.json,
    })
}

fn run_offline_demo(args: &DemoArgs) -> ExitCode {
    let opts = demo::Options {
        disagg: args.disagg,
        workers: args.workers,
        requests: args.requests,
        seed: args.seed,
    };
    let report = match demo::run(&opts) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("router-tools demo: {e}");
            return ExitCode::from(1);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("router-tools demo: cannot encode the report: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", report.render_table());
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        eprintln!("router-tools demo: accounting or ledger check failed (see the report)");
        ExitCode::from(1)
    }
}
