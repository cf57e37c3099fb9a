//! The demo's built-in policy profile and its seeded synthetic workload.
//!
//! - Profile: two classes, `interactive` (the default; short SLO, big DRR quantum, tight
//!   prefill line, a per-worker queue cap) and `batch` (long SLO, small quantum, looser
//!   lines, no queue cap), parsed from TOML by `PolicyProfile::from_toml_str` like any
//!   operator file.
//! - Workload: about 30 % interactive and 70 % batch requests. Every prompt starts with one
//!   of a few shared system prompts, so block hashes repeat across requests (hashes are a
//!   chain over the blocks' contents, as engines compute them). Prompts are 256-4096 tokens
//!   in 16-token blocks, outputs 32-512 tokens. Arrivals are open loop (exponential gaps)
//!   in three phases: a warm-up below fleet capacity, a long overload so queueing, DRR
//!   and deadline shedding all show, and a cool-down that lets the backlog drain.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use router_core::hashing::{local_block_hashes, sequence_hashes};
use router_core::policy::PolicyFile;
use router_core::{PolicyError, PolicyProfile};

/// Tokens per KV block, as the engines announce it.
pub const BLOCK_TOKENS: u64 = 16;

/// The built-in profile. Class order fixes the class ids: 0 interactive, 1 batch.
/// Interactive is the protected class: batch must wait first (lower busy lines), and
/// interactive keeps the larger DRR share while both wait.
pub const PROFILE_TOML: &str = r#"
default_class = "interactive"

[[classes]]
name = "interactive"
slo_ms = 5000
quantum = 512
prefill_busy_threshold_frac = 2.0
decode_busy_threshold_frac = 0.9
request_queue_limit_per_worker = 64

[[classes]]
name = "batch"
slo_ms = 30000
quantum = 128
prefill_busy_threshold_frac = 1.0
decode_busy_threshold_frac = 0.8
"#;

pub fn profile() -> Result<PolicyProfile, PolicyError> {
    PolicyProfile::from_toml_str(PROFILE_TOML)
}

/// The built-in profile for a run whose clock goes `speedup` times faster than the
/// engines' modelled time (the HTTP demo's engines divide every duration by it): each
/// class's SLO is divided too, so queueing and shedding happen where they would unscaled.
pub fn profile_scaled(speedup: f64) -> Result<PolicyProfile, PolicyError> {
    let mut file: PolicyFile =
        toml::from_str(PROFILE_TOML).map_err(|e| PolicyError::Parse(e.to_string()))?;
    let speedup = if speedup.is_finite() && speedup >= 1.0 {
        speedup
    } else {
        1.0
    };
    for class in &mut file.classes {
        class.slo_ms = ((class.slo_ms as f64 / speedup).round() as u64).max(1);
    }
    PolicyProfile::from_file(file)
}

/// Shared system prompts: their lengths in blocks (32-128 blocks, 512-2048 tokens).
const PREFIX_BLOCKS: [u64; 4] = [32, 64, 96, 128];
const INTERACTIVE_SHARE: f64 = 0.3;
/// Requests per second one worker sustains in this engine model, a rough upper estimate:
/// decode KV is the bottleneck (~1 600 blocks under the class lines, ~110 unique blocks and
/// ~5.4 s of decode per request). Runs measure about 2-2.5.
const RATE_PER_WORKER: f64 = 2.75;

/// One synthetic request, before the router sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Simulated arrival, in microseconds since the start.
    pub arrival_us: u64,
    /// Class name as a client would send it in `x-policy-class`.
    pub class: &'static str,
    /// Which shared system prompt the prompt starts with.
    pub prefix: usize,
    /// Its length in tokens.
    pub prefix_tokens: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// The prompt as token ids (the offline demo's engines run them): [`prompt_key`]s.
    pub tokens: Vec<u32>,
    /// Chained hashes of the prompt's full blocks, as the engines and the router hash them.
    pub block_hashes: Vec<u64>,
    /// Decode blocks beyond the prompt's full blocks: its partial last block plus output.
    pub output_blocks: u64,
}

