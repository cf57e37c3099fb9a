//! `[auth]`: the API keys file (`crate::auth`) and how often it is checked for changes.
//! Absent `keys_file`: the node is open, as before API keys existed (a warning at start-up).

use super::ConfigError;
use crate::auth::KeyStore;
use router_core::PolicyProfile;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    /// The API keys (TOML `[[keys]]`: name, sha256, classes, default_class, limits); a
    /// relative path is relative to the config file's directory. Absent: no keys, every
    /// client may use every class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_file: Option<PathBuf>,
    /// How often the keys file is checked for changes (ms, at least 100); 0: only at SIGHUP.
    pub reload_interval_ms: u64,
}

impl Default for AuthSection {
    fn default() -> Self {
        Self {
            keys_file: None,
            reload_interval_ms: 2_000,
        }
    }
}

/// Fastest change poll of the keys file.
pub const MIN_RELOAD_INTERVAL_MS: u64 = 100;

impl AuthSection {
    /// `reload_interval_ms` is 0 (SIGHUP only) or at least [`MIN_RELOAD_INTERVAL_MS`].
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let ms = self.reload_interval_ms;
        if ms != 0 && ms < MIN_RELOAD_INTERVAL_MS {
            return Err(ConfigError::invalid(
                "auth.reload_interval_ms",
                format!(
                    "must be 0 (reload at SIGHUP only) or at least {MIN_RELOAD_INTERVAL_MS}, got {ms}"
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn resolve_relative_paths(&mut self, dir: &Path) {
        if let Some(path) = &mut self.keys_file
            && path.is_relative()
        {
            *path = dir.join(&*path);
        }
    }

    /// The change poll's period; `None`: SIGHUP only.
    pub fn reload_interval(&self) -> Option<Duration> {
        (self.reload_interval_ms > 0).then(|| Duration::from_millis(self.reload_interval_ms))
    }

    /// The keys of `keys_file`, validated against `profile`; `None` without a file. A file
    /// that cannot be read or is invalid is an error naming `auth.keys_file`, the file, and
    /// the entry and key at fault.
    pub fn key_store(&self, profile: Arc<PolicyProfile>) -> Result<Option<KeyStore>, ConfigError> {
        let Some(path) = &self.keys_file else {
            return Ok(None);
        };
        KeyStore::load(path, profile)
            .map(Some)
            .map_err(|e| ConfigError::AuthKeys {
                path: path.clone(),
                message: e.to_string(),
            })
    }
}
