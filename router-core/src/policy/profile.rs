//! The validated policy profile: classes with typed thresholds, the default class and the
//! router-wide reject thresholds, and the request classifiers. Built from a [`PolicyFile`]
//! parsed from TOML or YAML text (reading the file is the caller's job: router-core does no
//! I/O); every validation error names the class (or rule) and the field.

use super::classify::Classifier;
use super::classify_config::validate_rules;
use super::config::{ClassConfig, PolicyFile, RejectThresholdsConfig};
use super::error::{PolicyError, UnknownClass};
use super::fraction::Fraction;
use crate::ids::ClassId;
use serde::Serialize;
use std::time::Duration;

/// The languages a profile can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyFormat {
    Toml,
    Yaml,
}

impl PolicyFormat {
    /// The format a file name's extension stands for: `toml`, `yaml` or `yml`.
    pub fn from_extension(extension: &str) -> Option<Self> {
        match extension {
            "toml" => Some(Self::Toml),
            "yaml" | "yml" => Some(Self::Yaml),
            _ => None,
        }
    }
}

/// One validated policy class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassPolicy {
    pub id: ClassId,
    pub name: String,
    /// Queue-wait deadline.
    pub slo: Duration,
    /// DRR credit per round, in uncached prompt tokens (> 0).
    pub quantum: u64,
    pub prefill_busy_threshold: Option<u64>,
    pub prefill_busy_threshold_frac: Option<Fraction>,
    /// At most 1.
    pub decode_busy_threshold_frac: Option<Fraction>,
    /// In (0, 1].
    pub busy_worker_ratio: Option<Fraction>,
    pub request_queue_limit_per_worker: Option<u64>,
    pub token_queue_limit_per_worker: Option<u64>,
    /// Admit now or reject now. Set by the `never_queue` key, and implied by any per-worker
    /// queue limit of 0 (a class that may store nothing must not fall into "reject all").
    pub never_queue: bool,
    /// The engine `priority` the router sets on the class's requests (`None`: none sent).
    pub engine_priority: Option<i64>,
}

impl ClassPolicy {
    /// The synthetic class of a profile-less router: never queues, no thresholds.
    fn fallback() -> Self {
        Self {
            id: ClassId(0),
            name: "default".to_owned(),
            slo: Duration::from_secs(3600),
            quantum: 1,
            prefill_busy_threshold: None,
            prefill_busy_threshold_frac: None,
            decode_busy_threshold_frac: None,
            busy_worker_ratio: None,
            request_queue_limit_per_worker: None,
            token_queue_limit_per_worker: None,
            never_queue: true,
            engine_priority: None,
        }
    }

    pub fn has_prefill_threshold(&self) -> bool {
        self.prefill_busy_threshold.is_some() || self.prefill_busy_threshold_frac.is_some()
    }

    pub fn has_decode_threshold(&self) -> bool {
        self.decode_busy_threshold_frac.is_some()
    }

    /// Whether the class gate can ever be closed. A class without thresholds is always
    /// admitted at once (subject only to router-wide reject thresholds).
    pub fn gated(&self) -> bool {
        self.has_prefill_threshold() || self.has_decode_threshold()
    }

    /// Booked prefill tokens above this make a rank prefill-busy for the class. Thresholds
    /// are strict and the absolute and relative ones are OR-ed, so the line is the lower of
    /// the two. `u64::MAX` when the class sets neither.
    pub fn prefill_busy_line(&self, max_num_batched_tokens: u64) -> u64 {
        let abs = self.prefill_busy_threshold.unwrap_or(u64::MAX);
        let rel = self
            .prefill_busy_threshold_frac
            .map_or(u64::MAX, |f| f.floor_of(max_num_batched_tokens));
        abs.min(rel)
    }

    /// Booked + reserved + needed decode blocks may not exceed this on a rank. `None` when
    /// the class sets no decode fraction or the rank's KV size is unknown (always room).
    pub fn decode_room_line(&self, total_kv_blocks: Option<u64>) -> Option<u64> {
        Some(self.decode_busy_threshold_frac?.floor_of(total_kv_blocks?))
    }
}

/// Router-wide overload thresholds, as lines in integer units per rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RejectThresholds {
    pub decode_blocks_frac: Option<Fraction>,
    pub prefill_tokens: Option<u64>,
    pub prefill_tokens_frac: Option<Fraction>,
}

impl RejectThresholds {
    pub fn is_empty(&self) -> bool {
        self.decode_blocks_frac.is_none()
            && self.prefill_tokens.is_none()
            && self.prefill_tokens_frac.is_none()
    }

