//! Request classification at the frontend: once per request, after parsing and tokenizing
//! and before any hop, the profile's `[[classifiers]]` pick the class (or refuse) from the
//! request's facts. The class then travels with the request to every leg.
//!
//! Here too: the `x-policy-class` header, and the class it decides alone before the body is
//! read when there are no classifiers (`known_class`). Here: the facts of a parsed request
//! ([`classify`]), the bookkeeping of each decision
//! (the request span's `class` / `classifier.rule`, the
//! `switchyard_classified_requests_total{class,rule}` counter, the per-rule counts that
//! `/debug/state` shows under `classifiers`) and the error answers: a refusal with the
//! rule's status and message, 403 for a class the header may not pick, 400 for an unknown
//! one. Each error body names the rule (`"rule"`).

use super::AppState;
use super::admit::Class;
use super::error::ApiError;
use super::handlers::CLASS_HEADER;
use super::openai::ParsedRequest;
use crate::auth::ApiKey;
use axum::http::HeaderMap;
use router_core::policy::{BodyField, Classification, ClassifyError, RequestFacts};
use router_tokenizer::{PromptInput, TextPrompt};
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The `rule` label of a request no rule matched.
const NO_RULE: &str = "none";

/// Classifies a parsed, tokenized request and records the decision. `requested` is the
/// `x-policy-class` header's value (`None` or empty: none); `key` the request's API key
/// (a rule may match its name; its default class stands in for the profile's).
pub(super) fn classify(
    state: &AppState,
    request: &ParsedRequest,
    prompt_tokens: usize,
    headers: &HeaderMap,
    requested: Option<&str>,
    key: Option<&ApiKey>,
) -> Result<Class, ApiError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let body_field = |field: &BodyField| body_field(request, field);
    let facts = RequestFacts {
        model: &request.model,
        endpoint: request.endpoint,
        prompt_tokens: u64::try_from(prompt_tokens).unwrap_or(u64::MAX),
        max_tokens: request
            .max_tokens
            .unwrap_or(state.limits.default_max_tokens),
        requested,
        key: key.map(ApiKey::name),
        default_class: key.and_then(ApiKey::default_class),
        header: &header,
        body_field: &body_field,
    };
    let span = tracing::Span::current();
    match state.profile.classify(&facts) {
        Ok(Classification::Classified { class, rule, .. }) => {
            let name = state.class_name(class);
            span.record("class", name.as_str());
            if let Some(rule) = &rule {
                span.record("classifier.rule", rule.as_str());
            }
            let label = rule.as_deref().unwrap_or(NO_RULE);
            state.metrics.classified(&name, label);
            state.classified.classified(label, &name);
            Ok(Class { id: class, name })
        }
        Ok(Classification::Refused {
            status,
            message,
            rule,
        }) => {
            span.record("classifier.rule", rule.as_str());
            state.classified.refused(&rule);
            Err(ApiError::refused_by_rule(status, message, rule))
        }
        Err(ClassifyError::Unknown(e)) => Err(ApiError::unknown_class(&e)),
        Err(ClassifyError::NotPermitted { class, rule }) => {
            if let Some(rule) = &rule {
                span.record("classifier.rule", rule.as_str());
            }
            Err(ApiError::class_not_permitted(class, rule))
        }
    }
}

/// The `x-policy-class` header: `None` when absent or empty; unreadable bytes are a 400.
pub(super) fn class_header(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    match headers.get(CLASS_HEADER).map(|v| v.to_str()) {
        None | Some(Ok("")) => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(_)) => Err(ApiError::bad_header(CLASS_HEADER, "must be visible ASCII")),
    }
}

/// Without classifiers the header alone decides the class (without one, the API key's
/// default class, else the profile's), so it is known (and an unknown one refused) before
/// the body is read; with classifiers it is known once classified.
pub(super) fn known_class(
    state: &AppState,
    requested: Option<&str>,
    key: Option<&ApiKey>,
) -> Result<Option<Class>, ApiError> {
    if !state.profile.classifiers().is_empty() {
        return Ok(None);
    }
    let id = match (requested, key.and_then(ApiKey::default_class)) {
        (None, Some(default)) if !state.profile.is_fallback() => default,
        _ => state
            .profile
            .resolve(requested)
            .map_err(|e| ApiError::unknown_class(&e))?,
    };
    Ok(Some(Class {
        id,
        name: state.class_name(id),
    }))
}

/// A body field as text: strings as they are, numbers and booleans as their JSON text. A
/// completion's one text prompt, moved out of the body when it was parsed, is read from the
/// request.
fn body_field<'a>(request: &'a ParsedRequest, field: &BodyField) -> Option<Cow<'a, str>> {
    let body = &request.body;
    let value = match field {
        BodyField::TopLevel(name) if name == "prompt" && !body.contains_key(name) => {
            return match (&request.prompt, request.text_prompt) {
                (PromptInput::Text(parts), Some(TextPrompt::One)) => {
                    parts.first().map(|p| Cow::Borrowed(p.as_str()))
                }
                _ => None,
            };
        }
        BodyField::TopLevel(name) => body.get(name)?,
        BodyField::Metadata(key) => body.get("metadata")?.as_object()?.get(key)?,
    };
    match value {
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        Value::Bool(b) => Some(Cow::Owned(b.to_string())),
        _ => None,
    }
}

/// Decisions per rule since start, for `/debug/state`.
#[derive(Debug, Default)]
pub struct ClassifierCounts {
    rules: Mutex<BTreeMap<String, RuleCounts>>,
}

/// One rule's decisions (`none`: requests no rule matched).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuleCounts {
    /// Requests classified, by class.
    pub classified: BTreeMap<String, u64>,
    pub refused: u64,
}

impl ClassifierCounts {
    fn with(&self, rule: &str, f: impl FnOnce(&mut RuleCounts)) {
        // A poisoned lock only loses debug counts, never a request.
        if let Ok(mut rules) = self.rules.lock() {
            if let Some(counts) = rules.get_mut(rule) {
                f(counts);
            } else {
                f(rules.entry(rule.to_owned()).or_default());
            }
        }
    }

    fn classified(&self, rule: &str, class: &str) {
        self.with(rule, |c| {
            if let Some(n) = c.classified.get_mut(class) {
                *n += 1;
            } else {
                c.classified.insert(class.to_owned(), 1);
            }
        });
    }

    fn refused(&self, rule: &str) {
        self.with(rule, |c| c.refused += 1);
    }

    /// The counts by rule name.
    pub fn snapshot(&self) -> BTreeMap<String, RuleCounts> {
        self.rules.lock().map(|r| r.clone()).unwrap_or_default()
    }
}
