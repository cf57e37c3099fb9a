//! `router-tools bench`: its flags, turned into `router_tools::bench::BenchOptions`, and the
//! run on a multi-threaded runtime: the table on stdout, progress and plot paths on stderr,
//! Ctrl-C / SIGTERM stopping the sending (a second one exits at once).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use router_tools::bench::{
    self, Api, BenchOptions, ClassChoice, PlotTarget, PromptFormat, Synthetic, Workload,
};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("workload").required(true).args(["trace", "rate"]))]
pub struct BenchArgs {
    /// The trace: Mooncake JSONL (`timestamp` ms, `input_length`, `output_length`,
    /// `hash_ids`), plain or gzipped (`router-tools trace synth` writes one).
    #[arg(long, value_name = "PATH")]
    trace: Option<PathBuf>,
    /// Instead of a trace: synthetic load, this many requests per second, evenly spaced;
    /// each prompt private to its request (`--prompt-tokens`), `--max-output-tokens` output
    /// tokens.
    #[arg(long, value_name = "PER_SECOND", conflicts_with = "trace")]
    rate: Option<f64>,
    /// With --rate: send for this many seconds (default: until --max-requests, Ctrl-C or
    /// SIGTERM).
    #[arg(long, value_name = "SECONDS", requires = "rate")]
    duration: Option<f64>,
    /// With --rate: prompt tokens (or words) of every request.
    #[arg(long, default_value_t = 256, requires = "rate", value_parser = clap::value_parser!(u64).range(1..=2_097_152))]
    prompt_tokens: u64,
    /// The endpoint's base URL (requests go to URL/v1/completions, or
    /// URL/v1/chat/completions with --api chat).
    #[arg(long, value_name = "BASE_URL")]
    url: String,
    /// The OpenAI API to send to: completions or chat.
    #[arg(long, value_name = "API", default_value = "completions")]
    api: Api,
    /// Prompts as token ids, or as text: words made from the hash ids, about one token per
    /// word, equal hash ids giving equal text (default: tokens; --api chat sends text).
    #[arg(long, value_enum, value_name = "FORMAT")]
    prompt_format: Option<PromptFormat>,
    /// Divide every arrival time of the trace by this.
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// Replay only the first N records (with --rate: send at most N requests).
    #[arg(long, value_name = "N")]
    max_requests: Option<usize>,
    /// Send every request in this policy class (`x-policy-class`).
    #[arg(long, value_name = "NAME", conflicts_with = "classes")]
    class: Option<String>,
    /// A seeded weighted class per request, e.g. interactive=3,batch=1.
    #[arg(long, value_name = "NAME=WEIGHT,...")]
    classes: Option<String>,
    /// TTFT objectives, e.g. interactive=2000: the report adds each class's SLO attainment
    /// (its sent requests that were ok within the objective, in %).
    #[arg(long, value_name = "CLASS=MS,...", value_delimiter = ',')]
    slo: Vec<String>,
    /// Cap on each request's `max_tokens` (the trace's output_length otherwise; with --rate,
    /// every request's `max_tokens`).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    max_output_tokens: u64,
    /// Prompt tokens (or words) per trace hash id.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    block_tokens: u64,
    /// The `model` of every request.
    #[arg(long, default_value = "sim")]
    model: String,
    /// Also write the result as JSON to this file (and the plots beside it, named after it).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// In the JSON file, also list every request: its send time (ms after
    /// `started_unix_ms`), class, outcome (ok / shed / error), HTTP status, reason, TTFT,
    /// end-to-end time and token counts.
    #[arg(long, requires = "json")]
    per_request: bool,
    /// Write the SVG plots into this folder (default: beside --json).
    #[arg(long, value_name = "DIR", conflicts_with = "no_plots")]
    plots: Option<PathBuf>,
    /// Write no plots.
    #[arg(long)]
    no_plots: bool,
    /// Where to read the endpoint's Prometheus metrics for the queue-depth plot (default:
    /// BASE_URL/metrics; a Switchyard node's admin address when it has one).
    #[arg(long, value_name = "URL")]
    metrics_url: Option<String>,
    /// Send this many short requests one after another before the run, and leave them out
    /// of it (a fresh endpoint loads its tokenizer and opens connections on the first ones).
    #[arg(long, default_value_t = 0, value_name = "N")]
    warmup: u32,
    /// Longest one request may take end to end.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_secs: u64,
    /// Seed of the weighted class draw (and of the synthetic prompts).
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// `name=ms` pairs of `--slo`.
fn parse_slo(specs: &[String]) -> Result<Vec<(String, f64)>, String> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for spec in specs {
        let (class, ms) = spec
            .split_once('=')
            .ok_or_else(|| format!("--slo {spec:?} is not CLASS=MS"))?;
        let class = class.trim();
        let ms: f64 = ms
            .trim()
            .parse()
            .ok()
            .filter(|ms: &f64| ms.is_finite() && *ms > 0.0)
            .ok_or_else(|| format!("--slo {spec:?}: the TTFT objective must be positive ms"))?;
        if class.is_empty() || out.iter().any(|(c, _)| c == class) {
            return Err(format!(
                "--slo {spec:?}: each class needs a name, and one objective"
            ));
        }
        out.push((class.to_owned(), ms));
    }
    Ok(out)
}

