//! The command line: `demo` runs the embedded simulation; `serve`, `worker`, `bench` and
//! `print-config` are reserved for the node, the simulated engine, the trace replayer and
//! the effective configuration, and say so until they exist.
//!
//! Exit codes: 0 success, 1 a demo whose accounting or ledgers came out wrong, 2 a usage
//! error or a command that is not implemented yet.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::demo;

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
    /// Run the real admission scheduler over a simulated fleet in simulated time.
    Demo(DemoArgs),
    /// Serve the OpenAI-compatible HTTP endpoint (not implemented yet).
    Serve(Reserved),
    /// Run a simulated engine: an OpenAI API over the mocker, announced on the bus.
    Worker(Box<router_node::worker::cmd::WorkerArgs>),
    /// Replay a trace against an endpoint (not implemented yet).
    Bench(Reserved),
    /// Print the effective configuration (not implemented yet).
    PrintConfig(Reserved),
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Disaggregated: a prefill pool and a decode pool of N workers each.
    #[arg(long)]
    disagg: bool,
    /// Workers per pool (one rank each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Requests in the built-in workload.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    requests: u32,
    /// Seed of the workload generator (same seed, same run).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Print the summary as JSON instead of a table.
    #[arg(long)]
    json: bool,
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
        Command::Serve(_) => not_yet("serve", "the HTTP node"),
        Command::Worker(args) => router_node::worker::cmd::run(&args),
        Command::Bench(_) => not_yet("bench", "the trace replayer"),
        Command::PrintConfig(_) => not_yet("print-config", "configuration loading"),
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
