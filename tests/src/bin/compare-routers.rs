//! `compare-routers`: issue #12's side-by-side comparison as a command. For each router in
//! turn it starts the same fresh simulated fleet, puts the router in front (HAProxy round
//! robin, SGLang's gateway, vLLM's router, NVIDIA Dynamo with its own simulated engines,
//! Switchyard with one replica and with three), replays one trace through it with
//! `router-tools bench` (text prompts, after a warm-up), stops everything, and prints one
//! markdown table (a row per router: prefix hit %, TTFT p50/p99, ITL p99, end-to-end p99,
//! shed, errors). `--out DIR` gets each router's bench JSON, table and plots, the table as
//! `table.md`, `summary.json` and the combined TTFT CDF `ttft-cdf.svg`. `--repeat N` runs
//! N rounds (every router once per round, the order rotated) and gives each router's
//! medians over the rounds, its TTFT p99 range and the rounds it had the lowest TTFT: on a
//! shared machine one run cannot rank tails that move more between runs than between
//! routers.
//!
//! ```sh
//! scripts/install-peers.sh          # optional: the peers that are not installed are rows saying so
//! cargo build --release -p router-node
//! cargo run --release -p switchyard-system-tests --bin compare-routers -- \
//!   --max-requests 1500 --out compare-out
//! ```
//!
//! It runs the `router-node` of its own profile (`SWITCHYARD_ROUTER_NODE_BIN` for another),
//! the nats-server of `NATS_SERVER_BIN` or `.tools/nats`, the HAProxy of `HAPROXY_BIN` or
//! `.tools/haproxy`, the peers of `SWITCHYARD_PEERS_DIR` or `.tools/peers`. Ctrl-C (or
//! SIGTERM) stops the run and every process it started.
//!
//! Exit codes: 0 when every router that is installed ran, 3 when one failed, 2 for usage
//! errors (and a missing or outdated `router-node`), 130 when stopped by a signal.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use switchyard_system_tests::compare::{self, CompareOptions, Outcome, Router, repeat, table};

#[derive(Debug, Parser)]
#[command(
    name = "compare-routers",
    about = "The same simulated fleet behind HAProxy, SGLang's gateway, vLLM's router, Dynamo and \
             Switchyard in turn; one trace replayed through each; one table"
)]
struct Args {
    /// A Mooncake JSONL trace, plain or gzipped (default: the shipped conversation trace).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Prompt positions per hash id of the trace (bench's and `trace synth`'s --block-tokens).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    block_tokens: u64,
    /// Simulated engines in the fleet.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// The engines' speed and the replay's time compression (arrivals divided by it).
    #[arg(long, default_value_t = 10.0)]
    speedup: f64,
    /// Replay only the first N requests of the trace.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_requests: Option<u64>,
    /// Cap on every request's max_tokens.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_output_tokens: u64,
    /// Short requests sent before the run, not counted (loads tokenizers, opens connections).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    warmup: u64,
    /// KV blocks (16 tokens each) of every engine.
    #[arg(long, default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(16..=1 << 32))]
    kv_blocks: u64,
    /// Comma-separated routers in the order to run them: haproxy-rr, sglang-gateway,
    /// vllm-router, dynamo, switchyard-1, switchyard-3, or all.
    #[arg(long, default_value = "all")]
    routers: String,
    /// The model directory every engine and router tokenizes with (tokenizer.json,
    /// tokenizer_config.json, config.json; default tests/data/word-tokenizer).
    #[arg(long, conflicts_with = "o200k")]
    model_dir: Option<PathBuf>,
    /// Every engine and Switchyard tokenize with tiktoken's o200k_base instead of a model
    /// directory (the gateways do not tokenize; Dynamo, which needs a model directory, is
    /// then a row saying so).
    #[arg(long)]
    o200k: bool,
    /// Where the results go (created).
    #[arg(long, default_value = "compare-out")]
    out: PathBuf,
    /// Rounds: every router runs once per round, the order rotated each round; with more
    /// than one, each round's results go to `round-<k>/` and the table gives each router's
    /// medians over the rounds, its TTFT p99 range and the rounds it had the lowest TTFT.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=50))]
    repeat: u64,
    /// A TOML file of more configuration for every Switchyard replica (tables such as
    /// `[selection]` or `[scheduler]`), to compare settings of ours against the peers.
    #[arg(long)]
    switchyard_config: Option<PathBuf>,
}

