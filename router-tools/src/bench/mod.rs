//! `router-tools bench`: replays a Mooncake trace (`trace`), or sends synthetic load at a
//! constant rate (`workload`), against any OpenAI-compatible endpoint, open loop, and
//! measures it per policy class (`report`), with a live view on stderr (`progress`) and SVG
//! plots beside the JSON result (`plots`).
//!
//! Every trace line becomes one streaming request (`prompt`: `POST {url}/v1/completions`, or
//! `/v1/chat/completions` with `--api chat`) whose prompt is synthesised from the line's hash
//! ids (token ids, or words with `--prompt-format text`; shared hash ids, shared prefix),
//! `max_tokens` = min(`output_length`, `max_output_tokens`), and an `x-policy-class` header
//! (`classes`: one class, a seeded weighted draw per request, or none). Open loop: request
//! `i` is sent by its own task at `timestamp_i / speedup` (synthetic: `i / rate`) after the
//! start, whatever the earlier requests are doing. The streaming exchange and the latency
//! histograms are `crate::loadgen`'s, shared with the HTTP demo.
//!
//! [`run_until`] stops sending when its `stop` future resolves (the command: the first
//! Ctrl-C or SIGTERM); requests already sent still finish and are reported. With
//! `per_request`, the report also lists every request (`record`) so a run can be cut into
//! phases by send time (`started_unix_ms` + `sent_ms`). With plots, the endpoint's
//! `/metrics` is sampled during the run for the queue depth (`queue`; skipped quietly when
//! the endpoint is not a Switchyard node). `synth` generates traces (`router-tools trace
//! synth`).

mod classes;
pub mod plots;
pub mod progress;
pub mod prompt;
pub mod queue;
pub mod record;
pub mod report;
pub mod synth;
pub mod trace;
pub mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use classes::ClassChoice;
pub use plots::PlotTarget;
pub use prompt::PromptFormat;
pub use record::{Finished, RecordOutcome, RequestRecord};
pub use report::{BenchReport, ClassStats};
/// Which OpenAI API the requests use: router-core's one enum of routes.
pub use router_core::Endpoint as Api;
pub use trace::{Trace, TraceRecord, prompt_tokens};
pub use workload::{Synthetic, Workload};

use crate::loadgen;
use progress::{Live, Progress};

/// What `router-tools bench` was asked for.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub workload: Workload,
    /// The endpoint's base URL (`http://host:port`, without `/v1`).
    pub url: String,
    /// Arrivals are `timestamp / speedup` after the start.
    pub speedup: f64,
    pub max_requests: Option<usize>,
    pub classes: ClassChoice,
    pub max_output_tokens: u64,
    /// Prompt tokens per trace hash id.
    pub block_tokens: usize,
    pub model: String,
    /// Where to write the JSON result.
    pub json: Option<PathBuf>,
    /// Longest one request may take end to end.
    pub timeout: Duration,
    pub seed: u64,
    /// Show the run's progress on stderr: a start line, then a live bar on a terminal or a
    /// plain line a second elsewhere (`progress`).
    pub progress: bool,
    /// List every request in the report (`requests`).
    pub per_request: bool,
    /// Prompts as token ids or as text (chat always sends text).
    pub prompt_format: PromptFormat,
    pub api: Api,
    /// Where to draw the SVG plots (`None`: none).
    pub plots: Option<PlotTarget>,
    /// The endpoint's Prometheus metrics for the queue-depth plot (`None`: `{url}/metrics`).
    pub metrics_url: Option<String>,
    /// TTFT objectives per class, in ms: the report's SLO attainment.
    pub slo: Vec<(String, f64)>,
    /// Requests sent one after another before the run and left out of it (a fresh
    /// endpoint loads its tokenizer, opens connections...).
    pub warmup: u32,
}

impl BenchOptions {
    /// The defaults of the command line for `trace` and `url`.
    pub fn new(trace: impl Into<PathBuf>, url: impl Into<String>) -> Self {
        Self::with_workload(Workload::Trace(trace.into()), url)
    }

    /// The defaults of the command line for synthetic load and `url`.
    pub fn synthetic(synthetic: Synthetic, url: impl Into<String>) -> Self {
        Self::with_workload(Workload::Synthetic(synthetic), url)
    }

