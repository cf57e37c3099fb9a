//! Whether an engine that should be publishing KV events is heard (pure: time is passed in).
//!
//! An engine that prefills prompts stores KV blocks and, with a publisher, says so in a batch.
//! One that prefills without a batch reaching the link for a while is silent: its publisher is
//! not where the link listens (vLLM given a concrete `tcp://IP:PORT` connects instead of
//! binding), or a firewall is in between. Routing then falls back to load alone without a
//! word, so the link reports it: [`SilenceWatch`] follows the engine's prompt-token counter
//! between batches and says when the engine became silent and when it was heard again.

use serde::Serialize;
use std::time::Duration;
use tokio::time::Instant;

/// Prompt tokens an engine must prefill (in blocks) without a batch before it counts as
/// silent: a few blocks, so fully cached prompts (which store nothing) do not count.
const SILENT_BLOCKS: u64 = 4;

/// What the link knows of the engine's KV events, as `/debug/state` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum EventsHeard {
    /// The engine has no publisher configured.
    NotConfigured,
    /// Batches arrive, or the engine has prefilled too little to say.
    Heard,
    /// The engine prefilled `prompt_tokens` tokens over `for_secs` seconds and no batch
    /// arrived.
    Silent { for_secs: u64, prompt_tokens: u64 },
}

/// A change worth a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SilenceChange {
    BecameSilent { prompt_tokens: u64, after: Duration },
    Heard,
}

/// Follows one engine's prompt-token counter against its batches.
#[derive(Debug, Clone)]
pub struct SilenceWatch {
    after: Duration,
    min_tokens: u64,
    /// The last batch (or the join) and the engine's counter at that moment.
    since: Option<(Instant, Option<u64>)>,
    /// The counter at the last scrape.
    last_count: Option<u64>,
    silent_since: Option<Instant>,
}

impl SilenceWatch {
    /// Silent once an engine storing blocks of `block_size` tokens prefilled a few blocks'
    /// worth and `after` passed without a batch.
    pub fn new(after: Duration, block_size: u32) -> Self {
        Self {
            after,
            min_tokens: SILENT_BLOCKS * u64::from(block_size.max(1)),
            since: None,
            last_count: None,
            silent_since: None,
        }
    }

    /// The engine joined (or joined again) at `now`, its counter at `count`.
    pub fn joined(&mut self, now: Instant, count: Option<u64>) {
        self.since = Some((now, count));
        self.last_count = count;
        self.silent_since = None;
    }

    /// A batch arrived.
    pub fn batch(&mut self, now: Instant) -> Option<SilenceChange> {
        self.since = Some((now, self.last_count));
        self.silent_since.take().map(|_| SilenceChange::Heard)
    }

    /// A scrape read the engine's counter (`None`: the engine does not report it, and
    /// silence cannot be told).
    pub fn scrape(&mut self, now: Instant, count: Option<u64>) -> Option<SilenceChange> {
        self.last_count = count;
        let (at, base) = self.since?;
        let (Some(count), Some(base)) = (count, base) else {
            // Nothing to compare with yet: start from this scrape.
            self.since = Some((at, count));
            return None;
        };
        if count < base {
            // The counter went back: the engine restarted under the same address.
            self.since = Some((now, Some(count)));
            return None;
        }
        let prefilled = count - base;
        let quiet = now.saturating_duration_since(at);
        if self.silent_since.is_none() && prefilled >= self.min_tokens && quiet >= self.after {
            self.silent_since = Some(at);
            return Some(SilenceChange::BecameSilent {
                prompt_tokens: prefilled,
                after: quiet,
            });
        }
        None
    }

    /// What `/debug/state` shows at `now`.
    pub fn heard(&self, now: Instant) -> EventsHeard {
        match (self.silent_since, self.since, self.last_count) {
            (Some(at), Some((_, Some(base))), Some(count)) => EventsHeard::Silent {
                for_secs: now.saturating_duration_since(at).as_secs(),
                prompt_tokens: count.saturating_sub(base),
            },
            _ => EventsHeard::Heard,
        }
    }

    pub fn is_silent(&self) -> bool {
        self.silent_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(30);

    fn watch(now: Instant) -> SilenceWatch {
        let mut w = SilenceWatch::new(AFTER, 16);
        w.joined(now, Some(1_000));
        w
    }

    #[tokio::test(start_paused = true)]
    async fn an_engine_that_prefills_without_batches_becomes_silent_once() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        // Prefilling, but not yet long enough.
        assert_eq!(w.scrape(t0 + Duration::from_secs(10), Some(5_000)), None);
        let change = w.scrape(t0 + AFTER, Some(9_000));
        assert_eq!(
            change,
            Some(SilenceChange::BecameSilent {
                prompt_tokens: 8_000,
                after: AFTER
            })
        );
        // Said once, shown until heard.
        assert_eq!(w.scrape(t0 + AFTER * 2, Some(10_000)), None);
        assert_eq!(
            w.heard(t0 + AFTER * 2),
            EventsHeard::Silent {
                for_secs: 60,
                prompt_tokens: 9_000
            }
        );
        assert_eq!(
            w.batch(t0 + AFTER * 2 + Duration::from_secs(1)),
            Some(SilenceChange::Heard)
        );
        assert_eq!(w.heard(t0 + AFTER * 3), EventsHeard::Heard);
        assert!(!w.is_silent());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_engines_batches_and_unknown_counters_are_not_silence() {
        let t0 = Instant::now();
        // Idle: nothing prefilled, however long.
        let mut w = watch(t0);
        assert_eq!(w.scrape(t0 + AFTER * 10, Some(1_000 + 63)), None);
        // Batches keep arriving while it prefills.
        let mut w = watch(t0);
        for s in 1..=10u64 {
            let now = t0 + Duration::from_secs(s * 10);
            assert_eq!(w.scrape(now, Some(1_000 + s * 5_000)), None);
            assert_eq!(w.batch(now), None);
        }
        // An engine that does not report the counter.
        let mut w = SilenceWatch::new(AFTER, 16);
        w.joined(t0, None);
        assert_eq!(w.scrape(t0 + AFTER * 2, None), None);
        assert_eq!(w.heard(t0 + AFTER * 2), EventsHeard::Heard);
        // A counter that went back (a restarted engine) starts over.
        let mut w = watch(t0);
        assert_eq!(w.scrape(t0 + AFTER, Some(10)), None);
        assert_eq!(
            w.scrape(t0 + AFTER + Duration::from_secs(1), Some(9_000)),
            None
        );
        assert!(
            w.scrape(t0 + AFTER * 2 + Duration::from_secs(1), Some(9_000))
                .is_some()
        );
    }
}