fn options(args: &Args) -> Result<(Vec<Router>, CompareOptions), String> {
    let routers = Router::parse_list(&args.routers).map_err(|e| format!("--routers: {e}"))?;
    if !(args.speedup.is_finite() && args.speedup > 0.0) {
        return Err(format!(
            "--speedup {}: must be a positive number",
            args.speedup
        ));
    }
    let mut opts = CompareOptions::new(&args.out);
    if let Some(trace) = &args.trace {
        opts.trace = trace.clone();
    }
    if !opts.trace.is_file() {
        return Err(format!("--trace {}: no such file", opts.trace.display()));
    }
    if let Some(dir) = &args.model_dir {
        opts.model_dir = dir.clone();
    }
    opts.o200k = args.o200k;
    if !opts.o200k && !opts.model_dir.join("tokenizer.json").is_file() {
        return Err(format!(
            "--model-dir {}: has no tokenizer.json",
            opts.model_dir.display()
        ));
    }
    opts.block_tokens = args.block_tokens;
    opts.workers = usize::try_from(args.workers).map_err(|e| format!("--workers: {e}"))?;
    opts.speedup = args.speedup;
    opts.max_requests = args.max_requests;
    opts.max_output_tokens = args.max_output_tokens;
    opts.warmup = args.warmup;
    opts.kv_blocks = args.kv_blocks;
    if let Some(path) = &args.switchyard_config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--switchyard-config {}: {e}", path.display()))?;
        text.parse::<toml::Table>()
            .map_err(|e| format!("--switchyard-config {}: not TOML: {e}", path.display()))?;
        opts.switchyard_config = Some(text);
    }
    Ok((routers, opts))
}

/// Runs every router in turn; returns the rows and whether every installed one ran.
async fn run(routers: &[Router], opts: &CompareOptions, round: &str) -> Vec<(Router, Outcome)> {
    let mut rows = Vec::new();
    for (i, router) in routers.iter().enumerate() {
        eprintln!(
            "compare-routers: {round}[{}/{}] {} ({})",
            i + 1,
            routers.len(),
            router.name(),
            router.describe()
        );
        let outcome = compare::run_router(*router, opts).await;
        match &outcome {
            Outcome::Ran(r) => eprintln!(
                "compare-routers: {}: {} of {} ok, prefix hit {}",
                router.name(),
                r.ok,
                r.sent,
                r.hit_pct
                    .map_or_else(|| "-".to_owned(), |h| format!("{h:.1} %"))
            ),
            Outcome::NotInstalled(why) => eprintln!("compare-routers: {}: {why}", router.name()),
            Outcome::Failed(why) => eprintln!("compare-routers: {}: failed: {why}", router.name()),
        }
        rows.push((*router, outcome));
    }
    rows
}

/// `repeat` rounds of every router (the order rotated each round). One round writes into
/// the out dir itself; several write each round's results into `round-<k>/`.
async fn rounds(
    routers: &[Router],
    opts: &CompareOptions,
    repeat: u64,
) -> Result<Vec<Vec<(Router, Outcome)>>, String> {
    if repeat <= 1 {
        return Ok(vec![run(routers, opts, "").await]);
    }
    let mut all = Vec::new();
    for k in 1..=repeat {
        let mut round_opts = opts.clone();
        round_opts.out = opts.out.join(format!("round-{k}"));
        std::fs::create_dir_all(&round_opts.out)
            .map_err(|e| format!("cannot create {}: {e}", round_opts.out.display()))?;
        let order = repeat::round_order(routers, (k - 1) as usize);
        let rows = run(&order, &round_opts, &format!("round {k}/{repeat} ")).await;
        write_results(&round_opts, &round_text(&rows, &round_opts), &rows)?;
        all.push(rows);
    }
    Ok(all)
}

/// One round's table, its notes and the setup line.
fn round_text(rows: &[(Router, Outcome)], opts: &CompareOptions) -> String {
    format!(
        "{}\n{}\n{}\n{}\nSetup: {}.\n",
        table::markdown(rows),
        table::tails_markdown(rows),
        table::stages_markdown(rows),
        table::notes(rows),
        opts.setup()
    )
}

