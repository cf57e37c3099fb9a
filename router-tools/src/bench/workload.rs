//! What `router-tools bench` sends: a Mooncake trace replayed at its own timestamps
//! (`--trace`, see `trace.rs`), or synthetic load at a constant rate (`--rate`).
//!
//! Synthetic load: request `i` is sent `i / rate` seconds after the start, for `duration`
//! (or until `max_requests`, or until the run is stopped: Ctrl-C / SIGTERM for the command).
//! Every prompt is `prompt_tokens` positions (token ids, or words with `--prompt-format
//! text`) private to the request and the seed (no two requests, and no two runs with
//! different seeds, share a prefix), and asks for `max_output_tokens`.
//!
//! [`Plan`] turns either into the arrivals the dispatcher walks: each request's offset from
//! the start, its prompt and its `max_tokens`. A trace's arrivals are all checked before the
//! first request goes out (an out-of-range timestamp must not leave earlier requests
//! running); synthetic ones are made as they are due.

use std::path::PathBuf;
use std::time::Duration;

use super::prompt::{Prompt, PromptFormat};
use super::trace::{Trace, mix, prompt_keys};
use super::{BenchError, BenchOptions};

/// Where the requests come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// A Mooncake JSONL trace (plain or gzipped).
    Trace(PathBuf),
    /// Constant-rate synthetic load.
    Synthetic(Synthetic),
}

impl Workload {
    /// How the report names it: the trace's path, or the synthetic load's shape.
    pub fn describe(&self) -> String {
        match self {
            Self::Trace(path) => path.display().to_string(),
            Self::Synthetic(s) => {
                let lasting = s
                    .duration
                    .map_or_else(|| "until stopped".to_owned(), |d| format!("for {d:?}"));
                format!(
                    "synthetic load ({} req/s {lasting}, {} prompt tokens)",
                    s.rate, s.prompt_tokens
                )
            }
        }
    }
}

/// Constant-rate synthetic load.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    /// Requests per second.
    pub rate: f64,
    /// How long to send; `None`: until `max_requests` or until stopped.
    pub duration: Option<Duration>,
    /// Prompt tokens of every request.
    pub prompt_tokens: u64,
}

/// One request to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// After the run's start.
    pub offset: Duration,
    pub prompt: Prompt,
    pub max_tokens: u64,
}

/// The arrivals of a run, in send order.
#[derive(Debug)]
pub enum Plan {
    /// A parsed trace: each record with its line and checked offset.
    Trace {
        records: Vec<(usize, super::TraceRecord, Duration)>,
        block_tokens: usize,
        format: PromptFormat,
    },
    Synthetic {
        synthetic: Synthetic,
        /// Requests to send (`None`: until stopped).
        count: Option<u64>,
        seed: u64,
        format: PromptFormat,
    },
}

impl Plan {
    /// Reads and checks the workload of `opts`.
    pub async fn new(opts: &BenchOptions) -> Result<Self, BenchError> {
        match &opts.workload {
            Workload::Trace(path) => {
                let text = super::trace::read_text(path).await?;
                let trace = Trace::parse(&text, opts.max_requests)?;
                let mut out = Vec::with_capacity(trace.records.len());
                for (line, record) in trace.records {
                    let offset =
                        Duration::try_from_secs_f64(record.timestamp as f64 / 1e3 / opts.speedup)
                            .ok()
                            .filter(|o| o.as_secs() < MAX_OFFSET_SECS)
                            .ok_or_else(|| BenchError::Trace {
                                line,
                                message: format!(
                                    "timestamp {} ms at --speedup {:?} is out of range",
                                    record.timestamp, opts.speedup
                                ),
                            })?;
                    out.push((line, record, offset));
                }
                Ok(Self::Trace {
                    records: out,
                    block_tokens: opts.block_tokens,
                    format: super::prompt::format(opts.api, opts.prompt_format),
                })
            }
            Workload::Synthetic(s) => {
                if !(s.rate.is_finite() && s.rate > 0.0) {
                    return Err(BenchError::Usage("--rate must be a positive number".into()));
                }
                if s.prompt_tokens == 0 || s.prompt_tokens > super::trace::MAX_INPUT_LENGTH {
                    return Err(BenchError::Usage(format!(
                        "--prompt-tokens must be between 1 and {}",
                        super::trace::MAX_INPUT_LENGTH
                    )));
                }
                let by_duration = match s.duration {
                    Some(d) if d.is_zero() => {
                        return Err(BenchError::Usage("--duration must be positive".into()));
                    }
                    // The requests whose send time falls inside the duration.
                    Some(d) => Some((d.as_secs_f64() * s.rate).ceil() as u64),
                    None => None,
                };
                let by_max = opts.max_requests.map(|m| m as u64);
                let count = match (by_duration, by_max) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Ok(Self::Synthetic {
                    synthetic: s.clone(),
                    count,
                    seed: opts.seed,
                    format: super::prompt::format(opts.api, opts.prompt_format),
                })
            }
        }
    }

