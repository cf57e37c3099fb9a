//! OpenAI request bodies as far as the prompt goes: the fields every route shares, read with
//! errors naming the field, and the plain chat rendering used for token counting.
//!
//! Read fields: `model` (string, required), `prompt` (completions: a string, an array of
//! strings, an array of token ids, or an array of token-id arrays; a batch is counted as the
//! concatenation of its parts), `messages` (chat: objects with a string `role` and a
//! `content` that is a string, null, or an array of parts whose `text` strings count),
//! `max_tokens` (or `max_completion_tokens` for chat; a non-negative integer) and `stream`
//! (bool). Every other field stays in [`RequestBody::body`] untouched.
//!
//! Chat rendering (what the router hashes and counts, not what the worker sees): by default
//! each message becomes `"<role>: <content>\n"`, followed by `"assistant:"` ([`render_chat`]);
//! with a configured chat template, the template's rendering ([`crate::ChatTemplate`]).

use crate::error::PromptError;
use router_core::Endpoint;
use serde_json::{Map, Value};

/// What the router needs to know about the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text to tokenize (parts of a batch are tokenized one by one and concatenated).
    Text(Vec<String>),
    /// Token ids as given.
    Tokens(Vec<u32>),
}

/// The fields of an OpenAI request body that say what to run.
#[derive(Debug, Clone)]
pub struct RequestBody {
    pub endpoint: Endpoint,
    pub model: String,
    pub stream: bool,
    pub max_tokens: Option<u64>,
    pub prompt: PromptInput,
    /// The body as received.
    pub body: Map<String, Value>,
}

impl RequestBody {
    /// Parses `bytes` as a request for `endpoint` (chat rendered plainly, [`render_chat`]);
    /// errors name the offending field.
    pub fn parse(endpoint: Endpoint, bytes: &[u8]) -> Result<Self, PromptError> {
        Self::parse_with(endpoint, bytes, render_chat)
    }

    /// [`RequestBody::parse`] with chat `messages` rendered by `render`.
    pub fn parse_with(
        endpoint: Endpoint,
        bytes: &[u8],
        render: impl FnOnce(Option<&Value>) -> Result<String, PromptError>,
    ) -> Result<Self, PromptError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| PromptError::field("body", format!("not valid JSON: {e}")))?;
        let Value::Object(body) = value else {
            return Err(PromptError::field("body", "must be a JSON object"));
        };
        let model = match body.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            Some(Value::String(_)) => return Err(PromptError::field("model", "must not be empty")),
            Some(_) => return Err(PromptError::field("model", "must be a string")),
            None => return Err(PromptError::field("model", "is required")),
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(PromptError::field("stream", "must be a boolean")),
        };
        let mut max_tokens = optional_u64(&body, "max_tokens")?;
        let prompt = match endpoint {
            Endpoint::Completions => parse_prompt(body.get("prompt"))?,
            Endpoint::Chat => {
                if max_tokens.is_none() {
                    max_tokens = optional_u64(&body, "max_completion_tokens")?;
                }
                PromptInput::Text(vec![render(body.get("messages"))?])
            }
        };
        Ok(Self {
            endpoint,
            model,
            stream,
            max_tokens,
            prompt,
            body,
        })
    }
}

fn optional_u64(body: &Map<String, Value>, field: &str) -> Result<Option<u64>, PromptError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| PromptError::field(field, "must be a non-negative integer")),
        Some(_) => Err(PromptError::field(field, "must be a non-negative integer")),
    }
}

fn token_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|t| u32::try_from(t).ok())
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, PromptError> {
    items
        .iter()
        .map(|v| {
            token_id(v).ok_or_else(|| {
                PromptError::field("prompt", "token ids must be integers in 0..=4294967295")
            })
        })
        .collect()
}

fn parse_prompt(prompt: Option<&Value>) -> Result<PromptInput, PromptError> {
    const SHAPE: &str = "must be a string, an array of strings, an array of token ids or an array of arrays of token ids";
    let items = match prompt {
        None => return Err(PromptError::field("prompt", "is required")),
        Some(Value::String(s)) => return Ok(PromptInput::Text(vec![s.clone()])),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(PromptError::field("prompt", SHAPE)),
    };
    match items.first() {
        None => Err(PromptError::field("prompt", "must not be an empty array")),
        Some(Value::String(_)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(PromptInput::Text)
            .ok_or_else(|| PromptError::field("prompt", SHAPE)),
        Some(Value::Number(_)) => token_ids(items).map(PromptInput::Tokens),
        Some(Value::Array(_)) => {
            let mut all = Vec::new();
            for item in items {
                let Value::Array(ids) = item else {
                    return Err(PromptError::field("prompt", SHAPE));
                };
                all.extend(token_ids(ids)?);
            }
            Ok(PromptInput::Tokens(all))
        }
        Some(_) => Err(PromptError::field("prompt", SHAPE)),
    }
}

/// The chat `messages` array, checked as every rendering needs it: present, an array, not
/// empty.
pub(crate) fn messages_array(messages: Option<&Value>) -> Result<&Value, PromptError> {
    match messages {
        None => Err(PromptError::field("messages", "is required")),
        Some(Value::Array(m)) if m.is_empty() => {
            Err(PromptError::field("messages", "must not be empty"))
        }
        Some(messages @ Value::Array(_)) => Ok(messages),
        Some(_) => Err(PromptError::field("messages", "must be an array")),
    }
}

/// Renders chat `messages` as `"<role>: <content>\n"` per message followed by
/// `"assistant:"`. Content may be a string, null, or an array of parts (their `text`
/// strings are concatenated; other parts, such as images, count as nothing).
pub fn render_chat(messages: Option<&Value>) -> Result<String, PromptError> {
    let Value::Array(messages) = messages_array(messages)? else {
        return Err(PromptError::field("messages", "must be an array"));
    };
    let mut out = String::new();
    for (i, message) in messages.iter().enumerate() {
        let Value::Object(message) = message else {
            return Err(PromptError::field(
                format!("messages[{i}]"),
                "must be an object",
            ));
        };
        let Some(Value::String(role)) = message.get("role") else {
            return Err(PromptError::field(
                format!("messages[{i}].role"),
                "must be a string",
            ));
        };
        out.push_str(role);
        out.push_str(": ");
        match message.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => out.push_str(text),
            Some(Value::Array(parts)) => {
                for part in parts {
                    if let Some(Value::String(text)) = part.get("text") {
                        out.push_str(text);
                    }
                }
            }
            Some(_) => {
                return Err(PromptError::field(
                    format!("messages[{i}].content"),
                    "must be a string, null or an array of parts",
                ));
            }
        }
        out.push('\n');
    }
    out.push_str("assistant:");
    Ok(out)
}

/// Text as 4-byte little-endian pieces: the count when a tokenizer cannot be used.
pub fn byte_pieces(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.as_bytes().chunks(4).map(|c| {
        let mut b = [0u8; 4];
        b[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(b)
    })
}
