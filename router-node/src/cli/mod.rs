//! The command line of the serving binary: `serve` runs a router node
//! (`router_node::serve`); `link` makes a real engine a worker of the fleet
//! (`router_node::link`); `print-config` prints the effective configuration; `keys new` /
//! `keys hash` make API keys and their digests for the keys file (`router_node::auth`). The
//! demo, the load tools and the simulated worker are `router-tools`.
//!
//! Exit codes: 0 success, 1 a node that failed while running, 2 a usage or configuration
//! error.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

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
    /// Serve the OpenAI-compatible HTTP endpoint: one router node (SIGINT/SIGTERM drains).
    Serve(ConfigArgs),
    /// Link a real engine (vLLM, SGLang) to the routers over NATS: announce it, relay its KV
    /// events and load, and take it out of the fleet when it stops answering.
    Link(Box<router_node::link::LinkArgs>),
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
    /// The models (and LoRA adapters) it may use, comma-separated; absent: every model.
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
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
    let cli = match router_node::runtime::parse_args::<Cli>(args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match cli.command {
        Command::Serve(args) => router_node::serve::main(args.config.as_deref()),
        Command::Link(args) => router_node::link::run(&args),
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
            models: args.models,
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
