//! `[[classifiers]]` as operators write them (TOML or YAML), and their validation into
//! [`Classifier`] rules against the profile's classes.
//!
//! Every struct denies unknown keys. Validation errors name the rule and the key: unknown
//! classes, a rule that can never match (after a catch-all), ranges with `min > max`,
//! refusal statuses outside 400..=599, duplicate rule names.

use super::classify::{
    BodyField, Classifier, Condition, Endpoint, Refusal, RuleAction, TokenRange,
};
use super::error::PolicyError;
use super::profile::{ClassPolicy, valid_name};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One `[[classifiers]]` rule. All match conditions must hold; an absent one matches any
/// request. Exactly one action: `class` or `refuse`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierConfig {
    /// Rule name: `[A-Za-z0-9_.-]+`, unique, not `none`; used in metric labels and error
    /// bodies.
    pub name: String,
    /// The body's `model`, exactly: one name or a list.
    pub model: Option<Values>,
    /// `completions` or `chat`.
    pub endpoint: Option<Endpoint>,
    /// The prompt's token count, inclusive bounds.
    pub prompt_tokens: Option<RangeConfig>,
    /// The request's `max_tokens` (as the caller counts it), inclusive bounds.
    pub max_tokens: Option<RangeConfig>,
    /// A request header: present (no `value`) or equal to one of the values.
    pub header: Option<FieldMatchConfig>,
    /// A top-level body field (`user`) or `metadata.<key>`: present or equal to one of the
    /// values (strings, integers and booleans compare by their JSON text).
    pub body_field: Option<FieldMatchConfig>,
    /// The name of the API key that authenticated the request: one name or a list.
    pub key: Option<Values>,
    /// Action: run the request under this class.
    pub class: Option<String>,
    /// Action: answer the request with this status and message.
    pub refuse: Option<RefuseConfig>,
    /// Classes an explicit `x-policy-class` header may pick when this rule matched.
    #[serde(default)]
    pub allow_header_override: Vec<String>,
}

/// Inclusive token-count bounds; at least one is required.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeConfig {
    pub min: Option<u64>,
    pub max: Option<u64>,
}

/// A header or body-field condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldMatchConfig {
    pub name: String,
    /// Absent: the field only has to be present.
    pub value: Option<Values>,
}

/// A refusal action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefuseConfig {
    /// 400..=599.
    pub status: u16,
    pub message: String,
}

/// One value or a list of values. Strings, integers and booleans are accepted and kept as
/// their text (`42`, `true`), the form a body field is compared in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Values(pub Vec<String>);

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValuesVisitor)
    }
}

struct ValuesVisitor;

