//! Request classifiers: the validated `[[classifiers]]` rules of a profile and their
//! evaluation over plain request facts.
//!
//! Rules are tried in order; the first whose conditions all hold decides: it names the class
//! or refuses the request. No rule matching means the default class. A class named by the
//! request itself (the `x-policy-class` header) is accepted only when the matched rule lists
//! it in `allow_header_override` (or it is the class the rule chose anyway), so a client
//! cannot promote itself. A profile without rules keeps the plain behaviour: the header's
//! class, else the default.
//!
//! A request authenticated by an API key carries the key's name (a rule may match on it)
//! and may carry the key's own default class, which then stands wherever the profile's
//! `default_class` would (no header without rules; no rule matched). Whether the key may
//! use the class the classification ends on is the caller's check, after this.

use super::error::{ClassifyError, UnknownClass};
use super::profile::PolicyProfile;
use crate::ids::ClassId;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// The OpenAI route a request came in on (and goes out to), as a rule names it: the one
/// enum of routes every crate uses (the frontend, the simulated worker, the load tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

impl Endpoint {
    /// Every route, in a fixed order.
    pub const ALL: [Self; 2] = [Self::Completions, Self::Chat];

    /// The path on an OpenAI server.
    pub fn path(self) -> &'static str {
        match self {
            Self::Completions => "/v1/completions",
            Self::Chat => "/v1/chat/completions",
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Completions => "completions",
            Self::Chat => "chat_completions",
        }
    }

    /// The name a rule (or a command-line flag) gives it: `completions` or `chat`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Completions => "completions",
            Self::Chat => "chat",
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("`{s}` is not an OpenAI route (completions or chat)"))
    }
}

/// Inclusive bounds on a token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TokenRange {
    pub min: u64,
    pub max: u64,
}

impl TokenRange {
    pub fn contains(&self, n: u64) -> bool {
        self.min <= n && n <= self.max
    }
}

/// A body field a rule reads: `user` (top level) or `metadata.<key>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum BodyField {
    TopLevel(String),
    Metadata(String),
}

impl BodyField {
    /// `None` for an empty name, an empty metadata key, or a dotted top-level name.
    pub fn parse(name: &str) -> Option<Self> {
        match name.split_once('.') {
            Some(("metadata", key)) if !key.is_empty() => Some(Self::Metadata(key.to_owned())),
            Some(_) => None,
            None if name.is_empty() => None,
            None => Some(Self::TopLevel(name.to_owned())),
        }
    }
}

/// One match condition of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Condition {
    Model(Vec<String>),
    Endpoint(Endpoint),
    PromptTokens(TokenRange),
    MaxTokens(TokenRange),
    /// `name` is lower case; `values: None` means present with any value.
    Header {
        name: String,
        values: Option<Vec<String>>,
    },
    BodyField {
        field: BodyField,
        values: Option<Vec<String>>,
    },
    /// The name of the API key that authenticated the request, one of these.
    Key(Vec<String>),
}

impl Condition {
    fn holds(&self, facts: &RequestFacts<'_>) -> bool {
        let one_of = |got: Option<&str>, values: &Option<Vec<String>>| match (got, values) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(got), Some(values)) => values.iter().any(|v| v == got),
        };
        match self {
            Self::Model(models) => models.iter().any(|m| m == facts.model),
            Self::Endpoint(e) => *e == facts.endpoint,
            Self::PromptTokens(r) => r.contains(facts.prompt_tokens),
            Self::MaxTokens(r) => r.contains(facts.max_tokens),
            Self::Header { name, values } => one_of((facts.header)(name), values),
            Self::BodyField { field, values } => {
                one_of((facts.body_field)(field).as_deref(), values)
            }
            Self::Key(names) => facts.key.is_some_and(|key| names.iter().any(|n| n == key)),
        }
    }
}

/// A refusal: the HTTP status (4xx or 5xx) and message the client gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

/// What a matching rule does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum RuleAction {
    Class(ClassId),
    Refuse(Refusal),
}

/// One validated rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Classifier {
    pub name: String,
    /// All must hold; empty: the rule matches every request (a catch-all).
    pub conditions: Vec<Condition>,
    pub action: RuleAction,
    pub allow_header_override: Vec<ClassId>,
}

impl Classifier {
    pub fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        self.conditions.iter().all(|c| c.holds(facts))
    }
}