/// Generates `n` requests for a fleet of `workers` workers, deterministically from `seed`.
pub fn generate(n: u32, workers: u32, seed: u64) -> Vec<Spec> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let capacity = RATE_PER_WORKER * f64::from(workers.max(1));
    let mut t_us = 0.0_f64;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        // Warm-up (first 20 %) at 60 % of capacity, overload (next 60 %) at 300 %,
        // cool-down (last 20 %) at 40 %.
        let phase = f64::from(i) / f64::from(n.max(1));
        let rate = capacity
            * if phase < 0.2 {
                0.6
            } else if phase < 0.8 {
                3.0
            } else {
                0.4
            };
        let u: f64 = rng.random::<f64>();
        // Exponential gap; 1 - u lies in (0, 1], so ln is finite.
        t_us += -(1.0 - u).ln() / rate * 1e6;
        let class = if rng.random::<f64>() < INTERACTIVE_SHARE {
            "interactive"
        } else {
            "batch"
        };
        let prompt_tokens = rng.random_range(256..=4096_u64);
        let output_tokens = rng.random_range(32..=512_u64);
        let prefix = rng.random_range(0..PREFIX_BLOCKS.len());
        let prefix_tokens = PREFIX_BLOCKS[prefix] * BLOCK_TOKENS;
        let tokens: Vec<u32> = (0..prompt_tokens)
            .map(|j| prompt_key(prefix, prefix_tokens, i as usize, j) as u32)
            .collect();
        let locals = local_block_hashes(&tokens, BLOCK_TOKENS as usize, None);
        let block_hashes = sequence_hashes(&locals).into_iter().map(|h| h.0).collect();
        let tail = prompt_tokens % BLOCK_TOKENS + output_tokens;
        out.push(Spec {
            arrival_us: t_us as u64,
            class,
            prefix,
            prefix_tokens,
            prompt_tokens,
            output_tokens,
            tokens,
            block_hashes,
            output_blocks: tail.div_ceil(BLOCK_TOKENS),
        });
    }
    out
}

/// The key of token `j` of request `index`: the first `prefix_tokens` are the shared system
/// prompt `prefix` (the same keys for every request on it), the rest are private to the
/// request. The offline demo sends keys as token ids, the HTTP demo as words.
pub fn prompt_key(prefix: usize, prefix_tokens: u64, index: usize, j: u64) -> u64 {
    if j < prefix_tokens {
        mix(((prefix as u64) << 32) | j)
    } else {
        mix((1 << 63) | ((index as u64) << 32) | j)
    }
}

/// splitmix64's finaliser: a fast, well-spread 64-bit mix.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_profile_parses_with_interactive_as_default() {
        let profile = profile().expect("builtin profile");
        assert_eq!(profile.classes().len(), 2);
        assert_eq!(profile.class(profile.default_class()).name, "interactive");
        assert!(profile.resolve(Some("batch")).is_ok());
    }

    #[test]
    fn the_workload_is_deterministic_and_shares_prefixes() {
        let a = generate(200, 4, 7);
        assert_eq!(a, generate(200, 4, 7));
        assert_ne!(a, generate(200, 4, 8));
        assert!(a.windows(2).all(|w| w[0].arrival_us <= w[1].arrival_us));
        for s in &a {
            assert!((256..=4096).contains(&s.prompt_tokens));
            assert!((32..=512).contains(&s.output_tokens));
            assert_eq!(s.block_hashes.len() as u64, s.prompt_tokens / BLOCK_TOKENS);
        }
        // Two requests on the same system prompt share its leading block hashes.
        let firsts: std::collections::BTreeSet<u64> = a.iter().map(|s| s.block_hashes[0]).collect();
        assert!(firsts.len() <= PREFIX_BLOCKS.len());
        let interactive = a.iter().filter(|s| s.class == "interactive").count();
        assert!((30..=100).contains(&interactive), "{interactive}");
    }
}
