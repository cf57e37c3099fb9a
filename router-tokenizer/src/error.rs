//! The request-level error of this crate: a body field that cannot be read or rendered.
//!
//! Loading errors stay with what they load ([`crate::TokenizerLoadError`],
//! [`crate::ChatTemplateError`], [`crate::ModelDirError`]). A [`PromptError`] is what a
//! caller turns into its own answer: the router's HTTP frontend a 400 naming the field, the
//! simulated worker its own 400.

/// A malformed request field; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {why}")]
pub struct PromptError {
    /// The field as a client would find it in the body (`prompt`, `messages[2].role`).
    pub field: String,
    /// What is wrong with it.
    pub why: String,
}

impl PromptError {
    pub fn field(field: impl Into<String>, why: impl std::fmt::Display) -> Self {
        Self {
            field: field.into(),
            why: why.to_string(),
        }
    }
}