/// Writes the repeated comparison's `table.md`, `summary.json` (the medians and every
/// round's rows) and `ttft-cdf.svg` (every round's requests pooled) into the out dir.
fn write_repeated(
    opts: &CompareOptions,
    text: &str,
    summaries: &[repeat::Summary],
    rounds: &[Vec<(Router, Outcome)>],
) -> Result<(), String> {
    let write = |name: &str, content: &str| write_out(opts, name, content);
    write("table.md", text)?;
    let mut summary = repeat::to_json(summaries, rounds.len());
    summary["setup"] = opts.setup().into();
    summary["per_round"] = rounds
        .iter()
        .map(|round| table::summary(&opts.setup(), round)["rows"].clone())
        .collect();
    write("summary.json", &format!("{summary:#}\n"))?;
    // Every round's ok requests in one CDF per router.
    let pooled: Vec<(Router, Outcome)> = summaries
        .iter()
        .filter_map(|s| {
            let mut rows = rounds.iter().flatten().filter_map(|(r, o)| match o {
                Outcome::Ran(row) if *r == s.router => Some(row),
                _ => None,
            });
            let mut first = rows.next()?.clone();
            for row in rows {
                first.ttfts.extend_from_slice(&row.ttfts);
            }
            Some((s.router, Outcome::Ran(first)))
        })
        .collect();
    if let Some(chart) = table::ttft_plot(&pooled) {
        let svg = router_tools::bench::plots::render(&chart)?;
        write("ttft-cdf.svg", &svg)?;
    }
    Ok(())
}

/// Writes `content` to `name` in the out dir.
fn write_out(opts: &CompareOptions, name: &str, content: &str) -> Result<(), String> {
    let path = opts.out.join(name);
    std::fs::write(&path, content).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes `table.md`, `summary.json` and `ttft-cdf.svg` into the out dir.
fn write_results(
    opts: &CompareOptions,
    text: &str,
    rows: &[(Router, Outcome)],
) -> Result<(), String> {
    let write = |name: &str, content: &str| write_out(opts, name, content);
    write("table.md", text)?;
    let summary = table::summary(&opts.setup(), rows);
    write("summary.json", &format!("{summary:#}\n"))?;
    if let Some(chart) = table::ttft_plot(rows) {
        let svg = router_tools::bench::plots::render(&chart)?;
        write("ttft-cdf.svg", &svg)?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let (routers, opts) = match options(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("compare-routers: {e}");
            return ExitCode::from(2);
        }
    };
    for binary in [
        switchyard_system_tests::support::ROUTER_NODE,
        switchyard_system_tests::support::ROUTER_TOOLS,
    ] {
        if let Err(e) = binary.try_path() {
            eprintln!("compare-routers: {e}");
            return ExitCode::from(2);
        }
    }
    if let Err(e) = std::fs::create_dir_all(&opts.out) {
        eprintln!("compare-routers: cannot create {}: {e}", opts.out.display());
        return ExitCode::from(2);
    }
    eprintln!("compare-routers: {}", opts.setup());
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("compare-routers: cannot handle SIGTERM: {e}");
            return ExitCode::from(1);
        }
    };
    // A signal drops the run: every process it started is stopped (killed) on drop.
    let rows = tokio::select! {
        rows = rounds(&routers, &opts, args.repeat) => rows,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("compare-routers: interrupted; every process it started is stopped");
            return ExitCode::from(130);
        }
        _ = term.recv() => {
            eprintln!("compare-routers: terminated; every process it started is stopped");
            return ExitCode::from(130);
        }
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("compare-routers: {e}");
            return ExitCode::from(1);
        }
    };
    let written = if let [round] = rows.as_slice() {
        let text = round_text(round, &opts);
        print!("{text}");
        write_results(&opts, &text, round)
    } else {
        let summaries = repeat::summarize(&routers, &rows);
        let text = format!(
            "{}\n{}\n{}\nSetup: {}.\n",
            repeat::markdown(&summaries, rows.len()),
            repeat::tails_markdown(&summaries),
            table::notes(&rows[0]),
            opts.setup()
        );
        print!("{text}");
        write_repeated(&opts, &text, &summaries, &rows)
    };
    if let Err(e) = written {
        eprintln!("compare-routers: {e}");
        return ExitCode::from(1);
    }
    eprintln!("compare-routers: results in {}", opts.out.display());
    if rows
        .iter()
        .flatten()
        .any(|(_, o)| matches!(o, Outcome::Failed(_)))
    {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}
