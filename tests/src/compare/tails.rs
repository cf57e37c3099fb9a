//! Tails by kind of request, and what the router cost: an average or a p99 over every
//! request can hide the user who waits, so each run also reports the time to first token of
//! short and of long prompts apart, that of short prompts sent during bursts of long ones,
//! and the router's CPU per request.
//!
//! From bench's per-request records (`--per-request`): a prompt is short when the endpoint
//! counted at most [`SHORT_PROMPT_TOKENS`] tokens. The run is cut into windows of
//! [`WINDOW_MS`] of send time; the *bursts* are the tenth of the windows (at least one) in
//! which the most long-prompt tokens were sent. Percentiles are nearest-rank over the ok
//! requests.

use router_tools::bench::{RecordOutcome, RequestRecord};

/// The most prompt tokens of a short request (one or two KV blocks of a usual engine).
pub const SHORT_PROMPT_TOKENS: u64 = 2048;

/// The windows bursts are found in, by send time.
pub const WINDOW_MS: f64 = 2_000.0;

/// TTFT of one kind of request: p50 and p99 in ms, over how many requests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tail {
    pub count: usize,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

impl Tail {
    fn of(mut ttfts: Vec<f64>) -> Self {
        ttfts.retain(|v| v.is_finite());
        ttfts.sort_by(f64::total_cmp);
        Self {
            count: ttfts.len(),
            p50: percentile(&ttfts, 50.0),
            p99: percentile(&ttfts, 99.0),
        }
    }
}

/// The nearest-rank `p`-th percentile of sorted `values`.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// The tails of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tails {
    pub short: Tail,
    pub long: Tail,
    /// Short prompts sent in a burst window.
    pub short_in_bursts: Tail,
    /// Burst windows of the run.
    pub bursts: usize,
}

/// The tails of bench's per-request `records` (a run without them has none).
pub fn tails(records: &[RequestRecord]) -> Tails {
    let window = |sent_ms: f64| (sent_ms.max(0.0) / WINDOW_MS) as usize;
    let windows = records
        .iter()
        .map(|r| window(r.sent_ms) + 1)
        .max()
        .unwrap_or(0);
    let mut long_tokens = vec![0u64; windows];
    for r in records {
        if let Some(tokens) = r.prompt_tokens.filter(|&t| t > SHORT_PROMPT_TOKENS) {
            long_tokens[window(r.sent_ms)] += tokens;
        }
    }
    // The tenth of the windows with the most long-prompt tokens (ties in), none empty.
    let mut busiest = long_tokens.clone();
    busiest.sort_unstable_by(|a, b| b.cmp(a));
    let line = busiest
        .get(windows.div_ceil(10).saturating_sub(1))
        .copied()
        .unwrap_or(u64::MAX)
        .max(1);
    let burst: Vec<bool> = long_tokens.iter().map(|&t| t >= line).collect();
    let ok = || {
        records
            .iter()
            .filter(|r| r.outcome == RecordOutcome::Ok)
            .filter_map(|r| Some((r, r.ttft_ms?, r.prompt_tokens?)))
    };
    let short = |tokens: u64| tokens <= SHORT_PROMPT_TOKENS;
    Tails {
        short: Tail::of(
            ok().filter(|(_, _, t)| short(*t))
                .map(|(_, v, _)| v)
                .collect(),
        ),
        long: Tail::of(
            ok().filter(|(_, _, t)| !short(*t))
                .map(|(_, v, _)| v)
                .collect(),
        ),
        short_in_bursts: Tail::of(
            ok().filter(|(r, _, t)| short(*t) && burst[window(r.sent_ms)])
                .map(|(_, v, _)| v)
                .collect(),
        ),
        bursts: burst.iter().filter(|&&b| b).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sent_ms: f64, prompt: u64, ttft: f64) -> RequestRecord {
        RequestRecord {
            index: 0,
            class: "default".to_owned(),
            sent_ms,
            outcome: RecordOutcome::Ok,
            status: Some(200),
            reason: None,
            ttft_ms: Some(ttft),
            e2e_ms: ttft + 10.0,
            output_tokens: Some(4),
            prompt_tokens: Some(prompt),
            cached_tokens: Some(0),
        }
    }

    #[test]
    fn short_and_long_prompts_apart_and_short_ones_in_bursts_of_long_ones() {
        let mut records = Vec::new();
        // Ten windows with one long prompt each and a short one at 10 ms; the fifth window
        // holds twenty long prompts (the busiest tenth) and a short one that waited 900 ms.
        for w in 0..10 {
            let at = f64::from(w) * WINDOW_MS;
            let longs = if w == 4 { 20 } else { 1 };
            for _ in 0..longs {
                records.push(record(at, 50_000, 300.0));
            }
            records.push(record(at + 1.0, 600, if w == 4 { 900.0 } else { 10.0 }));
        }
        let t = tails(&records);
        assert_eq!(t.bursts, 1);
        assert_eq!(t.short.count, 10);
        assert_eq!(t.short.p50, Some(10.0));
        assert_eq!(t.short.p99, Some(900.0));
        assert_eq!(t.long.count, 29);
        assert_eq!(t.short_in_bursts.count, 1);
        assert_eq!(t.short_in_bursts.p99, Some(900.0));
        assert_eq!(tails(&[]), Tails::default());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
