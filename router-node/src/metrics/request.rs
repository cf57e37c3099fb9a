//! One OpenAI request's operator metrics, recorded as the frontend relays its answer:
//! `time_to_first_token_seconds` (from the request's arrival to the first content chunk read
//! from the worker, which a streaming client gets at once), `inter_token_latency_seconds`
//! (the gaps between content chunks as they come from the worker; chunks read together are
//! 0 apart), `request_duration_seconds` by outcome, and the `prompt` / `cached` / `output`
//! token counters.
//!
//! Tokens come from the worker's `usage` when its stream carries one (vLLM and the
//! simulated worker do when asked with `stream_options.include_usage`, which the frontend
//! asks for a non-streaming client), else from the router: the prompt's token count, the
//! prefix the chosen rank holds (`PrefixHit::cached_tokens`) and the number of content
//! chunks (one token each for engines that stream token by token). They are counted only
//! for requests whose worker answered (some of its stream was read), whatever the outcome.
//!
//! A [`RequestObserver`] records exactly once: at [`RequestObserver::finish`], or when
//! dropped before it (the client went away: `cancelled`). [`RequestObserver::hand_over`]
//! moves that duty to the streaming response body.

use super::Metrics;
use super::class_series::ClassSeries;
use super::stages::{Stage, StageClock};
use crate::sse::{Chunk, SseReader};
use router_core::PrefixHit;
use std::sync::Arc;
use tokio::time::Instant;

/// How a request ended: the `outcome` label of `request_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// The answer was relayed to its end.
    Ok,
    /// Refused by the router or the frontend's limits (429, 503): retry later.
    Rejected,
    /// The client's request was refused (400, 403, 413, a worker's 4xx, ...).
    Invalid,
    /// A worker or the node failed (502, 500, a stream broken mid-way).
    Error,
    /// The client went away before the end.
    Cancelled,
}

impl RequestOutcome {
    /// Its place among the five outcomes.
    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Rejected => "rejected",
            Self::Invalid => "invalid",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
        }
    }

    /// The outcome of an error answer with HTTP `status`.
    pub fn of_status(status: u16) -> Self {
        match status {
            429 | 503 => Self::Rejected,
            400..=499 => Self::Invalid,
            _ => Self::Error,
        }
    }
}

/// Records one request's latencies and tokens (see the module doc).
#[derive(Debug)]
pub struct RequestObserver {
    metrics: Arc<Metrics>,
    started: Instant,
    /// The series of the request's class (`unknown` until known).
    series: Arc<ClassSeries>,
    /// The router's prompt token count, once admitted.
    prompt_tokens: Option<u64>,
    /// The router's matched prefix in tokens, once admitted.
    cached_tokens: u64,
    sse: SseReader,
    last_content: Option<Instant>,
    /// Some of the worker's answer was read.
    streamed: bool,
    /// Still to record (on finish, or as `cancelled` on drop).
    armed: bool,
    /// The time per stage before the first token.
    stages: StageClock,
}

impl RequestObserver {
    /// A request that arrived now, of class `unknown` until [`Self::class`] says.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self::started_at(metrics, Instant::now())
    }

    /// A request that arrived at `started`.
    pub fn started_at(metrics: Arc<Metrics>, started: Instant) -> Self {
        Self {
            series: metrics.class_series("unknown"),
            metrics,
            started,
            prompt_tokens: None,
            cached_tokens: 0,
            sse: SseReader::default(),
            last_content: None,
            streamed: false,
            armed: true,
            stages: StageClock::new(started),
        }
    }

    /// `stage` of the request ends now ([`StageClock::mark`]).
    pub fn stage(&mut self, stage: Stage) {
        self.stages.mark(stage);
    }

    /// `seconds` of what was marked as `from` were spent in `into` instead.
    pub fn stage_moved(&mut self, from: Stage, into: Stage, seconds: f64) {
        self.stages.move_time(from, into, seconds);
    }

    /// The request's class, once resolved.
    pub fn class(&mut self, name: &str) {
        if self.series.class() != name {
            self.series = self.metrics.class_series(name);
        }
    }

    /// The class label it records under (`unknown` until set).
    pub fn class_name(&self) -> &str {
        self.series.class()
    }

    /// The admission that does the prompt's work (aggregated, or the prefill leg): the
    /// router's token count and the prefix the chosen rank holds.
    pub fn admitted(&mut self, prompt_tokens: u64, prefix: PrefixHit) {
        self.stages.mark(Stage::Admit);
        self.prompt_tokens = Some(prompt_tokens);
        self.cached_tokens = prefix.cached_tokens;
    }

    /// Bytes of the worker's stream, as they are read.
    pub fn chunk(&mut self, bytes: &[u8]) {
        self.streamed = true;
        let content = self.sse.feed(bytes);
        self.content(content);
    }

    /// One event of the worker's stream that the caller read itself (the non-streaming
    /// assembler). Records as [`Self::chunk`] would have.
    pub fn parsed(&mut self, chunk: &Chunk<'_>) {
        self.streamed = true;
        let before = self.sse.content_chunks;
        self.sse.chunk(chunk);
        self.content(self.sse.content_chunks - before);
    }

    /// `content` content chunks read now: time to first token, then the gaps.
    fn content(&mut self, content: u64) {
        if content == 0 {
            return;
        }
        let now = Instant::now();
        let http = &self.metrics.http;
        for _ in 0..content {
            match self.last_content {
                None => {
                    self.series
                        .ttft(http)
                        .observe(now.duration_since(self.started).as_secs_f64());
                    self.stages.record(&self.metrics.stages, self.prompt_tokens);
                }
                Some(previous) => self
                    .series
                    .itl(http)
                    .observe(now.duration_since(previous).as_secs_f64()),
            }
            self.last_content = Some(now);
        }
    }

    /// Moves the duty to record into the returned observer (the streaming body owns it);
    /// this one then records nothing.
    pub fn hand_over(&mut self) -> Self {
        let taken = Self {
            metrics: Arc::clone(&self.metrics),
            started: self.started,
            series: Arc::clone(&self.series),
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            sse: std::mem::take(&mut self.sse),
            last_content: self.last_content,
            streamed: self.streamed,
            armed: self.armed,
            stages: self.stages.clone(),
        };
        self.armed = false;
        taken
    }

    /// Records the request's end (once; later calls, or one after a hand-over, do nothing).
    pub fn finish(&mut self, outcome: RequestOutcome) {
        if !std::mem::replace(&mut self.armed, false) {
            return;
        }
        let http = &self.metrics.http;
        let series = &self.series;
        series
            .duration(http, outcome)
            .observe(self.started.elapsed().as_secs_f64());
        if !self.streamed {
            return;
        }
        let sse = &self.sse;
        if let Some(prompt) = sse.prompt_tokens.or(self.prompt_tokens) {
            series.prompt_tokens(http).inc_by(prompt);
        }
        series
            .cached_tokens(http)
            .inc_by(sse.cached_tokens.unwrap_or(self.cached_tokens));
        series
            .output_tokens(http)
            .inc_by(sse.completion_tokens.unwrap_or(sse.content_chunks));
    }
}

