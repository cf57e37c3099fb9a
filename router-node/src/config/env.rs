//! The environment layer of the node config: one rule for every key,
//! `SWITCHYARD_<SECTION>__<KEY>` (the section and the key in upper case, two underscores
//! between them: `SWITCHYARD_HTTP__BODY_LIMIT_BYTES` sets `[http] body_limit_bytes`), laid over
//! the file by the `config` crate's `Environment` source.
//!
//! - Every variable of that shape is read; one naming no key is an error naming it (a typo is
//!   never ignored). Other `SWITCHYARD_*` variables (`SWITCHYARD_CONFIG`, the tests' own) are
//!   not config keys and are left alone.
//! - An empty value counts as unset.
//! - Values are text, read as the key's type: `8192`, `true`, `0.5`, `disaggregated`. The
//!   lists, `http.models` and `registry.allowed_endpoints`, take comma-separated names.
//!   `[[engines]]` (a list of tables) is set in the file only.
//! - The tables inside a section, `[bus.auth]` and `[bus.tls]`, add one more level:
//!   `SWITCHYARD_BUS__TLS__CA_FILE` sets `[bus.tls] ca_file`.
//! - A relative path from the environment (`SWITCHYARD_POLICY__PATH`) is relative to the
//!   working directory, not to the config file.
//! - Four older names stay as aliases ([`ENV_ALIASES`]); the rule's name wins when both are set.
//!
//! A value that does not parse is a [`ConfigError::Env`] naming the variable and the key; a
//! value that parses but is out of range gets the usual validation message with the variable
//! appended ([`ConfigError::FromEnv`]).

use super::Config;
use super::load::ConfigError;
use std::collections::BTreeMap;

/// The prefix of every override.
pub const ENV_PREFIX: &str = "SWITCHYARD_";
/// Between the section and the key.
pub const ENV_SEPARATOR: &str = "__";
/// The config file's path (`--config` wins over it).
pub const ENV_CONFIG: &str = "SWITCHYARD_CONFIG";

/// Overrides `node.cluster` (alias of `SWITCHYARD_NODE__CLUSTER`).
pub const ENV_CLUSTER: &str = "SWITCHYARD_CLUSTER";
/// Overrides `http.listen` (alias of `SWITCHYARD_HTTP__LISTEN`).
pub const ENV_HTTP_LISTEN: &str = "SWITCHYARD_HTTP_LISTEN";
/// Overrides `bus.nats_url` (alias of `SWITCHYARD_BUS__NATS_URL`).
pub const ENV_NATS_URL: &str = "SWITCHYARD_NATS_URL";
/// Overrides `telemetry.otlp_endpoint` (alias of `SWITCHYARD_TELEMETRY__OTLP_ENDPOINT`).
pub const ENV_OTLP_ENDPOINT: &str = "SWITCHYARD_OTLP_ENDPOINT";

/// The older variables and the key each one sets.
pub const ENV_ALIASES: [(&str, &str); 4] = [
    (ENV_CLUSTER, "node.cluster"),
    (ENV_HTTP_LISTEN, "http.listen"),
    (ENV_NATS_URL, "bus.nats_url"),
    (ENV_OTLP_ENDPOINT, "telemetry.otlp_endpoint"),
];

/// The variable of the rule that sets a dotted key: `http.body_limit_bytes` →
/// `SWITCHYARD_HTTP__BODY_LIMIT_BYTES`.
/// Tables inside a section: their keys have three parts.
const NESTED: [&str; 2] = ["bus.auth", "bus.tls"];

pub fn env_var(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        key.to_ascii_uppercase().replace('.', ENV_SEPARATOR)
    )
}

/// The overriding variables found in one environment, by the dotted key each sets.
#[derive(Debug, Default)]
pub(super) struct Overrides {
    /// key → (variable as the operator wrote it, value).
    by_key: BTreeMap<String, (String, String)>,
}