    /// Whether one rank is over any threshold (strictly above).
    pub fn rank_over(
        &self,
        prefill_tokens: u64,
        decode_blocks: u64,
        total_kv_blocks: Option<u64>,
        max_num_batched_tokens: u64,
    ) -> bool {
        let decode_over = match (self.decode_blocks_frac, total_kv_blocks) {
            (Some(f), Some(total)) => decode_blocks > f.floor_of(total),
            _ => false,
        };
        let prefill_over = self.prefill_tokens.is_some_and(|n| prefill_tokens > n)
            || self
                .prefill_tokens_frac
                .is_some_and(|f| prefill_tokens > f.floor_of(max_num_batched_tokens));
        decode_over || prefill_over
    }
}

/// The validated profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyProfile {
    classes: Vec<ClassPolicy>,
    default_class: ClassId,
    reject_thresholds: RejectThresholds,
    /// `[[classifiers]]`, in order. Empty: the header's class, else the default.
    classifiers: Vec<Classifier>,
    /// True for the profile-less fallback, which ignores class names in requests.
    fallback: bool,
}

impl Default for PolicyProfile {
    fn default() -> Self {
        Self::fallback()
    }
}

impl PolicyProfile {
    /// No profile configured: one class that never queues; class names are ignored.
    pub fn fallback() -> Self {
        Self {
            classes: vec![ClassPolicy::fallback()],
            default_class: ClassId(0),
            reject_thresholds: RejectThresholds::default(),
            classifiers: Vec::new(),
            fallback: true,
        }
    }

    pub fn from_toml_str(text: &str) -> Result<Self, PolicyError> {
        Self::parse(text, PolicyFormat::Toml)
    }

    pub fn from_yaml_str(text: &str) -> Result<Self, PolicyError> {
        Self::parse(text, PolicyFormat::Yaml)
    }

    /// Parses and validates a profile's text, already read by the caller.
    pub fn parse(text: &str, format: PolicyFormat) -> Result<Self, PolicyError> {
        let file: PolicyFile = match format {
            PolicyFormat::Toml => toml::from_str(text).map_err(|e| e.to_string()),
            PolicyFormat::Yaml => serde_norway::from_str(text).map_err(|e| e.to_string()),
        }
        .map_err(PolicyError::Parse)?;
        Self::from_file(file)
    }

    /// Validates a parsed file. An empty class list gives the fallback profile (with the
    /// file's reject thresholds and classifiers, which may name its one class `default`).
    pub fn from_file(file: PolicyFile) -> Result<Self, PolicyError> {
        let reject_thresholds = validate_thresholds(&file.reject_thresholds)?;
        if file.classes.is_empty() {
            if let Some(class) = file.default_class {
                return Err(PolicyError::UnknownDefaultClass { class });
            }
            let fallback = Self::fallback();
            return Ok(Self {
                reject_thresholds,
                classifiers: validate_rules(&file.classifiers, &fallback.classes)?,
                ..fallback
            });
        }
        if file.classes.len() > usize::from(u16::MAX) {
            return Err(PolicyError::InvalidField {
                field: "classes",
                reason: format!("has {} entries; at most {}", file.classes.len(), u16::MAX),
            });
        }
        let mut classes: Vec<ClassPolicy> = Vec::with_capacity(file.classes.len());
        for (i, raw) in file.classes.iter().enumerate() {
            if classes.iter().any(|c| c.name == raw.name) {
                return Err(PolicyError::DuplicateClass {
                    class: raw.name.clone(),
                });
            }
            classes.push(validate_class(ClassId(i as u16), raw)?);
        }
        let default_name = file.default_class.ok_or(PolicyError::MissingDefaultClass)?;
        let default_class = classes
            .iter()
            .find(|c| c.name == default_name)
            .map(|c| c.id)
            .ok_or(PolicyError::UnknownDefaultClass {
                class: default_name,
            })?;
        let classifiers = validate_rules(&file.classifiers, &classes)?;
        Ok(Self {
            classes,
            default_class,
            reject_thresholds,
            classifiers,
            fallback: false,
        })
    }

