//! The node's one typed configuration: a TOML file, defaults for every key, and an
//! environment variable for every key.
//!
//! Precedence, lowest first: built-in defaults → the file → the environment. Unknown keys
//! are errors in every section (`deny_unknown_fields`): the TOML parser's message names the
//! key and its line, and the loader adds the file path. Values are then validated and a bad
//! one is reported by its dotted key (`selection.temperature must be >= 0, got -1`).
//!
//! Environment overrides, one rule for every key (`env.rs`): `SWITCHYARD_<SECTION>__<KEY>`,
//! e.g. `SWITCHYARD_HTTP__BODY_LIMIT_BYTES=8388608` sets `[http] body_limit_bytes` (an empty
//! value counts as unset; `http.models` takes comma-separated names; `[[engines]]` and
//! `[[models]]` are set in the file only). The file's path comes from `--config`, else `SWITCHYARD_CONFIG`. Older
//! aliases: `SWITCHYARD_CLUSTER`, `SWITCHYARD_HTTP_LISTEN`, `SWITCHYARD_NATS_URL`,
//! `SWITCHYARD_OTLP_ENDPOINT`.
//!
//! `router-node print-config [--config FILE]` prints the effective configuration as TOML
//! (a NATS URL's user info masked). `router-node/node.example.toml` lists every key with its
//! default and meaning; a test keeps it equal to the defaults.
//!
//! Files: `mod.rs` (the sections and their defaults), `load.rs` (file, validation,
//! conversion to the node's `NodeConfig`), `env.rs` (the environment layer), `http.rs`
//! (`[http]` and `[admin]`: the listeners, the input limits and timeouts, the admin token,
//! the frontend's `Limits`), `tokenizer.rs`
//! (`[tokenizer]`: its validation and the frontend's `Prompter`), `engines.rs` (`[[engines]]`),
//! `models.rs` (`[[models]]` and the pools a node runs),
//! `security.rs` (`[bus.auth]`, `[bus.tls]` and `[registry]`), `auth.rs` (`[auth]`: the API
//! keys file).

mod auth;
mod engines;
mod env;
mod http;
mod load;
mod models;
mod security;
mod tokenizer;

/// `[telemetry]`: its types live with the telemetry that reads them.
pub use crate::telemetry::{LogFormat, OtlpProtocol, TelemetrySection};
pub use auth::AuthSection;
pub use engines::{EngineRole, EngineSection};
pub use env::{
    ENV_ALIASES, ENV_CLUSTER, ENV_CONFIG, ENV_HTTP_LISTEN, ENV_NATS_URL, ENV_OTLP_ENDPOINT,
    ENV_PREFIX, ENV_SEPARATOR, env_var,
};
pub use http::{AdminSection, HttpSection};
pub use load::ConfigError;
pub use models::{ModelSection, PoolPlan};
pub use security::{BusAuthSection, BusTlsSection, RegistrySection};

use crate::frontend::DisaggConvention;
use router_tokenizer::TiktokenEncoding;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The whole configuration. Every section may be left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub node: NodeSection,
    pub http: HttpSection,
    pub admin: AdminSection,
    pub bus: BusSection,
    pub policy: PolicySection,
    pub selection: SelectionSection,
    pub peer_sync: PeerSyncSection,
    pub scheduler: SchedulerSection,
    pub telemetry: TelemetrySection,
    pub tokenizer: TokenizerSection,
    pub disagg: DisaggSection,
    pub registry: RegistrySection,
    /// `[auth]`: the API keys (`auth.rs`).
    pub auth: AuthSection,
    /// The models this node serves, a pool each (`[[models]]`, see `models.rs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelSection>,
    /// Real engines this node links itself (`[[engines]]`, see `engines.rs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<EngineSection>,
}

