//! Loading: defaults → file → environment (`env.rs`), then validation; and conversion to what the
//! node and the frontend take.

use super::env::Overrides;
use super::{Config, TopologyKind};
use crate::frontend::Limits;
use router_actors::{NodeConfig, Topology};
use router_core::{PolicyError, PolicyFormat, PolicyProfile, RouterId, SelectionConfig};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long past the request deadline (`http.request_timeout_ms`) a booking may still be held
/// before the router releases it as leaked (`NodeConfig::booking_lease`): the deadline ends
/// every request, and its release reaches the router well within this.
const BOOKING_LEASE_GRACE: Duration = Duration::from_secs(60);

/// What can be wrong with a configuration. Every variant names the file or the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Syntax, a wrong type or an unknown key: the parser's message names the key and line.
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A value out of range; `key` is dotted (`selection.temperature`).
    #[error("{key} {reason}")]
    Invalid { key: String, reason: String },
    #[error("policy.path {path}: {source}")]
    Policy { path: PathBuf, source: PolicyError },
    #[error("policy.path {path}: {source}")]
    PolicyRead {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A tokenizer or chat template file that cannot be used; `key` is
    /// `tokenizer.path`, `tokenizer.chat_template` or `tokenizer.model_dir` (then `path` is
    /// the file in the directory).
    #[error("{key} {path}: {message}")]
    Tokenizer {
        key: &'static str,
        path: PathBuf,
        message: String,
    },
    /// The API keys file cannot be read or is invalid (the message names the entry and key).
    #[error("auth.keys_file {path}: {message}")]
    AuthKeys { path: PathBuf, message: String },
    #[error("cannot print the configuration: {0}")]
    Print(String),
    /// An environment variable that does not parse as its key's type, or names no key.
    #[error("environment variable {var} ({key}): {message}")]
    Env {
        var: String,
        key: String,
        message: String,
    },
    /// A bad value (`source`) that an environment variable set.
    #[error("{source} (set by environment variable {var})")]
    FromEnv {
        var: String,
        source: Box<ConfigError>,
    },
}

impl ConfigError {
    pub(super) fn invalid(key: &str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.to_owned(),
            reason: reason.into(),
        }
    }

    /// The dotted key of an invalid value.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Invalid { key, .. } => Some(key),
            Self::Policy { .. } | Self::PolicyRead { .. } => Some("policy.path"),
            Self::Tokenizer { key, .. } => Some(key),
            Self::AuthKeys { .. } => Some("auth.keys_file"),
            Self::Env { key, .. } => Some(key),
            Self::FromEnv { source, .. } => source.key(),
            _ => None,
        }
    }
}

