//! The policy profile as operators write it (TOML or YAML), before validation.
//!
//! Every struct denies unknown keys, so a typo is a startup error naming the key instead of
//! a silently ignored setting. Validation into the typed [`super::PolicyProfile`] lives in
//! `profile.rs`.

use super::classify_config::ClassifierConfig;
use serde::{Deserialize, Serialize};

/// Top level of a policy file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// Class used when a request names none. Required when `classes` is given.
    pub default_class: Option<String>,
    /// The policy classes. Empty or absent: one class that never queues.
    #[serde(default)]
    pub classes: Vec<ClassConfig>,
    /// Router-wide thresholds that mark a worker overloaded (all its ranks over).
    #[serde(default)]
    pub reject_thresholds: RejectThresholdsConfig,
    /// Request classifiers, tried in order; the first match decides the class or refuses.
    /// Absent: the `x-policy-class` header's class, else the default.
    #[serde(default)]
    pub classifiers: Vec<ClassifierConfig>,
}

/// One policy class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    /// Class id: `[A-Za-z0-9_.-]+`, unique, used in headers and metric labels.
    pub name: String,
    /// Queue-wait deadline in milliseconds: a request still queued at its deadline is
    /// rejected, never dispatched late.
    pub slo_ms: u64,
    /// Deficit-round-robin credit per round, in uncached prompt tokens.
    pub quantum: u64,
    /// A rank is prefill-busy for the class when booked prefill tokens exceed this.
    pub prefill_busy_threshold: Option<u64>,
    /// ... or exceed this multiple of the rank's `max_num_batched_tokens` (strictly above).
    pub prefill_busy_threshold_frac: Option<f64>,
    /// A decode rank has room for a request when booked + reserved decode blocks + the
    /// request's need are at most this fraction (0..=1) of the rank's `total_kv_blocks`.
    pub decode_busy_threshold_frac: Option<f64>,
    /// Gate closes when at least this share of eligible ranks is prefill-busy, instead of
    /// only when all are (0 < ratio <= 1).
    pub busy_worker_ratio: Option<f64>,
    /// Cap on queued requests of the class, times the number of known workers.
    pub request_queue_limit_per_worker: Option<u64>,
    /// Cap on queued prompt tokens of the class, times the number of known workers.
    pub token_queue_limit_per_worker: Option<u64>,
    /// Admit now or reject now: the class never waits in the queue.
    #[serde(default)]
    pub never_queue: bool,
    /// The `priority` the router sets on the class's requests to the engine (vLLM's and
    /// SGLang's own queue order); absent: the router sends none. Never the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_priority: Option<i64>,
}

/// Router-wide overload thresholds, each opt-in. A rank is over when any set threshold is
/// exceeded; a worker is overloaded only when all its ranks are over.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectThresholdsConfig {
    /// Booked decode blocks / total_kv_blocks strictly above this (0..=1).
    pub decode_blocks_frac: Option<f64>,
    /// Booked prefill tokens strictly above this.
    pub prefill_tokens: Option<u64>,
    /// Booked prefill tokens strictly above this multiple of max_num_batched_tokens.
    pub prefill_tokens_frac: Option<f64>,
}