    /// Requests the plan will send, when known.
    pub fn requests(&self) -> Option<u64> {
        match self {
            Self::Trace { records, .. } => Some(records.len() as u64),
            Self::Synthetic { count, .. } => *count,
        }
    }

    /// The arrivals in order; `max_output_tokens` caps each request's `max_tokens`.
    pub fn arrivals(self, max_output_tokens: u64) -> Box<dyn Iterator<Item = Arrival> + Send> {
        match self {
            Self::Trace {
                records,
                block_tokens,
                format,
            } => Box::new(
                records
                    .into_iter()
                    .map(move |(line, record, offset)| Arrival {
                        offset,
                        prompt: Prompt::of_keys(&prompt_keys(&record, line, block_tokens), format),
                        max_tokens: record.output_length.min(max_output_tokens).max(1),
                    }),
            ),
            Self::Synthetic {
                synthetic,
                count,
                seed,
                format,
            } => Box::new((0..count.unwrap_or(u64::MAX)).map_while(move |i| {
                let offset = Duration::try_from_secs_f64(i as f64 / synthetic.rate)
                    .ok()
                    .filter(|o| o.as_secs() < MAX_OFFSET_SECS)?;
                Some(Arrival {
                    offset,
                    prompt: Prompt::of_keys(
                        &synthetic_keys(seed, i, synthetic.prompt_tokens),
                        format,
                    ),
                    max_tokens: max_output_tokens,
                })
            })),
        }
    }
}

/// Offsets past this (about 31 years) are out of range: `Instant + offset` must not overflow.
const MAX_OFFSET_SECS: u64 = 1 << 30;

/// `len` prompt keys private to request `i` of a run with `seed`.
pub fn synthetic_keys(seed: u64, i: u64, len: u64) -> Vec<u64> {
    let private = mix(mix(seed) ^ i.rotate_left(32));
    (0..len).map(|j| private ^ j).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(rate: f64, duration: Option<Duration>, max: Option<usize>) -> BenchOptions {
        BenchOptions {
            max_requests: max,
            ..BenchOptions::synthetic(
                Synthetic {
                    rate,
                    duration,
                    prompt_tokens: 8,
                },
                "http://127.0.0.1:1",
            )
        }
    }

    #[tokio::test]
    async fn synthetic_arrivals_are_evenly_spaced_and_bounded_by_duration_or_count() {
        let opts = synthetic(20.0, Some(Duration::from_secs(2)), None);
        let plan = Plan::new(&opts).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.requests(), Some(40));
        let arrivals: Vec<Arrival> = plan.arrivals(5).collect();
        assert_eq!(arrivals.len(), 40);
        assert_eq!(arrivals[1].offset, Duration::from_millis(50));
        assert_eq!(arrivals[39].offset, Duration::from_millis(1950));
        assert!(
            arrivals
                .iter()
                .all(|a| a.prompt.len() == 8 && a.max_tokens == 5)
        );
        assert_ne!(arrivals[0].prompt, arrivals[1].prompt, "private prompts");

        let capped = Plan::new(&synthetic(20.0, Some(Duration::from_secs(2)), Some(7)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(capped.requests(), Some(7));
        let open = Plan::new(&synthetic(20.0, None, None))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open.requests(), None);
        assert_eq!(open.arrivals(5).take(1000).count(), 1000, "until stopped");
    }

    #[tokio::test]
    async fn bad_synthetic_settings_are_usage_errors() {
        for opts in [
            synthetic(0.0, None, None),
            synthetic(f64::NAN, None, None),
            synthetic(5.0, Some(Duration::ZERO), None),
        ] {
            let err = Plan::new(&opts).await.err();
            assert!(matches!(err, Some(BenchError::Usage(_))), "{opts:?}");
        }
    }

    #[test]
    fn synthetic_prompts_depend_on_the_seed_and_the_request() {
        assert_eq!(synthetic_keys(1, 3, 16), synthetic_keys(1, 3, 16));
        assert_ne!(synthetic_keys(1, 3, 16), synthetic_keys(2, 3, 16));
        assert_ne!(synthetic_keys(1, 3, 16), synthetic_keys(1, 4, 16));
    }
}