impl Config {
    /// Parses a TOML document (no environment, no validation). `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let message = e.to_string().trim_end().to_owned();
            // The parser shows the line; name the table it is in as well.
            let message = match e.span().and_then(|span| section_at(text, span.start)) {
                Some(section) => format!("in {section}: {message}"),
                None => message,
            };
            ConfigError::Parse {
                path: origin.to_owned(),
                message,
            }
        })
    }

    /// The effective configuration: defaults, then `path` if given, then the process
    /// environment (`SWITCHYARD_<SECTION>__<KEY>`, see `env.rs`); validated.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with_env(
            path,
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// [`Config::load`] with the environment given as its variables (tests pass a few).
    pub fn load_with_env<K, V>(
        path: Option<&Path>,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Config, ConfigError>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let overrides = Overrides::collect(vars)?;
        let config = match path {
            None => Config::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let mut config = Self::from_toml_str(&text, path)?;
                config.resolve_relative_paths(path);
                config
            }
        };
        let config = overrides.apply(&config)?;
        config.validate().map_err(|e| overrides.attribute(e))?;
        Ok(config)
    }

    /// A relative `policy.path`, `tokenizer.path`, `tokenizer.chat_template`,
    /// `tokenizer.model_dir`, `auth.keys_file`, `admin.token_file` or `[bus.auth]` /
    /// `[bus.tls]` file is relative to the directory of the config file.
    fn resolve_relative_paths(&mut self, config_file: &Path) {
        let Some(dir) = config_file.parent() else {
            return;
        };
        self.bus.resolve_relative_paths(dir);
        self.auth.resolve_relative_paths(dir);
        self.admin.resolve_relative_paths(dir);
        let models = self.models.iter_mut().map(|m| &mut m.model_dir);
        let engines = self.engines.iter_mut().map(|e| &mut e.model_dir);
        for path in [
            &mut self.policy.path,
            &mut self.tokenizer.path,
            &mut self.tokenizer.chat_template,
            &mut self.tokenizer.model_dir,
        ]
        .into_iter()
        .chain(models)
        .chain(engines)
        .flatten()
        {
            if path.is_relative() {
                *path = dir.join(&*path);
            }
        }
    }

    /// Checks every value; the first bad one is reported by its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let n = &self.node;
        if n.cluster.is_empty()
            || !n
                .cluster
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ConfigError::invalid(
                "node.cluster",
                format!(
                    "must be non-empty ASCII letters, digits, `-` or `_` (a bus subject token), got {:?}",
                    n.cluster
                ),
            ));
        }
        if n.block_size == 0 {
            return Err(ConfigError::invalid("node.block_size", "must be >= 1"));
        }
        if n.worker_threads == Some(0) {
            return Err(ConfigError::invalid("node.worker_threads", "must be >= 1"));
        }
        if self.node.worker_threads == Some(0) {
            return Err(ConfigError::invalid("node.worker_threads", "must be >= 1"));
        }
        // Each engine against its pool's topology.
        self.validate_models()?;
        self.http.validate()?;
        self.admin.validate(&self.http)?;
        for (key, value) in [
            ("peer_sync.heartbeat_ms", self.peer_sync.heartbeat_ms),
            ("peer_sync.lease_ms", self.peer_sync.lease_ms),
            (
                "scheduler.reservation_lease_ms",
                self.scheduler.reservation_lease_ms,
            ),
            ("scheduler.recheck_ms", self.scheduler.recheck_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::invalid(key, "must be >= 1"));
            }
        }
        if self.scheduler.room_credits && !self.scheduler.decode_reservations {
            return Err(ConfigError::invalid(
                "scheduler.room_credits",
                "needs scheduler.decode_reservations = true (credits are spent by reservations); \
                 set both to false to measure without reservations",
            ));
        }
        if self.peer_sync.lease_ms <= self.peer_sync.heartbeat_ms {
            return Err(ConfigError::invalid(
                "peer_sync.lease_ms",
                format!(
                    "must be greater than peer_sync.heartbeat_ms ({}), got {}",
                    self.peer_sync.heartbeat_ms, self.peer_sync.lease_ms
                ),
            ));
        }
        if self.disagg.convention != crate::frontend::DisaggConvention::Vllm
            && n.topology != super::TopologyKind::Disaggregated
        {
            return Err(ConfigError::invalid(
                "disagg.convention",
                "\"sglang\" needs node.topology = \"disaggregated\"",
            ));
        }
        if !self.bus.nats_url.contains("://") && self.bus.kind == super::BusKind::Nats {
            return Err(ConfigError::invalid(
                "bus.nats_url",
                format!(
                    "must be a URL (nats://host:port), got {:?}",
                    self.bus.nats_url
                ),
            ));
        }
        self.bus.validate_security()?;
        self.auth.validate()?;
        self.registry.allow_list()?;
        self.selection_config().validate().map_err(|e| {
            // router-core's message already starts with `selection.<field>`.
            let text = e.to_string();
            match text.split_once(' ') {
                Some((key, reason)) => ConfigError::invalid(key, reason),
                None => ConfigError::invalid("selection", text),
            }
        })?;
        let t = &self.telemetry;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&t.log_filter) {
            return Err(ConfigError::invalid(
                "telemetry.log_filter",
                format!("is not a valid filter ({e}): {:?}", t.log_filter),
            ));
        }
        if let Some(endpoint) = &t.otlp_endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(ConfigError::invalid(
                "telemetry.otlp_endpoint",
                format!("must be an http:// or https:// URL, got {endpoint:?}"),
            ));
        }
        if t.service_name.is_empty() {
            return Err(ConfigError::invalid(
                "telemetry.service_name",
                "must not be empty",
            ));
        }
        self.tokenizer.validate()
    }

    /// The effective configuration as TOML (what `print-config` prints).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string_pretty(self).map_err(|e| ConfigError::Print(e.to_string()))
    }

    pub fn selection_config(&self) -> SelectionConfig {
        SelectionConfig {
            prefill_load_scale: self.selection.prefill_load_scale,
            overlap_credit: self.selection.overlap_credit,
            temperature: self.selection.temperature,
            count_booked_prefix: self.selection.count_booked_prefix,
        }
    }

    /// The configured policy profile, or the fallback profile when `policy.path` is absent.
    /// The file is read here and its text handed to router-core, which does no I/O.
    pub fn policy_profile(&self) -> Result<PolicyProfile, ConfigError> {
        match &self.policy.path {
            None => Ok(PolicyProfile::fallback()),
            Some(path) => read_policy(path),
        }
    }

    /// The node's actor-tree configuration. The router id is `node.router_id`, or a fresh
    /// random one.
    pub fn node_config(&self, profile: PolicyProfile) -> NodeConfig {
        let router_id = RouterId(self.node.router_id.unwrap_or_else(uuid::Uuid::new_v4));
        let topology = match self.node.topology {
            TopologyKind::Aggregated => Topology::Aggregated,
            TopologyKind::Disaggregated => Topology::Disaggregated,
        };
        let mut node = NodeConfig::new(self.node.cluster.clone(), router_id, topology, profile);
        node.block_size = self.node.block_size;
        node.selection = self.selection_config();
        node.reservation_lease = Duration::from_millis(self.scheduler.reservation_lease_ms);
        // Every booking is released by the request deadline: one still held well past it
        // is a leak, which its lease ends.
        node.booking_lease = Some(
            Duration::from_millis(self.http.request_timeout_ms).saturating_add(BOOKING_LEASE_GRACE),
        );
        node.recheck_every = Duration::from_millis(self.scheduler.recheck_ms);
        node.room_credits = self.scheduler.room_credits;
        node.decode_reservations = self.scheduler.decode_reservations;
        node.peer_sync.heartbeat_every = Duration::from_millis(self.peer_sync.heartbeat_ms);
        node.peer_sync.lease = Duration::from_millis(self.peer_sync.lease_ms);
        node.peer_sync.snapshot_window = Duration::from_millis(self.peer_sync.snapshot_window_ms);
        // Selection sampling (temperature > 0) differs between routers, as their ids do.
        node.seed = router_id.0.as_u64_pair().0;
        node
    }

    /// The frontend's limits.
    pub fn limits(&self) -> Limits {
        self.http.limits()
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.http.drain_timeout_ms)
    }

    pub fn shutdown_delay(&self) -> Duration {
        Duration::from_millis(self.http.shutdown_delay_ms)
    }
}

