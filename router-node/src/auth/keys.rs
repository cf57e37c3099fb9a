//! The keys file and the validated set of keys it makes: pure (the caller reads the file).
//!
//! ```toml
//! [[keys]]
//! name = "team-a"                  # metric label, span field, error bodies: never the key
//! sha256 = "<64 hex digits>"       # router-node keys new / keys hash
//! classes = ["interactive", "batch"]
//! default_class = "interactive"    # optional: stands in for the profile's default_class
//! models = ["llama-3.1-8b", "sql"]  # optional: the models (and adapters) it may use; absent: all
//! requests_per_s = 5               # optional, with requests_burst (default: a second's worth)
//! tokens_per_s = 2000              # optional, with tokens_burst (default: a second's worth)
//! ```
//!
//! Every entry is checked against the policy profile: unknown keys, a bad or reused name
//! (`none` is the label of requests without a valid key), a digest that is not 64 hex digits
//! or is another entry's, an empty class list, a class the profile does not have, a default
//! class the key may not use, a rate that is not a positive number, a burst without its
//! rate. Each error names the entry and the key.

use super::limits::{KeyLimits, LimitSpec, RateSpec};
use super::secret::{KeyDigest, hash_key, parse_digest};
use router_core::policy::valid_name;
use router_core::{ClassId, PolicyProfile};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// The name requests without a valid key are labelled with; no key may take it.
pub const NO_KEY: &str = "none";

/// What is wrong with a keys file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KeysError {
    /// Not TOML, a wrong type or an unknown key (the parser names it and its line).
    #[error("{0}")]
    Parse(String),
    /// One entry's field; `entry` counts `[[keys]]` tables from 1.
    #[error("[[keys]] entry {entry} (`{name}`): `{field}` {reason}")]
    Invalid {
        entry: usize,
        name: String,
        field: &'static str,
        reason: String,
    },
    /// The file cannot be read or may not be trusted (its path is named by the caller).
    #[error("{0}")]
    File(String),
}

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

/// One `[[keys]]` table as written (also what `keys new` prints).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    pub name: String,
    pub sha256: String,
    pub classes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_class: Option<String>,
    /// The models (and LoRA adapters) it may use, as clients name them; empty: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_burst: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_burst: Option<u32>,
}

/// One entry, validated: its digest, classes as ids, and its limits' configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidEntry {
    pub name: String,
    pub digest: KeyDigest,
    pub classes: Vec<(ClassId, String)>,
    pub default_class: Option<(ClassId, String)>,
    pub models: Vec<String>,
    pub limits: LimitSpec,
}

impl KeyEntry {
    /// Checks this entry (number `entry`, from 1); `class_of` gives a class name's id, or
    /// `None` when the profile has no such class.
    pub fn validate(
        &self,
        entry: usize,
        class_of: impl Fn(&str) -> Option<ClassId>,
        known: &str,
    ) -> Result<ValidEntry, KeysError> {
        let bad = |field: &'static str, reason: String| KeysError::Invalid {
            entry,
            name: self.name.clone(),
            field,
            reason,
        };
        if !valid_name(&self.name) {
            return Err(bad(
                "name",
                "must be 1-64 characters of [A-Za-z0-9_.-]".into(),
            ));
        }
        if self.name == NO_KEY {
            return Err(bad(
                "name",
                format!("`{NO_KEY}` is reserved (the label of requests without a valid key)"),
            ));
        }
        let digest = parse_digest(&self.sha256).ok_or_else(|| {
            bad(
                "sha256",
                format!(
                    "must be 64 hex digits (the SHA-256 of the key: `router-node keys hash`), got {} characters",
                    self.sha256.len()
                ),
            )
        })?;
        if self.classes.is_empty() {
            return Err(bad(
                "classes",
                "is empty: list the policy classes this key may use".into(),
            ));
        }
        let mut classes: Vec<(ClassId, String)> = Vec::with_capacity(self.classes.len());
        for name in &self.classes {
            let id = class_of(name).ok_or_else(|| {
                bad(
                    "classes",
                    format!("names `{name}`, which is not a configured class (known: {known})"),
                )
            })?;
            if classes.iter().any(|(c, _)| *c == id) {
                return Err(bad("classes", format!("lists `{name}` twice")));
            }
            classes.push((id, name.clone()));
        }
        let default_class = match &self.default_class {
            None => None,
            Some(name) => {
                let found = classes.iter().find(|(_, n)| n == name).cloned();
                Some(found.ok_or_else(|| {
                    bad(
                        "default_class",
                        format!("names `{name}`, which is not one of this key's classes"),
                    )
                })?)
            }
        };
        let rate = |per_s: Option<f64>,
                    burst: Option<u32>,
                    rate_field: &'static str,
                    burst_field: &'static str| {
            match (per_s, burst) {
                (None, None) => Ok(None),
                (None, Some(_)) => Err(bad(burst_field, format!("needs `{rate_field}`"))),
                (Some(_), Some(0)) => Err(bad(burst_field, "must be at least 1".into())),
                (Some(per_s), burst) => RateSpec::new(per_s, burst)
                    .map(Some)
                    .map_err(|reason| bad(rate_field, reason)),
            }
        };
        let limits = LimitSpec {
            requests: rate(
                self.requests_per_s,
                self.requests_burst,
                "requests_per_s",
                "requests_burst",
            )?,
            tokens: rate(
                self.tokens_per_s,
                self.tokens_burst,
                "tokens_per_s",
                "tokens_burst",
            )?,
        };
        if let Some(model) = self.models.iter().find(|m| m.is_empty()) {
            return Err(bad("models", format!("holds an empty name ({model:?})")));
        }
        Ok(ValidEntry {
            name: self.name.clone(),
            digest,
            classes,
            default_class,
            models: self.models.clone(),
            limits,
        })
    }
}