impl Overrides {
    /// Picks the config variables out of `vars` (a whole environment). A variable of the
    /// rule's shape whose key is not `section.key`, or is in `[[engines]]`, is an error.
    pub(super) fn collect<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Result<Self, ConfigError>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let mut by_key = BTreeMap::new();
        let mut aliased = BTreeMap::new();
        for (var, value) in vars {
            let (var, value) = (var.into(), value.into());
            if value.trim().is_empty() {
                continue;
            }
            if let Some((_, key)) = ENV_ALIASES.iter().find(|(alias, _)| *alias == var) {
                aliased.insert((*key).to_owned(), (var, value));
                continue;
            }
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            if !rest.contains(ENV_SEPARATOR) {
                continue;
            }
            let key = rest.to_ascii_lowercase().replace(ENV_SEPARATOR, ".");
            let segments: Vec<&str> = key.split('.').collect();
            let depth = if NESTED.iter().any(|n| key.starts_with(&format!("{n}."))) {
                3
            } else {
                2
            };
            if segments.len() != depth || segments.iter().any(|s| s.is_empty()) {
                return Err(ConfigError::Env {
                    var,
                    key,
                    message: format!(
                        "is not a config key: the rule is {ENV_PREFIX}<SECTION>{ENV_SEPARATOR}<KEY>"
                    ),
                });
            }
            if segments[0] == "engines" || segments[0] == "models" {
                let message = format!(
                    "[[{}]] is a list of tables: set it in the config file",
                    segments[0]
                );
                return Err(ConfigError::Env { var, key, message });
            }
            by_key.insert(key, (var, value));
        }
        for (key, entry) in aliased {
            by_key.entry(key).or_insert(entry);
        }
        Ok(Self { by_key })
    }

    /// No variable sets a key.
    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// `base` (defaults and the file) with the variables laid over it.
    pub(super) fn apply(&self, base: &Config) -> Result<Config, ConfigError> {
        if self.is_empty() {
            return Ok(base.clone());
        }
        // The variables under the rule's names: an alias counts as its key's variable.
        let source: ::config::Map<String, String> = self
            .by_key
            .iter()
            .map(|(key, (_, value))| (env_var(key), value.clone()))
            .collect();
        let environment = ::config::Environment::with_prefix(ENV_PREFIX.trim_end_matches('_'))
            .prefix_separator("_")
            .separator(ENV_SEPARATOR)
            .source(Some(source));
        let base =
            ::config::Config::try_from(base).map_err(|e| ConfigError::Print(e.to_string()))?;
        ::config::Config::builder()
            .add_source(base)
            .add_source(environment)
            .build()
            .and_then(|layered| layered.try_deserialize::<Config>())
            .map_err(|e| self.explain(e))
    }

    /// A validation error about a key some variable set names that variable too.
    pub(super) fn attribute(&self, error: ConfigError) -> ConfigError {
        let var = error
            .key()
            .and_then(|key| self.by_key.get(key))
            .map(|(var, _)| var.clone());
        match var {
            Some(var) => ConfigError::FromEnv {
                var,
                source: Box::new(error),
            },
            None => error,
        }
    }

    /// The `config` crate's error as one naming the variable and the key.
    fn explain(&self, error: ::config::ConfigError) -> ConfigError {
        let (at, message) = split_key(&error);
        // serde names an unknown key by its field alone, at its section (an unknown section:
        // at the top).
        let blamed = match (unknown_field(&message), at) {
            (Some(field), Some(section)) => self.entry(|key| key == format!("{section}.{field}")),
            (Some(section), None) => self.entry(|key| key.split('.').next() == Some(section)),
            (None, Some(key)) => self.entry(|k| k == key),
            (None, None) => None,
        }
        .or_else(|| {
            // Nothing to go by: with one variable set, it is that one.
            let mut all = self.by_key.iter();
            match (all.next(), all.next()) {
                (Some(only), None) => Some(only),
                _ => None,
            }
        });
        match blamed {
            Some((key, (var, _))) => ConfigError::Env {
                var: var.clone(),
                key: key.clone(),
                message,
            },
            None => ConfigError::Env {
                var: self
                    .by_key
                    .values()
                    .map(|(var, _)| var.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                key: "?".to_owned(),
                message,
            },
        }
    }

    /// The first overridden key that `matches`, with its variable and value.
    fn entry(&self, matches: impl Fn(&str) -> bool) -> Option<(&String, &(String, String))> {
        self.by_key.iter().find(|(key, _)| matches(key))
    }
}

/// The key a `config` error names, and its message without the key and origin.
fn split_key(error: &::config::ConfigError) -> (Option<String>, String) {
    match error {
        ::config::ConfigError::Type {
            unexpected,
            expected,
            key,
            ..
        } => (
            key.clone(),
            format!("invalid type: {unexpected}, expected {expected}"),
        ),
        ::config::ConfigError::At { error, key, .. } => {
            let (inner_key, message) = split_key(error);
            (key.clone().or(inner_key), message)
        }
        other => (None, other.to_string()),
    }
}

/// `field` of serde's "unknown field `field`, expected ..." (and "unknown variant").
fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.split_once("unknown field `")?.1;
    rest.split_once('`').map(|(field, _)| field)
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