impl<'de> Visitor<'de> for ValuesVisitor {
    type Value = Values;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, an integer, a boolean, or a list of them")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Values, E> {
        Ok(Values(vec![v.to_owned()]))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Values, E> {
        Ok(Values(vec![v.to_string()]))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Values, E> {
        Ok(Values(vec![v.to_string()]))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Values, E> {
        Ok(Values(vec![v.to_string()]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Values, A::Error> {
        let mut out = Vec::new();
        while let Some(one) = seq.next_element::<Scalar>()? {
            out.push(one.0);
        }
        Ok(Values(out))
    }
}

/// One list element of [`Values`].
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match deserializer.deserialize_any(ValuesVisitor)? {
            Values(mut one) if one.len() == 1 => Ok(Scalar(one.remove(0))),
            _ => Err(de::Error::custom(
                "expected a string, an integer or a boolean",
            )),
        }
    }
}

/// Validates the rules in order against the profile's classes.
pub(super) fn validate_rules(
    raw: &[ClassifierConfig],
    classes: &[ClassPolicy],
) -> Result<Vec<Classifier>, PolicyError> {
    let mut rules: Vec<Classifier> = Vec::with_capacity(raw.len());
    for r in raw {
        if let Some(first) = rules.iter().find(|c| c.conditions.is_empty()) {
            return Err(PolicyError::UnreachableRule {
                rule: r.name.clone(),
                after: first.name.clone(),
            });
        }
        if rules.iter().any(|c| c.name == r.name) {
            return Err(PolicyError::DuplicateRule {
                rule: r.name.clone(),
            });
        }
        rules.push(validate_rule(r, classes)?);
    }
    Ok(rules)
}

fn validate_rule(r: &ClassifierConfig, classes: &[ClassPolicy]) -> Result<Classifier, PolicyError> {
    let bad = |key: &'static str, reason: String| PolicyError::InvalidRule {
        rule: r.name.clone(),
        key,
        reason,
    };
    if !valid_name(&r.name) {
        return Err(bad(
            "name",
            "must be 1-64 characters of [A-Za-z0-9_.-]".into(),
        ));
    }
    if r.name == "none" {
        return Err(bad(
            "name",
            "`none` is reserved (the label of requests no rule matched)".into(),
        ));
    }
    let class_id = |key: &'static str, name: &str| {
        classes
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.id)
            .ok_or_else(|| {
                bad(
                    key,
                    format!("names `{name}`, which is not a configured class"),
                )
            })
    };
    let mut conditions = Vec::new();
    if let Some(models) = &r.model {
        conditions.push(Condition::Model(non_empty(&bad, "model", models)?));
    }
    if let Some(endpoint) = r.endpoint {
        conditions.push(Condition::Endpoint(endpoint));
    }
    if let Some(range) = r.prompt_tokens {
        conditions.push(Condition::PromptTokens(range_of(
            &bad,
            "prompt_tokens",
            range,
        )?));
    }
    if let Some(range) = r.max_tokens {
        conditions.push(Condition::MaxTokens(range_of(&bad, "max_tokens", range)?));
    }
    if let Some(h) = &r.header {
        let name = h.name.to_ascii_lowercase();
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(bad(
                "header.name",
                format!("`{}` is not a header name", h.name),
            ));
        }
        let values = h
            .value
            .as_ref()
            .map(|v| non_empty(&bad, "header.value", v))
            .transpose()?;
        conditions.push(Condition::Header { name, values });
    }
    if let Some(f) = &r.body_field {
        let field = BodyField::parse(&f.name).ok_or_else(|| {
            bad(
                "body_field.name",
                format!("`{}` is not a top-level field or `metadata.<key>`", f.name),
            )
        })?;
        let values = f
            .value
            .as_ref()
            .map(|v| non_empty(&bad, "body_field.value", v))
            .transpose()?;
        conditions.push(Condition::BodyField { field, values });
    }
    if let Some(keys) = &r.key {
        let names = non_empty(&bad, "key", keys)?;
        if let Some(name) = names.iter().find(|n| !valid_name(n)) {
            return Err(bad(
                "key",
                format!("`{name}` is not a key name (1-64 characters of [A-Za-z0-9_.-])"),
            ));
        }
        conditions.push(Condition::Key(names));
    }
    let action = match (&r.class, &r.refuse) {
        (Some(class), None) => RuleAction::Class(class_id("class", class)?),
        (None, Some(refuse)) => {
            if !(400..=599).contains(&refuse.status) {
                return Err(bad(
                    "refuse.status",
                    format!("is {}; must be a 4xx or 5xx status", refuse.status),
                ));
            }
            if !r.allow_header_override.is_empty() {
                return Err(bad(
                    "allow_header_override",
                    "has no effect on a refusing rule".into(),
                ));
            }
            RuleAction::Refuse(Refusal {
                status: refuse.status,
                message: refuse.message.clone(),
            })
        }
        (Some(_), Some(_)) => {
            return Err(bad("class", "and `refuse` cannot both be set".into()));
        }
        (None, None) => return Err(bad("class", "or `refuse` is required".into())),
    };
    let allow_header_override = r
        .allow_header_override
        .iter()
        .map(|name| class_id("allow_header_override", name))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Classifier {
        name: r.name.clone(),
        conditions,
        action,
        allow_header_override,
    })
}

fn non_empty(
    bad: &impl Fn(&'static str, String) -> PolicyError,
    key: &'static str,
    values: &Values,
) -> Result<Vec<String>, PolicyError> {
    if values.0.is_empty() {
        return Err(bad(key, "is an empty list (it would match nothing)".into()));
    }
    Ok(values.0.clone())
}

fn range_of(
    bad: &impl Fn(&'static str, String) -> PolicyError,
    key: &'static str,
    range: RangeConfig,
) -> Result<TokenRange, PolicyError> {
    match (range.min, range.max) {
        (None, None) => Err(bad(key, "needs `min` or `max`".into())),
        (Some(min), Some(max)) if min > max => {
            Err(bad(key, format!("has min {min} above max {max}")))
        }
        (min, max) => Ok(TokenRange {
            min: min.unwrap_or(0),
            max: max.unwrap_or(u64::MAX),
        }),
    }
}
