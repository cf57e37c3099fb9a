//! `router-node bench`: replays a Mooncake trace (`trace`), or sends synthetic load at a
//! constant rate (`workload`), against any OpenAI-compatible endpoint, open loop, and
//! measures it per policy class (`report`).
//!
//! Every trace line becomes one streaming `POST {url}/v1/completions` whose `prompt` is token
//! ids synthesised from the line's hash ids (shared hash ids, shared prefix), `max_tokens` =
//! min(`output_length`, `max_output_tokens`), and an `x-policy-class` header (one class, a
//! seeded weighted draw per request, or none). Open loop: request `i` is sent by its own
//! task at `timestamp_i / speedup` (synthetic: `i / rate`) after the start, whatever the
//! earlier requests are doing. The streaming exchange and the latency histograms are
//! `crate::loadgen`'s, shared with the HTTP demo.
//!
//! [`run_until`] stops sending when its `stop` future resolves (the command: the first
//! Ctrl-C or SIGTERM); requests already sent still finish and are reported. With
//! `per_request`, the report also lists every request (send time, class, outcome, status,
//! reason, TTFT, end to end) so a run can be cut into phases by send time
//! (`started_unix_ms` + `sent_ms`).

pub mod report;
pub mod trace;
pub mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use tokio::time::Instant;

pub use report::{BenchReport, ClassStats, Finished, RecordOutcome, RequestRecord};
pub use trace::{Trace, TraceRecord, prompt_tokens};
pub use workload::{Synthetic, Workload};

use crate::loadgen;

/// How often the progress line is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Which policy class each request runs under.
#[derive(Debug, Clone, PartialEq)]
pub enum ClassChoice {
    /// No `x-policy-class` header: the endpoint's default class (reported as "default").
    Default,
    /// Every request in this class.
    Fixed(String),
    /// A seeded weighted draw per request.
    Weighted(Vec<(String, f64)>),
}

impl ClassChoice {
    /// Parses `name=weight,name=weight` (weights positive, names distinct).
    pub fn parse_weights(spec: &str) -> Result<Self, BenchError> {
        let usage = |m: String| BenchError::Usage(format!("--classes {spec:?}: {m}"));
        let mut out: Vec<(String, f64)> = Vec::new();
        for part in spec.split(',') {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| usage(format!("{part:?} is not name=weight")))?;
            let name = name.trim();
            let weight: f64 = weight
                .trim()
                .parse()
                .map_err(|_| usage(format!("the weight of {name:?} is not a number")))?;
            if name.is_empty() || !(weight.is_finite() && weight > 0.0) {
                return Err(usage(format!(
                    "{part:?}: a name and a positive weight are needed"
                )));
            }
            if out.iter().any(|(n, _)| n == name) {
                return Err(usage(format!("{name:?} is named twice")));
            }
            out.push((name.to_owned(), weight));
        }
        Ok(Self::Weighted(out))
    }

    /// The classes of the requests in send order, drawn as they are sent.
    fn drawer(&self, seed: u64) -> ClassDrawer<'_> {
        ClassDrawer {
            choice: self,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The class of each of `n` requests (`None`: no header).
    #[cfg(test)]
    fn assign(&self, n: usize, seed: u64) -> Vec<Option<String>> {
        let mut drawer = self.drawer(seed);
        (0..n).map(|_| drawer.next_class()).collect()
    }

    /// The classes in report order.
    fn names(&self) -> Vec<String> {
        match self {
            Self::Default => vec![report::DEFAULT_CLASS.to_owned()],
            Self::Fixed(name) => vec![name.clone()],
            Self::Weighted(w) => w.iter().map(|(n, _)| n.clone()).collect(),
        }
    }
}

/// Draws each request's class ([`ClassChoice`]), reproducibly from a seed.
struct ClassDrawer<'a> {
    choice: &'a ClassChoice,
    rng: SmallRng,
}

impl ClassDrawer<'_> {
    /// The next request's class (`None`: no header).
    fn next_class(&mut self) -> Option<String> {
        match self.choice {
            ClassChoice::Default => None,
            ClassChoice::Fixed(name) => Some(name.clone()),
            ClassChoice::Weighted(weights) => {
                let total: f64 = weights.iter().map(|(_, w)| w).sum();
                let mut x = self.rng.random::<f64>() * total;
                for (name, w) in weights {
                    if x < *w {
                        return Some(name.clone());
                    }
                    x -= w;
                }
                weights.last().map(|(name, _)| name.clone())
            }
        }
    }
}