/// The options of `args`, or a usage error.
fn options(args: BenchArgs) -> Result<BenchOptions, String> {
    let classes = match (args.class, args.classes.as_deref()) {
        (Some(name), _) => ClassChoice::Fixed(name),
        (None, Some(spec)) => ClassChoice::parse_weights(spec).map_err(|e| e.to_string())?,
        (None, None) => ClassChoice::Default,
    };
    let workload = match (args.trace, args.rate) {
        (Some(trace), _) => Workload::Trace(trace),
        (None, rate) => {
            let duration = match args.duration.map(std::time::Duration::try_from_secs_f64) {
                None => None,
                Some(Ok(d)) if !d.is_zero() => Some(d),
                Some(_) => return Err("--duration must be a positive number of seconds".into()),
            };
            Workload::Synthetic(Synthetic {
                rate: rate.unwrap_or(0.0),
                duration,
                prompt_tokens: args.prompt_tokens,
            })
        }
    };
    if args.api == Api::Chat && args.prompt_format == Some(PromptFormat::Tokens) {
        return Err("--api chat sends text: drop --prompt-format tokens".into());
    }
    let plots = match (&args.plots, &args.json) {
        _ if args.no_plots => None,
        (Some(dir), _) => Some(PlotTarget::in_dir(dir)),
        (None, Some(json)) => Some(PlotTarget::beside(json)),
        (None, None) => None,
    };
    if args.metrics_url.is_some() && plots.is_none() {
        return Err(
            "--metrics-url is read for the queue-depth plot: give --plots DIR or --json PATH"
                .into(),
        );
    }
    Ok(BenchOptions {
        workload,
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
        per_request: args.per_request,
        prompt_format: args.prompt_format.unwrap_or_default(),
        api: args.api,
        plots,
        metrics_url: args.metrics_url,
        slo: parse_slo(&args.slo)?,
        warmup: args.warmup,
        ..BenchOptions::new(PathBuf::new(), args.url)
    })
}

pub fn run(args: BenchArgs) -> ExitCode {
    let opts = match options(args) {
        Ok(opts) => opts,
        Err(message) => {
            eprintln!("router-tools bench: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match router_node::runtime::start("router-tools bench") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(async { bench::run_until(&opts, stop_signal()).await }) {
        Ok(report) => {
            print!("{}", report.render_table());
            if report.all_transport_failures() {
                eprintln!(
                    "router-tools bench: every request failed in transport; is {} up?",
                    opts.url
                );
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("router-tools bench: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Resolves at the first Ctrl-C or SIGTERM (the handlers are installed at the call); a
/// second one exits the process at once (130). Call it inside the runtime.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    let first = router_node::serve::shutdown_signal();
    async move {
        first.await;
        eprintln!(
            "router-tools bench: stopping: no more requests sent, waiting for those in flight"
        );
        let second = router_node::serve::shutdown_signal();
        tokio::spawn(async move {
            second.await;
            eprintln!("router-tools bench: stopped without waiting");
            std::process::exit(130);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slo_pairs_parse_and_bad_ones_say_why() {
        let specs = ["interactive=2000".to_owned(), " batch = 1e4".to_owned()];
        assert_eq!(
            parse_slo(&specs),
            Ok(vec![
                ("interactive".to_owned(), 2000.0),
                ("batch".to_owned(), 10_000.0)
            ])
        );
        for bad in ["interactive", "a=0", "a=-1", "a=x", "=5"] {
            assert!(parse_slo(&[bad.to_owned()]).is_err(), "{bad}");
        }
        assert!(parse_slo(&["a=1".to_owned(), "a=2".to_owned()]).is_err());
    }
}
