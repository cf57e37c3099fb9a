//! `[[engines]]`: real engines (vLLM, SGLang) this node links itself, in-process. Each one
//! becomes an engine link under the node's supervisor, announcing the engine on the node's
//! bus (NATS or in-process) exactly as a `router-node link` sidecar would.
//!
//! ```toml
//! [[engines]]
//! kind = "vllm"                      # or "sglang"
//! url = "http://127.0.0.1:8000"      # the engine's OpenAI base URL
//! model_dir = "/models/my-model"     # optional: the model it serves, a pool of its own
//! model = "my-model"                 # optional: its [[models]] entry's name
//! kv_events = "tcp://127.0.0.1:5557" # its ZMQ KV event publisher (absent: no events)
//! kv_events_bind = false             # true: bind kv_events, the engine connects to it
//! silent_after_ms = 30000            # prefilling without a KV event this long: reported
//! replay = "tcp://127.0.0.1:5558"    # optional: its replay service, to fill lost batches
//! role = "agg"                       # agg | prefill | decode (default: agg)
//! ```

use super::TopologyKind;
use super::load::ConfigError;
use router_core::{PoolRole, WorkerId};
use router_engine::{EngineKind, EngineLinkConfig};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The part an engine plays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineRole {
    #[default]
    Agg,
    Prefill,
    Decode,
}

impl EngineRole {
    pub fn pool(self) -> PoolRole {
        match self {
            Self::Agg => PoolRole::Aggregated,
            Self::Prefill => PoolRole::Prefill,
            Self::Decode => PoolRole::Decode,
        }
    }
}

/// One `[[engines]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    pub kind: EngineKind,
    /// The engine's OpenAI base URL (`http://host:port`).
    pub url: String,
    /// The model it serves: a `[[models]]` name (a name no entry has makes a pool of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The directory of the model it serves (relative to the config file's directory): its
    /// tokenizer and chat template. Engines serving one directory share a pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<std::path::PathBuf>,
    /// Its ZMQ KV event publisher (`tcp://host:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events: Option<String>,
    /// Bind `kv_events` and let the engine's publisher connect (vLLM given a concrete
    /// `tcp://IP:PORT` connects; given `tcp://*:PORT` it binds, and the link connects).
    #[serde(default)]
    pub kv_events_bind: bool,
    /// An engine that prefills a few blocks' worth with no KV event batch for this long is
    /// reported (a warning, `/debug/state`, `switchyard_engine_kv_events_silent`).
    #[serde(default = "default_silent_after_ms")]
    pub silent_after_ms: u64,
    /// Its ZMQ replay service (`tcp://host:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
    /// The publisher's topic.
    #[serde(default = "default_topic")]
    pub topic: String,
    #[serde(default)]
    pub role: EngineRole,
    /// The worker id (default: derived from `url`, the same in every router and sidecar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The engine's `--max-num-batched-tokens` (engines do not report it): the prefill
    /// busy fraction's scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u64>,
    /// LoRA adapters it serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loras: Vec<String>,
    /// How often the engine is probed and announced.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// Routers drop the engine after this long without an announcement.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
}

fn default_topic() -> String {
    "kv-events".to_owned()
}

fn default_silent_after_ms() -> u64 {
    30_000
}

fn default_poll_ms() -> u64 {
    1_000
}

fn default_lease_ms() -> u64 {
    5_000
}

/// Checks one URL's scheme; `key` names it in the error.
fn check_scheme(key: &str, value: &str, schemes: &[&str]) -> Result<(), ConfigError> {
    if router_engine::has_scheme(value, schemes) {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            key,
            format!(
                "must be {}://HOST:PORT, got {value:?}",
                schemes.join(" or ")
            ),
        ))
    }
}

impl EngineSection {
    /// Validates entry `index` for a node of `topology`.
    pub fn validate(&self, index: usize, topology: TopologyKind) -> Result<(), ConfigError> {
        let key = |field: &str| format!("engines[{index}].{field}");
        check_scheme(&key("url"), &self.url, &["http", "https"])?;
        if let Some(events) = &self.kv_events {
            check_scheme(&key("kv_events"), events, &["tcp"])?;
        }
        if let Some(replay) = &self.replay {
            check_scheme(&key("replay"), replay, &["tcp"])?;
        }
        if self.kv_events_bind && self.kv_events.is_none() {
            return Err(ConfigError::invalid(
                &key("kv_events_bind"),
                "needs kv_events, the address to bind",
            ));
        }
        if self.silent_after_ms == 0 {
            return Err(ConfigError::invalid(
                &key("silent_after_ms"),
                "must be >= 1",
            ));
        }
        let served = match topology {
            TopologyKind::Aggregated => self.role == EngineRole::Agg,
            TopologyKind::Disaggregated => self.role != EngineRole::Agg,
        };
        if !served {
            let expected = match topology {
                TopologyKind::Aggregated => "\"agg\" (node.topology is \"aggregated\")",
                TopologyKind::Disaggregated => {
                    "\"prefill\" or \"decode\" (node.topology is \"disaggregated\")"
                }
            };
            return Err(ConfigError::invalid(
                &key("role"),
                format!("must be {expected}, got {:?}", self.role),
            ));
        }
        if self.poll_ms == 0 || self.lease_ms <= self.poll_ms {
            return Err(ConfigError::invalid(
                &key("lease_ms"),
                format!(
                    "must be above poll_ms (> 0), got lease_ms = {} and poll_ms = {}",
                    self.lease_ms, self.poll_ms
                ),
            ));
        }
        if self.max_num_batched_tokens == Some(0) {
            return Err(ConfigError::invalid(
                &key("max_num_batched_tokens"),
                "must be >= 1",
            ));
        }
        Ok(())
    }

    /// The link's configuration; the engine must match the routers' block size when it is
    /// known (inside a node; a `router-node link` sidecar does not know it).
    pub fn link_config(&self, router_block_size: Option<u32>) -> EngineLinkConfig {
        let mut link = EngineLinkConfig::new(self.kind, self.url.clone(), self.role.pool());
        if let Some(id) = self.id {
            link.worker = WorkerId(id);
        }
        link.kv_events = self.kv_events.clone();
        link.kv_events_side = if self.kv_events_bind {
            router_engine::zmq::SubscriberSide::Bind
        } else {
            router_engine::zmq::SubscriberSide::Connect
        };
        link.silent_after = Duration::from_millis(self.silent_after_ms);
        link.replay = self.replay.clone();
        link.topic = self.topic.clone();
        link.expected_block_size = router_block_size;
        link.max_num_batched_tokens = self.max_num_batched_tokens;
        link.loras = self.loras.clone();
        link.poll_every = Duration::from_millis(self.poll_ms);
        link.lease = Duration::from_millis(self.lease_ms);
        link
    }
}