/// `[disagg]`: the disaggregated path (`node.topology = "disaggregated"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DisaggSection {
    /// How the prefill and decode legs meet: `"vllm"` (prefill first, its
    /// `kv_transfer_params` handed to the decode leg) or `"sglang"` (both legs at once with
    /// `bootstrap_host` / `bootstrap_port` / `bootstrap_room`).
    pub convention: DisaggConvention,
    /// Conditional disaggregation: a request whose prompt has fewer tokens than this not
    /// cached on the best decode worker goes straight to a decode worker, which prefills it
    /// (through the decode pool's class gate); 0: off.
    pub local_prefill_below_tokens: u64,
    /// A request the prefill gate would make wait goes to the decode pool's gate instead,
    /// prefilled by its decode worker.
    pub local_prefill_when_prefill_waits: bool,
}

impl DisaggSection {
    /// The conditional-disaggregation rule of every disaggregated pool.
    pub fn local_prefill(&self) -> router_core::LocalPrefillRule {
        router_core::LocalPrefillRule {
            below_uncached_tokens: self.local_prefill_below_tokens,
            when_prefill_waits: self.local_prefill_when_prefill_waits,
        }
    }
}

/// Aggregated workers (one pool), or a prefill pool and a decode pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopologyKind {
    #[default]
    Aggregated,
    Disaggregated,
}

/// `[node]`: who this router is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// Cluster name: the prefix of every bus subject. Routers and workers of one fleet
    /// share it.
    pub cluster: String,
    /// This router's id among its peers; absent: a random UUID v4 at every start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_id: Option<uuid::Uuid>,
    pub topology: TopologyKind,
    /// Tokens per KV block of every worker.
    pub block_size: u32,
    /// Threads that run the node's async work (sockets, actors, the request path; long
    /// prompts are tokenized on threads of their own). Absent: one per core the process may
    /// use. On a machine whose cores the router shares with engines, fewer threads spend
    /// less CPU per request waking each other.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<usize>,
}

impl Default for NodeSection {
    fn default() -> Self {
        Self {
            cluster: "switchyard".to_owned(),
            router_id: None,
            topology: TopologyKind::Aggregated,
            block_size: 16,
            worker_threads: None,
        }
    }
}

/// Which bus the node talks on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BusKind {
    /// NATS at `bus.nats_url`: several routers and out-of-process workers.
    #[default]
    Nats,
    /// A bus inside this process: one router, workers in the same process (tests, demos).
    InProcess,
}

/// `[bus]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusSection {
    pub kind: BusKind,
    /// Used when `kind = "nats"`. May carry credentials: prefer `SWITCHYARD_NATS_URL`, or
    /// the files of `[bus.auth]`.
    pub nats_url: String,
    /// `[bus.auth]`: credentials read from files (`security.rs`).
    pub auth: BusAuthSection,
    /// `[bus.tls]`: TLS of the NATS connection (`security.rs`).
    pub tls: BusTlsSection,
}

impl Default for BusSection {
    fn default() -> Self {
        Self {
            kind: BusKind::Nats,
            nats_url: "nats://127.0.0.1:4222".to_owned(),
            auth: BusAuthSection::default(),
            tls: BusTlsSection::default(),
        }
    }
}

/// `[policy]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySection {
    /// A policy profile (`.toml`, `.yaml` or `.yml`); a relative path is relative to the
    /// config file's directory. Absent: the fallback profile (one class, never queues).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

/// Which tokenizer counts and hashes prompts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// An encoding built into tiktoken-rs (`tokenizer.encoding`).
    #[default]
    Tiktoken,
    /// A HuggingFace `tokenizer.json` (`tokenizer.path`).
    HuggingFace,
}