/// What the caller knows about a request after parsing and tokenizing it.
pub struct RequestFacts<'a> {
    pub model: &'a str,
    pub endpoint: Endpoint,
    pub prompt_tokens: u64,
    /// The output budget the caller plans with (the request's `max_tokens`, or its default).
    pub max_tokens: u64,
    /// The explicit class the request asks for (`x-policy-class`); `None` or empty: none.
    pub requested: Option<&'a str>,
    /// The name of the API key that authenticated the request; `None` without keys.
    pub key: Option<&'a str>,
    /// The class that stands in for the profile's `default_class` (the API key's default
    /// class); `None`: the profile's.
    pub default_class: Option<ClassId>,
    /// A header's value by lower-case name (the first one when repeated).
    pub header: &'a dyn Fn(&str) -> Option<&'a str>,
    /// A body field's value as text: strings as they are, numbers and booleans as their
    /// JSON text; `None` when absent or of another type.
    pub body_field: &'a dyn Fn(&BodyField) -> Option<Cow<'a, str>>,
}

impl fmt::Debug for RequestFacts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestFacts")
            .field("model", &self.model)
            .field("endpoint", &self.endpoint)
            .field("prompt_tokens", &self.prompt_tokens)
            .field("max_tokens", &self.max_tokens)
            .field("requested", &self.requested)
            .field("key", &self.key)
            .field("default_class", &self.default_class)
            .finish_non_exhaustive()
    }
}

/// Where a request's class came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassSource {
    /// The default (no rule matched, or there are no rules and no header): the profile's,
    /// or the one the request's API key stands in with.
    Default,
    /// The matched rule's class.
    Rule,
    /// The request's header: without rules, or permitted by the matched rule.
    Header,
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Classification {
    Classified {
        class: ClassId,
        /// The rule that matched, if any.
        rule: Option<String>,
        source: ClassSource,
    },
    Refused {
        status: u16,
        message: String,
        rule: String,
    },
}

impl PolicyProfile {
    /// Classifies one request: the first matching rule decides, then the requested class
    /// is checked against what that rule permits. Without rules: the requested class
    /// (unknown is an error), else the default. The default is `facts.default_class` when
    /// set (never with the fallback profile, whose one class is every request's).
    pub fn classify(&self, facts: &RequestFacts<'_>) -> Result<Classification, ClassifyError> {
        let requested = facts.requested.filter(|r| !r.is_empty());
        let default = match facts.default_class {
            Some(class) if !self.is_fallback() => class,
            _ => self.default_class(),
        };
        if self.classifiers().is_empty() {
            let class = match requested {
                None => default,
                Some(_) => self.resolve(requested).map_err(ClassifyError::Unknown)?,
            };
            let source = match requested {
                Some(_) if !self.is_fallback() => ClassSource::Header,
                _ => ClassSource::Default,
            };
            return Ok(Classification::Classified {
                class,
                rule: None,
                source,
            });
        }
        let matched = self.classifiers().iter().find(|r| r.matches(facts));
        let (class, source, allowed): (ClassId, ClassSource, &[ClassId]) = match matched {
            Some(rule) => match &rule.action {
                RuleAction::Refuse(refusal) => {
                    return Ok(Classification::Refused {
                        status: refusal.status,
                        message: refusal.message.clone(),
                        rule: rule.name.clone(),
                    });
                }
                RuleAction::Class(class) => {
                    (*class, ClassSource::Rule, &rule.allow_header_override)
                }
            },
            None => (default, ClassSource::Default, &[]),
        };
        let rule = matched.map(|r| r.name.clone());
        let Some(name) = requested.filter(|_| !self.is_fallback()) else {
            return Ok(Classification::Classified {
                class,
                rule,
                source,
            });
        };
        let wanted = self.resolve(Some(name)).map_err(ClassifyError::Unknown)?;
        if wanted == class {
            Ok(Classification::Classified {
                class,
                rule,
                source,
            })
        } else if allowed.contains(&wanted) {
            Ok(Classification::Classified {
                class: wanted,
                rule,
                source: ClassSource::Header,
            })
        } else {
            Err(ClassifyError::NotPermitted {
                class: name.to_owned(),
                rule,
            })
        }
    }
}

impl ClassifyError {
    /// The HTTP status a frontend answers with: 400 for an unknown class, 403 for a class
    /// the request may not pick.
    pub fn status(&self) -> u16 {
        match self {
            Self::Unknown(_) => 400,
            Self::NotPermitted { .. } => 403,
        }
    }

    /// The unknown class error, when that is what this is.
    pub fn unknown(&self) -> Option<&UnknownClass> {
        match self {
            Self::Unknown(e) => Some(e),
            Self::NotPermitted { .. } => None,
        }
    }
}
