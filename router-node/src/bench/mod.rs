//! `router-node bench`: replays a Mooncake trace (`trace`) against any OpenAI-compatible
//! endpoint, open loop, and measures it per policy class (`report`).
//!
//! Every trace line becomes one streaming `POST {url}/v1/completions` whose `prompt` is token
//! ids synthesised from the line's hash ids (shared hash ids, shared prefix), `max_tokens` =
//! min(`output_length`, `max_output_tokens`), and an `x-policy-class` header (one class, a
//! seeded weighted draw per request, or none). Open loop: request `i` is sent by its own
//! task at `timestamp_i / speedup` after the start, whatever the earlier requests are doing.
//! The streaming exchange and the latency histograms are `crate::loadgen`'s, shared with the
//! HTTP demo.

pub mod report;
pub mod trace;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use tokio::time::Instant;

pub use report::{BenchReport, ClassStats, Finished};
pub use trace::{Trace, TraceRecord, prompt_tokens};

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

    /// The class of each of `n` requests (`None`: no header).
    fn assign(&self, n: usize, seed: u64) -> Vec<Option<String>> {
        match self {
            Self::Default => vec![None; n],
            Self::Fixed(name) => vec![Some(name.clone()); n],
            Self::Weighted(weights) => {
                let total: f64 = weights.iter().map(|(_, w)| w).sum();
                let mut rng = SmallRng::seed_from_u64(seed);
                (0..n)
                    .map(|_| {
                        let mut x = rng.random::<f64>() * total;
                        for (name, w) in weights {
                            if x < *w {
                                return Some(name.clone());
                            }
                            x -= w;
                        }
                        weights.last().map(|(name, _)| name.clone())
                    })
                    .collect()
            }
        }
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

/// What `router-node bench` was asked for.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub trace: PathBuf,
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
    /// Print a progress line to stderr every second.
    pub progress: bool,
}

impl BenchOptions {
    /// The defaults of the command line for `trace` and `url`.
    pub fn new(trace: impl Into<PathBuf>, url: impl Into<String>) -> Self {
        Self {
            trace: trace.into(),
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

/// Replays the trace and returns (and with `json`, writes) the result.
pub async fn run(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
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
    let text = trace::read_text(&opts.trace).await?;
    let trace = Trace::parse(&text, opts.max_requests)?;
    let client = reqwest::Client::builder()
        .timeout(opts.timeout)
        .pool_max_idle_per_host(1024)
        .build()
        .map_err(|e| BenchError::Internal(format!("building the HTTP client: {e}")))?;
    let url = format!("{base}/v1/completions");
    let classes = opts.classes.assign(trace.records.len(), opts.seed);
    let total = trace.records.len() as u64;
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // Every arrival is checked before the first request goes out (an error must not leave
    // earlier requests running).
    let start = Instant::now();
    let arrivals = trace
        .records
        .iter()
        .map(|(line, record)| {
            Duration::try_from_secs_f64(record.timestamp as f64 / 1e3 / opts.speedup)
                .ok()
                .and_then(|offset| start.checked_add(offset))
                .ok_or_else(|| BenchError::Trace {
                    line: *line,
                    message: format!(
                        "timestamp {} ms at --speedup {:?} is out of range",
                        record.timestamp, opts.speedup
                    ),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let progress = opts.progress.then(|| {
        let (sent, done) = (sent.clone(), done.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROGRESS_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let (s, d) = (sent.load(Ordering::Relaxed), done.load(Ordering::Relaxed));
                eprintln!("bench: sent {s}/{total}, done {d}/{total}");
            }
        })
    });
    let mut tasks = Vec::with_capacity(trace.records.len());
    for (((line, record), class), at) in trace.records.into_iter().zip(classes).zip(arrivals) {
        let (client, url, sent, done) = (client.clone(), url.clone(), sent.clone(), done.clone());
        let (model, block_tokens) = (opts.model.clone(), opts.block_tokens);
        let max_tokens = record.output_length.min(opts.max_output_tokens).max(1);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let body = json!({
                "model": model,
                "prompt": prompt_tokens(&record, line, block_tokens),
                "max_tokens": max_tokens,
                "stream": true,
                "stream_options": {"include_usage": true},
            });
            sent.fetch_add(1, Ordering::Relaxed);
            let outcome = loadgen::send_streaming(&client, &url, class.as_deref(), &body).await;
            done.fetch_add(1, Ordering::Relaxed);
            Finished { class, outcome }
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
        let d = done.load(Ordering::Relaxed);
        eprintln!("bench: sent {total}/{total}, done {d}/{total}");
    }
    let report = BenchReport::build(
        &opts.classes.names(),
        &finished,
        report::RunFacts {
            url: base.to_owned(),
            trace: opts.trace.display().to_string(),
            speedup: opts.speedup,
            seed: opts.seed,
            wall,
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