    /// The class a request runs under: its header value, or the default when absent or
    /// empty. An unknown name is an error (the fallback profile ignores names).
    pub fn resolve(&self, requested: Option<&str>) -> Result<ClassId, UnknownClass> {
        match requested {
            None | Some("") => Ok(self.default_class),
            Some(_) if self.fallback => Ok(self.default_class),
            Some(name) => self
                .classes
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.id)
                .ok_or_else(|| UnknownClass {
                    class: name.to_owned(),
                    known: self
                        .classes
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                }),
        }
    }

    /// The longest a request may wait in a queue under this profile (zero when every class
    /// admits or rejects at once).
    pub fn longest_wait(&self) -> Duration {
        self.classes
            .iter()
            .filter(|c| !c.never_queue)
            .map(|c| c.slo)
            .max()
            .unwrap_or_default()
    }

    pub fn classes(&self) -> &[ClassPolicy] {
        &self.classes
    }

    /// Panics only on an id from another profile (ids come from `resolve`).
    pub fn class(&self, id: ClassId) -> &ClassPolicy {
        &self.classes[id.index()]
    }

    pub fn default_class(&self) -> ClassId {
        self.default_class
    }

    pub fn reject_thresholds(&self) -> &RejectThresholds {
        &self.reject_thresholds
    }

    /// The request classifiers, in the order they are tried.
    pub fn classifiers(&self) -> &[Classifier] {
        &self.classifiers
    }

    pub fn is_fallback(&self) -> bool {
        self.fallback
    }
}

/// A class, classifier rule or API key name: 1-64 characters of `[A-Za-z0-9_.-]` (they are
/// metric label values and appear in error bodies).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn validate_class(id: ClassId, raw: &ClassConfig) -> Result<ClassPolicy, PolicyError> {
    let bad = |field: &'static str, reason: &str| PolicyError::InvalidClassField {
        class: raw.name.clone(),
        field,
        reason: reason.to_owned(),
    };
    if !valid_name(&raw.name) {
        return Err(bad("name", "must be 1-64 characters of [A-Za-z0-9_.-]"));
    }
    if raw.slo_ms == 0 {
        return Err(bad("slo_ms", "must be greater than 0"));
    }
    if raw.quantum == 0 {
        return Err(bad("quantum", "must be greater than 0"));
    }
    let prefill_frac = raw
        .prefill_busy_threshold_frac
        .map(|v| {
            Fraction::from_f64(v).ok_or_else(|| {
                bad(
                    "prefill_busy_threshold_frac",
                    "must be a finite number >= 0",
                )
            })
        })
        .transpose()?;
    let decode_frac = raw
        .decode_busy_threshold_frac
        .map(|v| match Fraction::from_f64(v) {
            Some(f) if f <= Fraction::ONE => Ok(f),
            _ => Err(bad("decode_busy_threshold_frac", "must be between 0 and 1")),
        })
        .transpose()?;
    let ratio = raw
        .busy_worker_ratio
        .map(|v| match Fraction::from_f64(v) {
            Some(f) if f > Fraction::from_ppm(0) && f <= Fraction::ONE => Ok(f),
            _ => Err(bad(
                "busy_worker_ratio",
                "must be greater than 0 and at most 1",
            )),
        })
        .transpose()?;
    if ratio.is_some() && raw.prefill_busy_threshold.is_none() && prefill_frac.is_none() {
        return Err(bad(
            "busy_worker_ratio",
            "needs prefill_busy_threshold or prefill_busy_threshold_frac",
        ));
    }
    let zero_limit = raw.request_queue_limit_per_worker == Some(0)
        || raw.token_queue_limit_per_worker == Some(0);
    Ok(ClassPolicy {
        id,
        name: raw.name.clone(),
        slo: Duration::from_millis(raw.slo_ms),
        quantum: raw.quantum,
        prefill_busy_threshold: raw.prefill_busy_threshold,
        prefill_busy_threshold_frac: prefill_frac,
        decode_busy_threshold_frac: decode_frac,
        busy_worker_ratio: ratio,
        request_queue_limit_per_worker: raw.request_queue_limit_per_worker,
        token_queue_limit_per_worker: raw.token_queue_limit_per_worker,
        never_queue: raw.never_queue || zero_limit,
        engine_priority: raw.engine_priority,
    })
}

fn validate_thresholds(raw: &RejectThresholdsConfig) -> Result<RejectThresholds, PolicyError> {
    let frac = |field: &'static str, v: Option<f64>, at_most_one: bool| {
        v.map(|v| match Fraction::from_f64(v) {
            Some(f) if !at_most_one || f <= Fraction::ONE => Ok(f),
            _ => Err(PolicyError::InvalidField {
                field,
                reason: if at_most_one {
                    "must be between 0 and 1".to_owned()
                } else {
                    "must be a finite number >= 0".to_owned()
                },
            }),
        })
        .transpose()
    };
    Ok(RejectThresholds {
        decode_blocks_frac: frac(
            "reject_thresholds.decode_blocks_frac",
            raw.decode_blocks_frac,
            true,
        )?,
        prefill_tokens: raw.prefill_tokens,
        prefill_tokens_frac: frac(
            "reject_thresholds.prefill_tokens_frac",
            raw.prefill_tokens_frac,
            false,
        )?,
    })
}
