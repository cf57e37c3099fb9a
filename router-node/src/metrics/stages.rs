//! Where a request's time goes before its first token, stage by stage
//! (`request_stage_seconds{stage, prompt}`): the body read, parsing and the checks before
//! tokenizing, the wait for a tokenizer slot, tokenizing, classification and hashing, the
//! admission (the router's queue included), and the worker's first token after it (connect,
//! its own queue and prefill). `prompt` is `short` (at most [`SHORT_PROMPT_TOKENS`] tokens)
//! or `long`, so a short request waiting behind long ones shows in its own series.
//!
//! A [`StageClock`] is owned by the request's `RequestObserver`: the frontend marks the end
//! of each stage as it goes ([`StageClock::mark`]); the time since the previous mark is that
//! stage's. The stages are recorded together when the first token arrives, so only requests
//! that reached one count (a refused or failed request has no time to first token to split).

use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;

/// A prompt of at most this many tokens is `short` (one or two KV blocks of a usual engine
/// and the shortest turns of a chat), longer ones `long`.
pub const SHORT_PROMPT_TOKENS: u64 = 2048;

/// One stage of a request before its first token, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The body, from the request's arrival to its last byte.
    Read,
    /// Parsing, rendering a chat, the checks before tokenizing and the concurrency permit.
    Parse,
    /// Waiting for a tokenizer slot (long prompts only: short ones are tokenized at once).
    TokenizeWait,
    /// Tokenizing.
    Tokenize,
    /// Classification, the API key's token rate and the prompt's block hashes.
    Classify,
    /// The admission: the route call to the pool's router, its queue included.
    Admit,
    /// From the admission to the first token read from the worker: connect, send, the
    /// engine's own queue and prefill (both legs when disaggregated).
    FirstToken,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 7] = [
        Self::Read,
        Self::Parse,
        Self::TokenizeWait,
        Self::Tokenize,
        Self::Classify,
        Self::Admit,
        Self::FirstToken,
    ];

    /// The `stage` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Parse => "parse",
            Self::TokenizeWait => "tokenize_wait",
            Self::Tokenize => "tokenize",
            Self::Classify => "classify",
            Self::Admit => "admit",
            Self::FirstToken => "first_token",
        }
    }
}

/// The `prompt` label values, in the order of [`StageSeries`]' columns.
pub(super) const PROMPT_SIZES: [&str; 2] = ["short", "long"];

/// The histograms of every stage and prompt size, looked up once when the metrics are
/// built.
#[derive(Debug, Clone)]
pub(crate) struct StageSeries {
    pub(super) by_stage: [[Histogram; 2]; 7],
}

impl StageSeries {
    fn observe(&self, stage: Stage, long: bool, seconds: f64) {
        self.by_stage[stage as usize][usize::from(long)].observe(seconds);
    }
}

/// One request's time per stage so far (module docs).
#[derive(Debug, Clone)]
pub struct StageClock {
    last: Instant,
    spent: [f64; 7],
    recorded: bool,
}

impl StageClock {
    /// A request that arrived at `started`.
    pub fn new(started: Instant) -> Self {
        Self {
            last: started,
            spent: [0.0; 7],
            recorded: false,
        }
    }

    /// `stage` ends now: the time since the previous mark is its.
    pub fn mark(&mut self, stage: Stage) {
        let now = Instant::now();
        self.spent[stage as usize] += now.duration_since(self.last).as_secs_f64();
        self.last = now;
    }

    /// Moves `seconds` of what was marked as `from` to `into` (a wait measured inside a
    /// stage).
    pub fn move_time(&mut self, from: Stage, into: Stage, seconds: f64) {
        let moved = seconds.min(self.spent[from as usize]);
        self.spent[from as usize] -= moved;
        self.spent[into as usize] += moved;
    }

    /// Records every stage once, the first token having arrived now, for a prompt of
    /// `prompt_tokens` (unknown: `short`).
    pub(super) fn record(&mut self, series: &StageSeries, prompt_tokens: Option<u64>) {
        if std::mem::replace(&mut self.recorded, true) {
            return;
        }
        self.mark(Stage::FirstToken);
        let long = prompt_tokens.is_some_and(|n| n > SHORT_PROMPT_TOKENS);
        for stage in Stage::ALL {
            series.observe(stage, long, self.spent[stage as usize]);
        }
    }

    /// The seconds spent in `stage` so far.
    pub fn spent(&self, stage: Stage) -> f64 {
        self.spent[stage as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn each_mark_gives_the_time_since_the_previous_one_to_its_stage() {
        let mut clock = StageClock::new(Instant::now());
        tokio::time::advance(Duration::from_millis(5)).await;
        clock.mark(Stage::Read);
        tokio::time::advance(Duration::from_millis(30)).await;
        clock.mark(Stage::Tokenize);
        // 20 of the 30 ms were a wait for a slot.
        clock.move_time(Stage::Tokenize, Stage::TokenizeWait, 0.020);
        tokio::time::advance(Duration::from_millis(2)).await;
        clock.mark(Stage::Admit);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(clock.spent(Stage::Read), 0.005));
        assert!(near(clock.spent(Stage::Tokenize), 0.010));
        assert!(near(clock.spent(Stage::TokenizeWait), 0.020));
        assert!(near(clock.spent(Stage::Admit), 0.002));
        assert!(near(clock.spent(Stage::Parse), 0.0));
        // A wait longer than the stage moves only what the stage had.
        clock.move_time(Stage::Admit, Stage::Classify, 1.0);
        assert!(near(clock.spent(Stage::Admit), 0.0));
        assert!(near(clock.spent(Stage::Classify), 0.002));
    }
}
