//! The command line: `demo` runs the embedded demo (over HTTP, or `--offline` in simulated
//! time); `serve` runs a router node
//! (`router_node::serve`); `worker --sim` runs a simulated engine (`router_node::worker`);
//! `print-config` prints the effective configuration; `bench` replays a trace against an
//! endpoint (`bench.rs`, over `router_node::bench`); `trace synth` writes a synthetic trace
//! (`trace.rs`); `keys new` / `keys hash` make API keys and their digests for the keys file
//! (`router_node::auth`).
//!
//! Exit codes: 0 success (a bench run that finished, even with shed requests), 1 a demo
//! whose accounting or ledgers came out wrong, a node that failed while running or a bench
//! run whose every request failed in transport or whose files could not be written, 2 a
//! usage, configuration or trace error.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::demo;
use router_node::config::Config;

mod bench;
mod trace;

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
    /// Replay a Mooncake trace (or send synthetic load at a constant rate) against an OpenAI
    /// endpoint, open loop, and report TTFT / ITL / end-to-end percentiles, throughput, shed
    /// rate and prefix hit rate per class. Ctrl-C or SIGTERM stops sending; the requests
    /// already sent finish and are reported (a second Ctrl-C exits at once).
    Bench(Box<bench::BenchArgs>),
    /// Trace tools: `trace synth` writes a synthetic Mooncake trace with the prefix sharing
    /// asked for (system prompts, conversation depth, fan-out, arrival process).
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Print the effective configuration (defaults, then the file, then the environment)
    /// as TOML.
    PrintConfig(ConfigArgs),
    /// API keys for the keys file (`[auth] keys_file`): make a new one, or hash one you have.
    #[command(subcommand)]
    Keys(KeysCommand),
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Generate a random key and print it (once: it is stored nowhere) on the first line,
    /// then its `[[keys]]` entry for the keys file (which holds its SHA-256, not the key).
    New(NewKeyArgs),
    /// Read a key from standard input and print its SHA-256 as hex (the entry's `sha256`).
    Hash,
}

#[derive(Debug, Args)]
struct NewKeyArgs {
    /// The key's name: metric label, span field and error bodies show it (never the key).
    #[arg(long)]
    name: String,
    /// The policy classes it may use, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    classes: Vec<String>,
    /// The class its requests run under when they name none (one of --classes).
    #[arg(long, value_name = "CLASS")]
    default_class: Option<String>,
    /// Requests per second it may send (this node's share: each replica counts its own).
    #[arg(long, value_name = "RATE")]
    requests_per_s: Option<f64>,
    /// Requests it may send at once (default: one second's worth).
    #[arg(long, value_name = "N")]
    requests_burst: Option<u32>,
    /// Tokens per second (prompt + max_tokens of each request).
    #[arg(long, value_name = "RATE")]
    tokens_per_s: Option<f64>,
    /// Tokens at once; a request counting more is refused (default: one second's worth).
    #[arg(long, value_name = "N")]
    tokens_burst: Option<u32>,
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
        Command::Bench(args) => bench::run(*args),
        Command::Trace(command) => trace::run(command),
        Command::PrintConfig(args) => print_config(&args),
        Command::Keys(command) => run_keys(command),
    }
}

fn run_keys(command: KeysCommand) -> ExitCode {
    let printed = match command {
        KeysCommand::Hash => router_node::auth::hash_input(std::io::stdin().lock()),
        KeysCommand::New(args) => router_node::auth::new_key(router_node::auth::KeyEntry {
            name: args.name,
            sha256: String::new(),
            classes: args.classes,
            default_class: args.default_class,
            requests_per_s: args.requests_per_s,
            requests_burst: args.requests_burst,
            tokens_per_s: args.tokens_per_s,
            tokens_burst: args.tokens_burst,
        })
        .map(|(key, entry)| {
            format!(
                "{key}\n\n# Add this entry to the keys file ([auth] keys_file). The key above is \
                 not in it, and is shown only now.\n{entry}"
            )
        }),
    };
    match printed {
        Ok(text) => {
            println!("{}", text.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("router-node keys: {e}");
            ExitCode::from(2)
        }
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