    fn with_workload(workload: Workload, url: impl Into<String>) -> Self {
        Self {
            workload,
            url: url.into(),
            speedup: 1.0,
            max_requests: None,
            classes: ClassChoice::Default,
            max_output_tokens: 256,
            block_tokens: 512,
            model: "sim".to_owned(),
            json: None,
            timeout: Duration::from_secs(600),
            seed: 7,
            progress: false,
            per_request: false,
            prompt_format: PromptFormat::Tokens,
            api: Api::Completions,
            plots: None,
            metrics_url: None,
            slo: Vec::new(),
            warmup: 0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Usage(String),
    /// `line` is 1-based; 0 means the trace as a whole.
    #[error("trace line {line}: {message}")]
    Trace { line: usize, message: String },
    #[error("cannot read the trace {path}: {source}")]
    ReadTrace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the JSON result {path}: {source}")]
    WriteJson {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the plots to {path}: {message}")]
    WritePlots { path: PathBuf, message: String },
    #[error("{0}")]
    Internal(String),
}

impl BenchError {
    /// 2 for what the user can fix in the command line or the trace, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Trace { .. } | Self::ReadTrace { .. } => 2,
            Self::WriteJson { .. } | Self::WritePlots { .. } | Self::Internal(_) => 1,
        }
    }
}

/// Replays the workload to its end and returns (and with `json`, writes) the result.
pub async fn run(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    run_until(opts, std::future::pending()).await
}

/// Checks what does not depend on the workload; the endpoint's base URL without a final `/`.
fn check(opts: &BenchOptions) -> Result<&str, BenchError> {
    if !(opts.speedup.is_finite() && opts.speedup > 0.0) {
        return Err(BenchError::Usage(
            "--speedup must be a positive number".into(),
        ));
    }
    if opts.block_tokens == 0 || opts.max_output_tokens == 0 {
        return Err(BenchError::Usage(
            "--block-tokens and --max-output-tokens must be at least 1".into(),
        ));
    }
    if let Some((class, ms)) = opts
        .slo
        .iter()
        .find(|(_, ms)| !(ms.is_finite() && *ms > 0.0))
    {
        return Err(BenchError::Usage(format!(
            "--slo {class}={ms}: the TTFT objective must be a positive number of ms"
        )));
    }
    let base = opts.url.trim_end_matches('/');
    let http = |u: &str| u.starts_with("http://") || u.starts_with("https://");
    if !http(base) {
        return Err(BenchError::Usage(format!(
            "--url {:?} must start with http:// or https://",
            opts.url
        )));
    }
    if let Some(url) = opts.metrics_url.as_deref().filter(|u| !http(u)) {
        return Err(BenchError::Usage(format!(
            "--metrics-url {url:?} must start with http:// or https://"
        )));
    }
    Ok(base)
}

/// Sends `opts.warmup` short requests one after another (prompts private to the warm-up,
/// no class header, one output token); how many came back ok.
async fn warm_up(opts: &BenchOptions, client: &reqwest::Client, url: &str) -> u32 {
    let format = prompt::format(opts.api, opts.prompt_format);
    let mut ok = 0;
    for i in 0..opts.warmup {
        let keys = workload::synthetic_keys(opts.seed ^ WARMUP_SEED, u64::from(i), 16);
        let body = prompt::body(
            opts.api,
            &opts.model,
            prompt::Prompt::of_keys(&keys, format),
            1,
        );
        let outcome = loadgen::send_streaming(client, url, None, &body).await;
        ok += u32::from(record::bucket(&outcome).0 == RecordOutcome::Ok);
    }
    ok
}

/// Keeps the warm-up's prompts apart from the run's synthetic ones.
const WARMUP_SEED: u64 = 0x5741_524d;

/// [`run`], sending no more requests once `stop` resolves; those already sent finish.
pub async fn run_until(
    opts: &BenchOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<BenchReport, BenchError> {
    let base = check(opts)?;
    // Every trace arrival is checked before the first request goes out.
    let plan = workload::Plan::new(opts).await?;
    let total = plan.requests();
    let client = reqwest::Client::builder()
        .timeout(opts.timeout)
        .pool_max_idle_per_host(1024)
        .build()
        .map_err(|e| BenchError::Internal(format!("building the HTTP client: {e}")))?;
    let url = format!("{base}{}", opts.api.path());
    if opts.warmup > 0 {
        let ok = warm_up(opts, &client, &url).await;
        if opts.progress {
            eprintln!("bench: warm-up: {ok} of {} requests ok", opts.warmup);
        }
    }
    let mut classes = opts.classes.drawer(opts.seed);
    let live = Arc::new(Live::default());
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let start = Instant::now();
    let progress = opts
        .progress
        .then(|| Progress::start(live.clone(), total, &opts.workload.describe(), &url));
    let sampler = opts.plots.as_ref().map(|_| {
        let metrics = opts
            .metrics_url
            .clone()
            .unwrap_or_else(|| format!("{base}/metrics"));
        queue::Sampler::start(client.clone(), metrics, start)
    });
    let mut tasks = Vec::new();
    let mut interrupted = false;
    let mut stop = std::pin::pin!(stop);
    for (index, arrival) in plan.arrivals(opts.max_output_tokens).enumerate() {
        tokio::select! {
            biased;
            () = &mut stop => {
                interrupted = true;
                break;
            }
            () = tokio::time::sleep_until(start + arrival.offset) => {}
        }
        let class = classes.next_class();
        let (client, url, live) = (client.clone(), url.clone(), live.clone());
        let body = prompt::body(opts.api, &opts.model, arrival.prompt, arrival.max_tokens);
        tasks.push(tokio::spawn(async move {
            live.sent();
            let sent_at = start.elapsed();
            let outcome = loadgen::send_streaming(&client, &url, class.as_deref(), &body).await;
            let took = start.elapsed().saturating_sub(sent_at);
            live.finished(&outcome);
            Finished {
                index: index as u64,
                class,
                sent_at,
                took,
                outcome,
            }
        }));
    }
    let mut finished = Vec::with_capacity(tasks.len());
    for task in tasks {
        finished.push(
            task.await
                .map_err(|e| BenchError::Internal(format!("a client task failed: {e}")))?,
        );
    }
    let wall = start.elapsed();
    if let Some(progress) = progress {
        progress.finish(interrupted);
    }
    let queue_depth = match sampler {
        Some(sampler) => sampler.stop().await,
        None => Vec::new(),
    };
    if let Some(metrics) = opts
        .metrics_url
        .as_deref()
        .filter(|_| queue_depth.is_empty())
    {
        // Asked for by name: say why its plot is missing (the default URL stays quiet).
        eprintln!(
            "bench: no {} at {metrics}: no queue-depth plot",
            queue::QUEUE_DEPTH
        );
    }
    let records: Vec<RequestRecord> = finished.iter().map(RequestRecord::of).collect();
    let mut report = BenchReport::build(
        &opts.classes.names(),
        &finished,
        report::RunFacts {
            url: base.to_owned(),
            trace: opts.workload.describe(),
            speedup: opts.speedup,
            seed: opts.seed,
            wall,
            started_unix_ms,
            interrupted,
            slo: opts.slo.clone(),
        },
    )
    .map_err(|e| BenchError::Internal(format!("histogram: {e}")))?;
    report.queue_depth = queue_depth;
    if opts.per_request {
        report.requests = records.clone();
    }
    if let Some(target) = opts.plots.clone() {
        let queue = report.queue_depth.clone();
        let written = tokio::task::spawn_blocking(move || plots::write(&target, &records, &queue))
            .await
            .map_err(|e| BenchError::Internal(format!("drawing the plots: {e}")))??;
        if opts.progress {
            let names: Vec<String> = written
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            if let Some(dir) = written.first().and_then(|p| p.parent()) {
                eprintln!("bench: plots in {}: {}", dir.display(), names.join(", "));
            }
        }
        report.plots = written;
    }
    if let Some(path) = &opts.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| BenchError::Internal(format!("encoding the result: {e}")))?;
        let failed = |source| BenchError::WriteJson {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await.map_err(failed)?;
        }
        tokio::fs::write(path, text + "\n").await.map_err(failed)?;
    }
    Ok(report)
}