/// One loaded key: what a request authenticated by it may do. Never holds the key.
#[derive(Debug)]
pub struct ApiKey {
    name: String,
    classes: Vec<(ClassId, String)>,
    default_class: Option<(ClassId, String)>,
    /// Empty: every model.
    models: Vec<String>,
    limits: Arc<KeyLimits>,
}

impl ApiKey {
    /// Whether a request authenticated by this key may ask for `model`.
    pub fn may_use_model(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }

    /// The models it may use (empty: every one).
    pub fn models(&self) -> &[String] {
        &self.models
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether a request authenticated by this key may run under `class`.
    pub fn may_use(&self, class: ClassId) -> bool {
        self.classes.iter().any(|(c, _)| *c == class)
    }

    /// The classes it may use, by name, as the file lists them.
    pub fn class_names(&self) -> impl Iterator<Item = &str> {
        self.classes.iter().map(|(_, n)| n.as_str())
    }

    /// The class a request that names none runs under (where the profile's default would).
    pub fn default_class(&self) -> Option<ClassId> {
        self.default_class.as_ref().map(|(c, _)| *c)
    }

    pub fn limits(&self) -> &KeyLimits {
        &self.limits
    }
}

/// What `/debug/state` shows of a key: no digest, no key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeySummary {
    pub name: String,
    pub classes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_class: Option<String>,
    #[serde(flatten)]
    pub limits: LimitSpec,
}

/// The keys of one version of the file, by digest.
#[derive(Debug, Default)]
pub struct KeySet {
    /// In the file's order.
    keys: Vec<Arc<ApiKey>>,
    by_digest: HashMap<KeyDigest, usize>,
}

impl KeySet {
    /// Parses and validates a keys file's text against `profile`. A key of `previous` with
    /// the same name and limits keeps its buckets (a reload does not refill them).
    pub fn parse(
        text: &str,
        profile: &PolicyProfile,
        previous: Option<&KeySet>,
    ) -> Result<Self, KeysError> {
        let file: KeysFile =
            toml::from_str(text).map_err(|e| KeysError::Parse(e.to_string().trim().to_owned()))?;
        let known = profile
            .classes()
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let class_of = |name: &str| {
            profile
                .classes()
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.id)
        };
        let mut set = KeySet::default();
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (index, entry) in file.keys.iter().enumerate() {
            let number = index + 1;
            let valid = entry.validate(number, class_of, &known)?;
            let bad = |field: &'static str, reason: String| KeysError::Invalid {
                entry: number,
                name: valid.name.clone(),
                field,
                reason,
            };
            if let Some(first) = names.insert(entry.name.as_str(), number) {
                return Err(bad("name", format!("is also the name of entry {first}")));
            }
            if let Some(&other) = set.by_digest.get(&valid.digest) {
                let other = set.keys.get(other).map_or("?", |k| k.name());
                return Err(bad(
                    "sha256",
                    format!("is also the digest of key `{other}` (one key, two names)"),
                ));
            }
            let limits = previous
                .and_then(|p| p.named(&valid.name))
                .filter(|old| old.limits.spec() == valid.limits)
                .map_or_else(
                    || Arc::new(KeyLimits::new(valid.limits)),
                    |old| Arc::clone(&old.limits),
                );
            set.by_digest.insert(valid.digest, set.keys.len());
            set.keys.push(Arc::new(ApiKey {
                name: valid.name,
                classes: valid.classes,
                default_class: valid.default_class,
                models: valid.models,
                limits,
            }));
        }
        Ok(set)
    }

    /// The key `presented` is, if it is one of these: its SHA-256 looked up.
    pub fn find(&self, presented: &str) -> Option<&Arc<ApiKey>> {
        let index = *self.by_digest.get(&hash_key(presented))?;
        self.keys.get(index)
    }

    /// The key named `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<ApiKey>> {
        self.keys.iter().find(|k| k.name == name)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The names, in the file's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.name())
    }

    /// Every key as `/debug/state` shows it.
    pub fn summaries(&self) -> Vec<KeySummary> {
        self.keys
            .iter()
            .map(|k| KeySummary {
                name: k.name.clone(),
                classes: k.class_names().map(str::to_owned).collect(),
                default_class: k.default_class.as_ref().map(|(_, n)| n.clone()),
                limits: k.limits.spec(),
            })
            .collect()
    }
}
