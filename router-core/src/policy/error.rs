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
}

/// A request named a class the profile does not have. Never a silent fallback: a typo must
/// not inherit another class's deadline and share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("unknown policy class `{class}` (known: {known})")]
pub struct UnknownClass {
    pub class: String,
    pub known: String,
}
