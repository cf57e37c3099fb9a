//! The command line: `demo` runs the embedded demo (over HTTP, or `--offline` in simulated
//! time); `serve` runs a router node
//! (`router_node::serve`); `worker --sim` runs a simulated engine (`router_node::worker`);
//! `print-config` prints the effective configuration; `bench` is reserved for the trace
//! replayer and says so until it exists.
//!
//! Exit codes: 0 success, 1 a demo whose accounting or ledgers came out wrong or a node that
//! failed while running, 2 a usage or configuration error or a command that is not
//! implemented yet.

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
    Worker(Box<router_node::worker::cmd::WorkerArgs>),
    /// Replay a trace against an endpoint (not implemented yet).
    Bench(Reserved),
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

/// The node's configuration file. Environment overrides: SWITCHYARD_CLUSTER,
/// SWITCHYARD_HTTP_LISTEN, SWITCHYARD_NATS_URL, SWITCHYARD_OTLP_ENDPOINT.
#[derive(Debug, Args)]
struct ConfigArgs {
    /// A TOML file; absent: the defaults (and the environment).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Arguments of a command that does not exist yet: accepted so the message is about the
/// command, not about its flags.
#[derive(Debug, Args)]
struct Reserved {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<OsString>,
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
        Command::Worker(args) => router_node::worker::cmd::run(&args),
        Command::Bench(_) => not_yet("bench", "the trace replayer"),
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

fn not_yet(command: &str, what: &str) -> ExitCode {
    eprintln!(
        "router-node {command}: not implemented yet ({what} comes in a later issue); \
         try `router-node demo`"
    );
    ExitCode::from(2)
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
