//! One bench request after the fact: how it ended ([`Finished`], as the client task returns
//! it), which bucket that is (ok / shed / error, [`bucket`]), and its line in the report's
//! `requests` list and the plots ([`RequestRecord`]).
//!
//! A record holds when the request was sent (ms after the run's start), its class, bucket,
//! HTTP status, reason, TTFT, end to end, and for an ok request the token counts the
//! endpoint reported (prompt, cached, output), so a run can be cut by send time (phases of a
//! fault) or by completion time (`sent_ms + e2e_ms`: throughput and hit rate over time).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::report::DEFAULT_CLASS;
use crate::loadgen::Outcome;
use crate::report::round;

/// One finished request: its place in send order, its class (`None`: no header), when it
/// was sent (after the run's start), how long it took and how it ended.
#[derive(Debug, Clone)]
pub struct Finished {
    pub index: u64,
    pub class: Option<String>,
    pub sent_at: Duration,
    pub took: Duration,
    pub outcome: Outcome,
}

/// Which bucket a request landed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOutcome {
    Ok,
    Shed,
    Error,
}

/// One request of the run, as `requests` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Send order, from 0.
    pub index: u64,
    pub class: String,
    /// Sent this long after the run's start (`started_unix_ms`).
    pub sent_ms: f64,
    pub outcome: RecordOutcome,
    /// The HTTP status; `None` when no response came.
    pub status: Option<u16>,
    /// Why it was shed or failed (as in `shed_by_reason` / `errors_by_reason`).
    pub reason: Option<String>,
    pub ttft_ms: Option<f64>,
    /// Send → the end of its answer, whatever the outcome.
    pub e2e_ms: f64,
    /// Output tokens of an ok request (`usage.completion_tokens`, else content chunks).
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// `usage.prompt_tokens`, when the endpoint reported it.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, when the endpoint reported it.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// The bucket of `outcome` and, unless it is ok, the reason.
pub fn bucket(outcome: &Outcome) -> (RecordOutcome, Option<String>) {
    match outcome {
        Outcome::Admitted(r) if r.completed => (RecordOutcome::Ok, None),
        Outcome::Admitted(_) => (RecordOutcome::Error, Some("incomplete_stream".to_owned())),
        Outcome::Rejected {
            status: Some(429 | 503),
            reason,
        } => (RecordOutcome::Shed, Some(reason.clone())),
        Outcome::Rejected { reason, .. } => (RecordOutcome::Error, Some(reason.clone())),
    }
}

/// Output tokens of an ok outcome (`usage.completion_tokens`, else content chunks); 0 else.
pub fn output_tokens(outcome: &Outcome) -> u64 {
    match outcome {
        Outcome::Admitted(r) if r.completed => r.completion_tokens.unwrap_or(r.content_chunks),
        _ => 0,
    }
}

fn ms(d: Duration) -> f64 {
    round(d.as_secs_f64() * 1e3, 3)
}

impl RequestRecord {
    pub fn of(f: &Finished) -> Self {
        let (outcome, reason) = bucket(&f.outcome);
        let ok = outcome == RecordOutcome::Ok;
        let (status, ttft, prompt, cached) = match &f.outcome {
            Outcome::Admitted(r) => (
                Some(200),
                r.ttft.map(ms),
                r.prompt_tokens,
                r.cached_tokens.map(|c| c.min(r.prompt_tokens.unwrap_or(c))),
            ),
            Outcome::Rejected { status, .. } => (*status, None, None, None),
        };
        Self {
            index: f.index,
            class: f.class.as_deref().unwrap_or(DEFAULT_CLASS).to_owned(),
            sent_ms: ms(f.sent_at),
            outcome,
            status,
            reason,
            ttft_ms: ttft,
            e2e_ms: ms(f.took),
            output_tokens: ok.then(|| output_tokens(&f.outcome)),
            prompt_tokens: prompt.filter(|_| ok),
            cached_tokens: cached.filter(|_| ok),
        }
    }

    /// When the answer ended, ms after the run's start.
    pub fn done_ms(&self) -> f64 {
        self.sent_ms + self.e2e_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::Streamed;

    fn finished(outcome: Outcome) -> Finished {
        Finished {
            index: 3,
            class: None,
            sent_at: Duration::from_millis(250),
            took: Duration::from_millis(40),
            outcome,
        }
    }

    #[test]
    fn records_keep_the_token_counts_of_ok_requests_only() {
        let ok = RequestRecord::of(&finished(Outcome::Admitted(Streamed {
            completed: true,
            ttft: Some(Duration::from_millis(10)),
            content_chunks: 7,
            prompt_tokens: Some(100),
            cached_tokens: Some(64),
            ..Streamed::default()
        })));
        assert_eq!(ok.outcome, RecordOutcome::Ok);
        assert_eq!(ok.class, DEFAULT_CLASS);
        assert_eq!(
            (ok.output_tokens, ok.prompt_tokens, ok.cached_tokens),
            (Some(7), Some(100), Some(64))
        );
        assert_eq!(ok.ttft_ms, Some(10.0));
        assert!((ok.done_ms() - 290.0).abs() < 1e-9);
        let broken = RequestRecord::of(&finished(Outcome::Admitted(Streamed {
            completed: false,
            prompt_tokens: Some(100),
            ..Streamed::default()
        })));
        assert_eq!(broken.outcome, RecordOutcome::Error);
        assert_eq!(broken.reason.as_deref(), Some("incomplete_stream"));
        assert_eq!((broken.output_tokens, broken.prompt_tokens), (None, None));
        let shed = RequestRecord::of(&finished(Outcome::Rejected {
            status: Some(503),
            reason: "queue_full".to_owned(),
        }));
        assert_eq!(shed.outcome, RecordOutcome::Shed);
        assert_eq!(shed.status, Some(503));
        // Records written before the token counts existed still read.
        let old = r#"{"index":0,"class":"a","sent_ms":1.0,"outcome":"ok","status":200,
                      "reason":null,"ttft_ms":2.0,"e2e_ms":3.0}"#;
        let old: RequestRecord = serde_json::from_str(old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(old.output_tokens, None);
    }
}
