//! One API key's rate limits: requests per second and tokens per second, each a GCRA
//! bucket (`governor`) with a burst. The requests bucket is checked before a request's body
//! is read; the tokens bucket after tokenizing, charged the prompt's tokens plus the output
//! the request may ask for (its `max_tokens`, as the router books it): an upper bound,
//! charged once and never refunded.
//!
//! The buckets run on tokio's clock (`TokioClock`), so a test with paused time drives them;
//! `governor` itself reads no clock.

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use serde::Serialize;
use std::num::NonZeroU32;
use std::time::Duration;

/// Fastest rate a limit may be set to (per second); beyond it a bucket's period would round
/// to nothing.
pub const MAX_RATE_PER_S: f64 = 1e9;

/// One limit as configured: `per_s` cells a second, at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateSpec {
    pub per_s: f64,
    pub burst: u32,
}

impl RateSpec {
    /// A limit of `per_s` a second (finite, above 0, at most [`MAX_RATE_PER_S`]) with
    /// `burst` (at least 1; absent: one second's worth, at least 1). The error says what is
    /// wrong with which value.
    pub fn new(per_s: f64, burst: Option<u32>) -> Result<Self, String> {
        if !(per_s.is_finite() && per_s > 0.0 && per_s <= MAX_RATE_PER_S) {
            return Err(format!(
                "must be a number above 0 and at most {MAX_RATE_PER_S}, got {per_s}"
            ));
        }
        // One cell per period; a rate too slow for a `Duration` is refused here too.
        if Duration::try_from_secs_f64(1.0 / per_s).is_err() {
            return Err(format!("{per_s} per second is too slow a rate"));
        }
        let burst = match burst {
            Some(0) => return Err("burst must be at least 1".to_owned()),
            Some(burst) => burst,
            // per_s <= 1e9 fits a u32 once rounded up.
            None => per_s.ceil().clamp(1.0, f64::from(u32::MAX)) as u32,
        };
        Ok(Self { per_s, burst })
    }

    fn quota(&self) -> Option<Quota> {
        let period = Duration::try_from_secs_f64(1.0 / self.per_s).ok()?;
        let burst = NonZeroU32::new(self.burst)?;
        Some(Quota::with_period(period)?.allow_burst(burst))
    }
}

/// A key's limits as configured (both optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LimitSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<RateSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<RateSpec>,
}

/// Time for the buckets: tokio's clock, as the time since the limits were built.
#[derive(Debug, Clone, Copy)]
struct TokioClock {
    origin: tokio::time::Instant,
}

impl Clock for TokioClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

type Bucket = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>;

fn bucket(spec: Option<RateSpec>, clock: TokioClock) -> Option<Bucket> {
    Some(RateLimiter::direct_with_clock(spec?.quota()?, clock))
}

/// Why the tokens bucket refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokensRefused {
    /// Over the rate now: it would pass after this long.
    Wait(Duration),
    /// More tokens than the burst: it can never pass under this key.
    OverBurst { needed: u64, burst: u32 },
}

/// The live buckets of one key. Kept across reloads of the keys file while the key's name
/// and limits stay the same (a reload does not refill them).
pub struct KeyLimits {
    spec: LimitSpec,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

impl std::fmt::Debug for KeyLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLimits")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl KeyLimits {
    /// Full buckets for `spec`.
    pub fn new(spec: LimitSpec) -> Self {
        let clock = TokioClock {
            origin: tokio::time::Instant::now(),
        };
        Self {
            spec,
            requests: bucket(spec.requests, clock),
            tokens: bucket(spec.tokens, clock),
        }
    }

    pub fn spec(&self) -> LimitSpec {
        self.spec
    }

    /// Takes one request from the requests bucket; `Err(wait)` when it is empty (nothing
    /// taken).
    pub fn request(&self) -> Result<(), Duration> {
        let Some(bucket) = &self.requests else {
            return Ok(());
        };
        bucket
            .check()
            .map_err(|not_until| not_until.wait_time_from(bucket.clock().now()))
    }

    /// Takes `n` tokens from the tokens bucket, all or none.
    pub fn tokens(&self, n: u64) -> Result<(), TokensRefused> {
        let (Some(bucket), Some(spec)) = (&self.tokens, self.spec.tokens) else {
            return Ok(());
        };
        let over = TokensRefused::OverBurst {
            needed: n,
            burst: spec.burst,
        };
        let Some(cells) = u32::try_from(n).ok().and_then(NonZeroU32::new) else {
            // Nothing to take, or more than any burst can hold.
            return if n == 0 { Ok(()) } else { Err(over) };
        };
        match bucket.check_n(cells) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(TokensRefused::Wait(
                not_until.wait_time_from(bucket.clock().now()),
            )),
            Err(_insufficient) => Err(over),
        }
    }
}

/// A wait as a `Retry-After` value: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