/// What `router-node bench` was asked for.
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
    /// Print a start line, then a progress line every second, to stderr.
    pub progress: bool,
    /// List every request in the report (`requests`).
    pub per_request: bool,
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
    #[error("{0}")]
    Internal(String),
}

impl BenchError {
    /// 2 for what the user can fix in the command line or the trace, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Trace { .. } | Self::ReadTrace { .. } => 2,
            Self::WriteJson { .. } | Self::Internal(_) => 1,
        }
    }
}

/// Replays the workload to its end and returns (and with `json`, writes) the result.
pub async fn run(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    run_until(opts, std::future::pending()).await
}

/// [`run`], sending no more requests once `stop` resolves; those already sent finish.
pub async fn run_until(
    opts: &BenchOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<BenchReport, BenchError> {
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
    let base = opts.url.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(BenchError::Usage(format!(
            "--url {:?} must start with http:// or https://",
            opts.url
        )));
    }
    // Every trace arrival is checked before the first request goes out.
    let plan = workload::Plan::new(opts).await?;
    let total = plan.requests();
    let client = reqwest::Client::builder()
        .timeout(opts.timeout)
        .pool_max_idle_per_host(1024)
        .build()
        .map_err(|e| BenchError::Internal(format!("building the HTTP client: {e}")))?;
    let url = format!("{base}/v1/completions");
    let mut classes = opts.classes.drawer(opts.seed);
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let start = Instant::now();
    let of_total = total.map_or_else(String::new, |t| format!("/{t}"));
    let progress = opts.progress.then(|| {
        eprintln!(
            "bench: started, sending {} to {url}",
            opts.workload.describe()
        );
        let (sent, done, of_total) = (sent.clone(), done.clone(), of_total.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROGRESS_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let (s, d) = (sent.load(Ordering::Relaxed), done.load(Ordering::Relaxed));
                eprintln!("bench: sent {s}{of_total}, done {d}{of_total}");
            }
        })
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
        let (client, url, sent, done) = (client.clone(), url.clone(), sent.clone(), done.clone());
        let model = opts.model.clone();
        tasks.push(tokio::spawn(async move {
            let body = json!({
                "model": model,
                "prompt": arrival.prompt,
                "max_tokens": arrival.max_tokens,
                "stream": true,
                "stream_options": {"include_usage": true},
            });
            sent.fetch_add(1, Ordering::Relaxed);
            let sent_at = start.elapsed();
            let outcome = loadgen::send_streaming(&client, &url, class.as_deref(), &body).await;
            let took = start.elapsed().saturating_sub(sent_at);
            done.fetch_add(1, Ordering::Relaxed);
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
        progress.abort();
        let (s, d) = (sent.load(Ordering::Relaxed), done.load(Ordering::Relaxed));
        let why = if interrupted { " (stopped early)" } else { "" };
        eprintln!("bench: sent {s}{of_total}, done {d}{of_total}{why}");
    }
    let report = BenchReport::build(
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
            per_request: opts.per_request,
        },
    )
    .map_err(|e| BenchError::Internal(format!("histogram: {e}")))?;
    if let Some(path) = &opts.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| BenchError::Internal(format!("encoding the result: {e}")))?;
        tokio::fs::write(path, text + "\n")
            .await
            .map_err(|source| BenchError::WriteJson {
                path: path.clone(),
                source,
            })?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_weights_parse_and_draw_every_class_reproducibly() {
        let choice =
            ClassChoice::parse_weights("interactive=3,batch=1").unwrap_or_else(|e| panic!("{e}"));
        let a = choice.assign(400, 1);
        assert_eq!(a, choice.assign(400, 1));
        let batch = a.iter().filter(|c| c.as_deref() == Some("batch")).count();
        assert!((60..=140).contains(&batch), "{batch}");
        for bad in ["a", "a=0", "a=x", "=1", "a=1,a=2"] {
            let err = ClassChoice::parse_weights(bad).err();
            assert!(matches!(err, Some(BenchError::Usage(_))), "{bad}");
        }
    }
}