/// The table in force at byte `offset` of `text`: `[admin]` under an `[admin]` header,
/// `engines[1]` inside the second `[[engines]]` entry (as validation names its keys).
fn section_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let header = |line: &str| -> Option<(bool, String)> {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("[[") {
            let name = rest.split("]]").next()?.trim();
            (!name.is_empty()).then(|| (true, name.to_owned()))
        } else {
            let name = line.strip_prefix('[')?.split(']').next()?.trim();
            (!name.is_empty()).then(|| (false, name.to_owned()))
        }
    };
    let (array, name) = before.lines().rev().find_map(header)?;
    if !array {
        return Some(format!("[{name}]"));
    }
    let entries = before
        .lines()
        .filter_map(header)
        .filter(|(is_array, n)| *is_array && *n == name)
        .count();
    Some(format!("{name}[{}]", entries.saturating_sub(1)))
}

/// Reads a policy profile (`.toml`, `.yaml` or `.yml`); every error names `policy.path` and
/// the file.
fn read_policy(path: &Path) -> Result<PolicyProfile, ConfigError> {
    let format = path
        .extension()
        .and_then(|e| e.to_str())
        .and_then(PolicyFormat::from_extension)
        .ok_or_else(|| {
            ConfigError::invalid(
                "policy.path",
                format!(
                    "{}: unsupported extension (use .toml, .yaml or .yml)",
                    path.display()
                ),
            )
        })?;
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::PolicyRead {
        path: path.to_owned(),
        source,
    })?;
    PolicyProfile::parse(&text, format).map_err(|source| ConfigError::Policy {
        path: path.to_owned(),
        source,
    })
}