impl Drop for RequestObserver {
    fn drop(&mut self) {
        self.finish(RequestOutcome::Cancelled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    }

    #[tokio::test(start_paused = true)]
    async fn a_streamed_request_records_ttft_gaps_tokens_and_its_duration_once() {
        let metrics = Arc::new(Metrics::new());
        let mut observer = RequestObserver::new(Arc::clone(&metrics));
        observer.class("chat");
        observer.admitted(
            40,
            PrefixHit {
                prompt_blocks: 2,
                matched_blocks: 1,
                cached_tokens: 16,
            },
        );
        tokio::time::advance(std::time::Duration::from_millis(300)).await;
        observer.chunk(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
        let mut relay = observer.hand_over();
        tokio::time::advance(std::time::Duration::from_millis(20)).await;
        relay.chunk(
            b"data: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: {\"choices\":[{\"text\":\"c\"}]}\n\n",
        );
        observer.finish(RequestOutcome::Error); // handed over: nothing
        relay.finish(RequestOutcome::Ok);
        drop(relay); // finished: no `cancelled` on top
        let text = metrics.render();
        let class = r#"{class="chat"}"#;
        assert_eq!(
            value(
                &text,
                &format!("switchyard_time_to_first_token_seconds_count{class}")
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                &format!("switchyard_time_to_first_token_seconds_sum{class}")
            ),
            Some(0.3),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                &format!("switchyard_inter_token_latency_seconds_count{class}")
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                &format!("switchyard_inter_token_latency_seconds_sum{class}")
            ),
            Some(0.02),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                r#"switchyard_request_duration_seconds_count{class="chat",outcome="ok"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert!(!text.contains(r#"outcome="error""#), "{text}");
        // No usage in the stream: the router's figures and the content chunks.
        assert_eq!(
            value(&text, &format!("switchyard_prompt_tokens_total{class}")),
            Some(40.0)
        );
        assert_eq!(
            value(&text, &format!("switchyard_cached_tokens_total{class}")),
            Some(16.0)
        );
        assert_eq!(
            value(&text, &format!("switchyard_output_tokens_total{class}")),
            Some(3.0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn usage_wins_over_the_routers_figures_and_a_dropped_request_is_cancelled() {
        let metrics = Arc::new(Metrics::new());
        let mut observer = RequestObserver::new(Arc::clone(&metrics));
        observer.class("batch");
        observer.admitted(40, PrefixHit::default());
        observer.chunk(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
        observer.chunk(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":41,\"completion_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n");
        drop(observer);
        // Refused before any worker answered: a duration, no tokens.
        let mut refused = RequestObserver::new(Arc::clone(&metrics));
        refused.class("batch");
        refused.finish(RequestOutcome::of_status(429));
        let text = metrics.render();
        let class = r#"{class="batch"}"#;
        assert_eq!(
            value(&text, &format!("switchyard_prompt_tokens_total{class}")),
            Some(41.0),
            "{text}"
        );
        assert_eq!(
            value(&text, &format!("switchyard_cached_tokens_total{class}")),
            Some(32.0)
        );
        assert_eq!(
            value(&text, &format!("switchyard_output_tokens_total{class}")),
            Some(7.0)
        );
        for outcome in ["cancelled", "rejected"] {
            let series = format!(
                r#"switchyard_request_duration_seconds_count{{class="batch",outcome="{outcome}"}}"#
            );
            assert_eq!(value(&text, &series), Some(1.0), "{series}:\n{text}");
        }
    }

    #[test]
    fn outcomes_of_error_statuses() {
        use RequestOutcome::*;
        let cases = [
            (429, Rejected),
            (503, Rejected),
            (400, Invalid),
            (403, Invalid),
            (413, Invalid),
            (502, Error),
            (500, Error),
        ];
        for (status, outcome) in cases {
            assert_eq!(RequestOutcome::of_status(status), outcome, "{status}");
        }
    }
}
