//! Conditional disaggregation: whether a request of a disaggregated pool takes a remote
//! prefill (a prefill leg, then a staged decode leg) or goes straight to a decode worker,
//! which prefills it locally.
//!
//! A remote prefill pays a KV transfer and a second hop; for a prompt whose part not already
//! cached on a decode worker is short, prefilling there is cheaper. And when the prefill
//! gate would make the request wait, a decode worker with room may take it at once. A local
//! request is a decode-phase request with nothing staged: it goes through the decode
//! router's full class gate (queueing, deadline, fractions), as the reference does for its
//! bypass. The rule is off unless configured.

use serde::{Deserialize, Serialize};

/// When a request is prefilled by its decode worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalPrefillRule {
    /// A prompt with fewer tokens than this not cached on the best decode worker is
    /// prefilled there (0: never for this reason).
    pub below_uncached_tokens: u64,
    /// A request the prefill gate would make wait goes to the decode pool's gate instead.
    pub when_prefill_waits: bool,
}

/// Where a request's prefill runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "place")]
pub enum PrefillPlace {
    /// On a prefill worker; the decode worker pulls the KV.
    Remote,
    /// On the decode worker.
    Local { reason: LocalReason },
}

/// Why a request is prefilled locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalReason {
    /// Few prompt tokens are not already cached on a decode worker.
    ShortUncached,
    /// The prefill gate would have made it wait.
    PrefillWaits,
}

impl LocalReason {
    pub fn label(self) -> &'static str {
        match self {
            Self::ShortUncached => "short_uncached",
            Self::PrefillWaits => "prefill_waits",
        }
    }
}

impl PrefillPlace {
    /// `remote`, or `local` (the response header's value and the metric's label).
    pub fn label(self) -> &'static str {
        match self {
            Self::Remote => "remote",
            Self::Local { .. } => "local",
        }
    }
}

impl LocalPrefillRule {
    pub fn is_off(&self) -> bool {
        self.below_uncached_tokens == 0 && !self.when_prefill_waits
    }

    /// Before the prefill gate: a prompt of `prompt_tokens`, of which the best decode
    /// worker holds `decode_cached_tokens`.
    pub fn before_gate(&self, prompt_tokens: u64, decode_cached_tokens: u64) -> PrefillPlace {
        let uncached = prompt_tokens.saturating_sub(decode_cached_tokens);
        if uncached < self.below_uncached_tokens {
            PrefillPlace::Local {
                reason: LocalReason::ShortUncached,
            }
        } else {
            PrefillPlace::Remote
        }
    }

    /// The prefill gate said the request would wait.
    pub fn prefill_would_wait(&self) -> PrefillPlace {
        if self.when_prefill_waits {
            PrefillPlace::Local {
                reason: LocalReason::PrefillWaits,
            }
        } else {
            PrefillPlace::Remote
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn off_by_default_every_prefill_is_remote() {
        let rule = LocalPrefillRule::default();
        assert!(rule.is_off());
        assert_eq!(rule.before_gate(10, 0), PrefillPlace::Remote);
        assert_eq!(rule.prefill_would_wait(), PrefillPlace::Remote);
    }

    #[test]
    fn the_uncached_part_decides_not_the_prompt() {
        let rule = LocalPrefillRule {
            below_uncached_tokens: 512,
            when_prefill_waits: false,
        };
        let local = PrefillPlace::Local {
            reason: LocalReason::ShortUncached,
        };
        assert_eq!(rule.before_gate(100, 0), local);
        assert_eq!(rule.before_gate(8_000, 7_600), local, "mostly cached");
        assert_eq!(rule.before_gate(8_000, 0), PrefillPlace::Remote);
        assert_eq!(
            rule.before_gate(512, 0),
            PrefillPlace::Remote,
            "at the line"
        );
    }

    proptest! {
        /// More cached on the decode side never moves a local prefill back to remote.
        #[test]
        fn caching_more_never_makes_a_prefill_remote(
            line in 0u64..10_000, prompt in 0u64..20_000, cached in 0u64..20_000, more in 0u64..5_000,
        ) {
            let rule = LocalPrefillRule { below_uncached_tokens: line, when_prefill_waits: false };
            let cached = cached.min(prompt);
            let more_cached = (cached + more).min(prompt);
            if rule.before_gate(prompt, cached) != PrefillPlace::Remote {
                prop_assert_ne!(rule.before_gate(prompt, more_cached), PrefillPlace::Remote);
            }
        }
    }
}