/// `[tokenizer]`: how the router turns a prompt into the tokens it hashes and counts. The
/// workers must tokenize the same way for the KV events to match. Token ids given in a
/// request body are always used as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokenizerSection {
    /// The model directory the engines serve (relative to the config file's directory):
    /// its `tokenizer.json`, and the chat template and special tokens of its
    /// `tokenizer_config.json`, used as vLLM uses them (a completion's prompt gets the
    /// tokenizer's special tokens, a rendered chat prompt none). Set, it decides the
    /// tokenizer (`kind` and `encoding` are not read) and excludes `path`,
    /// `chat_template`, `bos_token` and `eos_token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<PathBuf>,
    pub kind: TokenizerKind,
    /// With `kind = "tiktoken"`: `o200k_base`, `cl100k_base`, `r50k_base` or `p50k_base`.
    pub encoding: TiktokenEncoding,
    /// With `kind = "huggingface"` (required then): a `tokenizer.json`; a relative path is
    /// relative to the config file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// A Jinja chat template rendering chat `messages` (relative to the config file's
    /// directory). Absent: the plain rendering, `"<role>: <content>\n"` per message, then
    /// `"assistant:"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<PathBuf>,
    /// `bos_token` in the chat template (undefined when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bos_token: Option<String>,
    /// `eos_token` in the chat template (undefined when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eos_token: Option<String>,
    /// Send a `/v1/completions` text prompt to the worker as the router's token ids
    /// (`"prompt": [ids]`, a batch as one list per part), so the engine does not tokenize it
    /// again. Only when the engines tokenize exactly as configured here (`model_dir`).
    pub forward_token_ids: bool,
    /// MiB of token ids of text already seen, reused for prompts that repeat it (shared
    /// system prompts, a conversation's earlier turns); 0 turns the cache off.
    pub cache_mb: u64,
}

impl Default for TokenizerSection {
    fn default() -> Self {
        Self {
            model_dir: None,
            kind: TokenizerKind::default(),
            encoding: TiktokenEncoding::default(),
            path: None,
            chat_template: None,
            bos_token: None,
            eos_token: None,
            forward_token_ids: false,
            cache_mb: 256,
        }
    }
}

/// `[selection]`: router-core's `SelectionConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelectionSection {
    pub prefill_load_scale: f64,
    pub overlap_credit: f64,
    pub temperature: f64,
    pub count_booked_prefix: bool,
}

impl Default for SelectionSection {
    fn default() -> Self {
        let d = router_core::SelectionConfig::default();
        Self {
            prefill_load_scale: d.prefill_load_scale,
            overlap_credit: d.overlap_credit,
            temperature: d.temperature,
            count_booked_prefix: d.count_booked_prefix,
        }
    }
}

/// `[peer_sync]`: how router replicas keep their ledgers in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeerSyncSection {
    /// Heartbeat (with digest) period.
    pub heartbeat_ms: u64,
    /// A peer silent this long is expired; must exceed `heartbeat_ms`.
    pub lease_ms: u64,
    /// How long a starting router waits for peers' snapshots before it is ready.
    pub snapshot_window_ms: u64,
}

impl Default for PeerSyncSection {
    fn default() -> Self {
        let d = router_actors::PeerSyncConfig::default();
        Self {
            heartbeat_ms: millis(d.heartbeat_every),
            lease_ms: millis(d.lease),
            snapshot_window_ms: millis(d.snapshot_window),
        }
    }
}

/// `[scheduler]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSection {
    /// A decode reservation not confirmed within this long is dropped.
    pub reservation_lease_ms: u64,
    /// How often queued requests are re-checked against the gate.
    pub recheck_ms: u64,
    /// Replicas share the decode room and the prefill line of every pool through room credits,
    /// so together they never commit past a class's decode fraction or pass its prefill line
    /// by more than one prompt. Off: each replica admits against its own view of the others'
    /// bookings (a burst over several replicas can overshoot).
    pub room_credits: bool,
    /// Disaggregated: hold the decode room a request will need at its prefill admission.
    /// Off only to measure what reservations buy (a burst then overshoots the decode fraction
    /// even with one replica); room credits need it on.
    pub decode_reservations: bool,
}

impl Default for SchedulerSection {
    fn default() -> Self {
        Self {
            reservation_lease_ms: 30_000,
            recheck_ms: 1_000,
            room_credits: true,
            decode_reservations: true,
        }
    }
}

/// A list of names, or one string of comma-separated names (how an environment variable
/// gives a list); blanks around a name are dropped.
pub(super) fn names<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<String>, D::Error> {
    struct Names;
    impl<'de> serde::de::Visitor<'de> for Names {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of names or comma-separated names")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(text
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect())
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut names = Vec::new();
            while let Some(name) = seq.next_element::<String>()? {
                names.push(name);
            }
            Ok(names)
        }
    }
    deserializer.deserialize_any(Names)
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
