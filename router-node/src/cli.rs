//! The command line: `demo` runs the embedded demo (over HTTP, or `--offline` in simulated
//! time); `serve` runs a router node
//! (`router_node::serve`); `worker --sim` runs a simulated engine (`router_node::worker`);
//! `print-config` prints the effective configuration; `bench` replays a trace against an
//! endpoint (`router_node::bench`).
//!
//! Exit codes: 0 success (a bench run that finished, even with shed requests), 1 a demo
//! whose accounting or ledgers came out wrong, a node that failed while running or a bench
//! run whose every request failed in transport, 2 a usage, configuration or trace error.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::demo;
use router_node::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "router-node",
    version,
    about = "Switchyard: a KV-cache-aware LLM request router"
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
    /// Serve the OpenAI-compatible HTTP endpoint: one router node (SIGINT/SIGTERM drains).
    Serve(ConfigArgs),
    /// Run a simulated engine: an OpenAI API over the mocker, announced on the bus.
    Worker(Box<router_node::worker::WorkerArgs>),
    /// Link a real engine (vLLM, SGLang) to the routers over NATS: announce it, relay its KV
    /// events and load, and take it out of the fleet when it stops answering.
    Link(Box<router_node::link::LinkArgs>),
    /// Replay a Mooncake trace against an OpenAI endpoint, open loop, and report TTFT / ITL /
    /// end-to-end percentiles, throughput, shed rate and prefix hit rate per class.
    Bench(BenchArgs),
    /// Print the effective configuration (defaults, then the file, then the environment)
    /// as TOML.
    PrintConfig(ConfigArgs),
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

/// The node's configuration file. Every key can be overridden from the environment:
/// SWITCHYARD_<SECTION>__<KEY>, e.g. SWITCHYARD_HTTP__BODY_LIMIT_BYTES (docs/configuration.md).
/// Traces: the standard OTEL_* variables (docs/observability.md).
#[derive(Debug, Args)]
struct ConfigArgs {
    /// A TOML file; absent: the defaults (and the environment).
    #[arg(long, short = 'c', value_name = "FILE", env = router_node::config::ENV_CONFIG)]
    config: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// The trace: Mooncake JSONL (`timestamp` ms, `input_length`, `output_length`,
    /// `hash_ids`).
    #[arg(long, value_name = "PATH")]
    trace: PathBuf,
    /// The endpoint's base URL (requests go to URL/v1/completions).
    #[arg(long, value_name = "BASE_URL")]
    url: String,
    /// Divide every arrival time by this.
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// Replay only the first N records.
    #[arg(long, value_name = "N")]
    max_requests: Option<usize>,
    /// Send every request in this policy class (`x-policy-class`).
    #[arg(long, value_name = "NAME", conflicts_with = "classes")]
    class: Option<String>,
    /// A seeded weighted class per request, e.g. interactive=3,batch=1.
    #[arg(long, value_name = "NAME=WEIGHT,...")]
    classes: Option<String>,
    /// Cap on each request's `max_tokens` (the trace's output_length otherwise).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    max_output_tokens: u64,
    /// Prompt tokens per trace hash id.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    block_tokens: u64,
    /// The `model` of every request.
    #[arg(long, default_value = "sim")]
    model: String,
    /// Also write the result as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Longest one request may take end to end.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_secs: u64,
    /// Seed of the weighted class draw.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// Parses `args` (including the program name) and runs the command.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors to stderr with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match cli.command {
        Command::Demo(args) => run_demo(&args),
        Command::Serve(args) => router_node::serve::main(args.config.as_deref()),
        Command::Worker(args) => router_node::worker::run(&args),
        Command::Link(args) => router_node::link::run(&args),
        Command::Bench(args) => run_bench(args),
        Command::PrintConfig(args) => print_config(&args),
    }
}

/// Prints the effective configuration; the password of a NATS URL is masked.
fn print_config(args: &ConfigArgs) -> ExitCode {
    let mut config = match Config::load(args.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("router-node print-config: {e}");
            return ExitCode::from(2);
        }
    };
    config.bus.nats_url = router_node::serve::redact_url(&config.bus.nats_url);
    match config.to_toml() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("router-node print-config: {e}");
            ExitCode::from(1)
        }
    }
}

fn run_bench(args: BenchArgs) -> ExitCode {
    use router_node::bench::{self, BenchOptions, ClassChoice};
    let classes = match (args.class, args.classes.as_deref()) {
        (Some(name), _) => ClassChoice::Fixed(name),
        (None, Some(spec)) => match ClassChoice::parse_weights(spec) {
            Ok(choice) => choice,
            Err(e) => {
                eprintln!("router-node bench: {e}");
                return ExitCode::from(e.exit_code());
            }
        },
        (None, None) => ClassChoice::Default,
    };
    let opts = BenchOptions {
        speedup: args.speedup,
        max_requests: args.max_requests,
        classes,
        max_output_tokens: args.max_output_tokens,
        block_tokens: usize::try_from(args.block_tokens).unwrap_or(usize::MAX),
        model: args.model,
        json: args.json,
        timeout: std::time::Duration::from_secs(args.timeout_secs),
        seed: args.seed,
        progress: true,
        ..BenchOptions::new(args.trace, args.url)
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("router-node bench: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(bench::run(&opts)) {
        Ok(report) => {
            print!("{}", report.render_table());
            if report.all_transport_failures() {
                eprintln!(
                    "router-node bench: every request failed in transport; is {} up?",
                    opts.url
                );
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("router-node bench: {e}");
            ExitCode::from(e.exit_code())
        }
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
            eprintln!("router-node demo: {e}");
            return ExitCode::from(1);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("router-node demo: cannot encode the report: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", report.render_table());
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        eprintln!("router-node demo: accounting or ledger check failed (see the report)");
        ExitCode::from(1)
    }
}
