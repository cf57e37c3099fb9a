//! API keys with class entitlements (issue #14 item 1): who may use the OpenAI API, under
//! which policy classes, how fast.
//!
//! The operator keeps the keys in a TOML file (`[auth] keys_file`) holding only each key's
//! SHA-256 with a name, the classes it may use, an optional default class and optional rate
//! limits. The node loads it at start (a bad file stops it: a configuration error naming the
//! entry and the key), then again on SIGHUP and whenever the file changes (`reload.rs`); a
//! reload that fails keeps the keys in use, logs why and counts it. The set in use is
//! swapped atomically: a request keeps the key it was authenticated with to its end, and the
//! next request sees the new set.
//!
//! Without a keys file the node is open (today's behaviour), and says so at start-up.
//!
//! Files: `mod.rs` (the [`KeyStore`]), `keys.rs` (the file's format, its validation, the
//! [`KeySet`] and the [`ApiKey`], pure), `limits.rs` (a key's request and token buckets;
//! their tests in `limits_tests.rs`), `secret.rs` (hashing, new keys, the checks on a key,
//! `router-node keys new` and `keys hash`), `reload.rs` (reading the file, SIGHUP and the
//! change poll, attaching the keys to the frontend). The frontend's enforcement is
//! `crate::frontend`'s `auth.rs`.

mod keys;
mod limits;
mod reload;
mod secret;

pub use keys::{ApiKey, KeyEntry, KeySet, KeySummary, KeysError, NO_KEY, ValidEntry};
pub use limits::{KeyLimits, LimitSpec, RateSpec, TokensRefused, retry_after_secs};
pub use reload::{MAX_KEYS_FILE_BYTES, read_keys_file, spawn_reloader};
pub use secret::{
    KEY_PREFIX, KeyDigest, MIN_KEY_CHARS, generate_key, hash_input, hash_key, new_key,
    parse_digest, read_key, to_hex,
};

use arc_swap::ArcSwap;
use router_core::PolicyProfile;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The keys in use and where they come from.
#[derive(Debug)]
pub struct KeyStore {
    path: PathBuf,
    profile: Arc<PolicyProfile>,
    keys: ArcSwap<KeySet>,
    state: Mutex<Loaded>,
}

/// What the store last read.
#[derive(Debug, Default)]
struct Loaded {
    /// SHA-256 of the file's text in use (a poll reloads only when it differs).
    text: [u8; 32],
    /// The last failed reload's message, until one succeeds.
    error: Option<String>,
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq)]
pub enum Reload {
    /// The file is as it was (a poll), or failed the same way again: nothing to report.
    Unchanged,
    /// Now in use.
    Loaded {
        keys: usize,
        added: Vec<String>,
        removed: Vec<String>,
    },
    /// The keys in use stay; the message says why.
    Failed(String),
}

/// `/debug/state`'s `auth`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuthSnapshot {
    /// `keys` (`open` when the node has no keys file).
    pub mode: &'static str,
    pub keys_file: PathBuf,
    pub keys: Vec<KeySummary>,
    /// Why the last reload failed (the keys above are the previous ones), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reload_error: Option<String>,
}

impl KeyStore {
    /// Reads and validates `path` against `profile` (the start-up load; errors are the
    /// node's configuration errors).
    pub fn load(path: &Path, profile: Arc<PolicyProfile>) -> Result<Self, KeysError> {
        let text = read_keys_file(path)?;
        Self::from_text(path, &text, profile)
    }

    /// A store of `text` as if read from `path`.
    pub fn from_text(
        path: &Path,
        text: &str,
        profile: Arc<PolicyProfile>,
    ) -> Result<Self, KeysError> {
        let keys = KeySet::parse(text, &profile, None)?;
        Ok(Self {
            path: path.to_owned(),
            profile,
            keys: ArcSwap::from_pointee(keys),
            state: Mutex::new(Loaded {
                text: hash_key(text),
                error: None,
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The keys in use now.
    pub fn keys(&self) -> Arc<KeySet> {
        self.keys.load_full()
    }

    /// The key `presented` is, in the set in use now.
    pub fn authenticate(&self, presented: &str) -> Option<Arc<ApiKey>> {
        self.keys.load().find(presented).cloned()
    }

    /// Applies what was read from the file: `forced` (SIGHUP) reloads even an unchanged
    /// text and reports a failure again; a poll reports only changes.
    pub fn apply(&self, read: Result<String, KeysError>, forced: bool) -> Reload {
        let Ok(mut state) = self.state.lock() else {
            return Reload::Failed("the key store's lock is poisoned".to_owned());
        };
        let text = match read {
            Ok(text) => text,
            Err(e) => return fail(&mut state, e.to_string(), forced),
        };
        let digest = hash_key(&text);
        if !forced && digest == state.text && state.error.is_none() {
            return Reload::Unchanged;
        }
        let old = self.keys.load_full();
        match KeySet::parse(&text, &self.profile, Some(&old)) {
            Ok(new) => {
                let added = new.names().filter(|n| old.named(n).is_none());
                let added: Vec<String> = added.map(str::to_owned).collect();
                let removed = old.names().filter(|n| new.named(n).is_none());
                let removed: Vec<String> = removed.map(str::to_owned).collect();
                let keys = new.len();
                self.keys.store(Arc::new(new));
                state.text = digest;
                state.error = None;
                Reload::Loaded {
                    keys,
                    added,
                    removed,
                }
            }
            Err(e) => {
                // The same broken text is not reported at every poll.
                let again = digest == state.text;
                state.text = digest;
                fail(&mut state, e.to_string(), forced || !again)
            }
        }
    }

    /// What `/debug/state` shows.
    pub fn snapshot(&self) -> AuthSnapshot {
        AuthSnapshot {
            mode: "keys",
            keys_file: self.path.clone(),
            keys: self.keys.load().summaries(),
            last_reload_error: self.state.lock().ok().and_then(|s| s.error.clone()),
        }
    }
}

/// Records a failed reload; reported when `report` or when the message is new.
fn fail(state: &mut Loaded, message: String, report: bool) -> Reload {
    let new = state.error.as_deref() != Some(message.as_str());
    state.error = Some(message.clone());
    if report || new {
        Reload::Failed(message)
    } else {
        Reload::Unchanged
    }
}

#[cfg(test)]
mod tests;
