//! Errors of parsing, validating and using a policy profile. Each names what is wrong: the
//! key, the class and the field, or the unknown class a request asked for.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be parsed (syntax, wrong type, unknown key: the parser's message
    /// names the key and where it is).
    #[error("policy file: {0}")]
    Parse(String),
    #[error("policy class `{class}`: `{field}` {reason}")]
    InvalidClassField {
        class: String,
        field: &'static str,
        reason: String,
    },
    #[error("policy: `{field}` {reason}")]
    InvalidField { field: &'static str, reason: String },
    #[error("policy: class `{class}` is defined twice")]
    DuplicateClass { class: String },
    #[error("policy: `default_class` names `{class}`, which is not a configured class")]
    UnknownDefaultClass { class: String },
    #[error("policy: `default_class` is required when classes are configured")]
    MissingDefaultClass,
    #[error("policy classifier `{rule}`: `{key}` {reason}")]
    InvalidRule {
        rule: String,
        key: &'static str,
        reason: String,
    },
    #[error(
        "policy classifier `{rule}` can never match: `{after}` before it matches every request"
    )]
    UnreachableRule { rule: String, after: String },
    #[error("policy: classifier `{rule}` is defined twice")]
    DuplicateRule { rule: String },
}

/// A request named a class the profile does not have. Never a silent fallback: a typo must
/// not inherit another class's deadline and share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("unknown policy class `{class}` (known: {known})")]
pub struct UnknownClass {
    pub class: String,
    pub known: String,
}

/// A request asked for a class it may not run under. A frontend answers 400 for an unknown
/// class and 403 for one that no matching rule permits ([`ClassifyError::status`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum ClassifyError {
    #[error(transparent)]
    Unknown(UnknownClass),
    #[error("policy class `{class}` may not be requested by header{}", match rule {
        Some(rule) => format!(" (classifier `{rule}` does not allow it)"),
        None => " (no classifier matched)".to_owned(),
    })]
    NotPermitted { class: String, rule: Option<String> },
}
