//! OpenAI request bodies: parsing with field-naming errors, the chat rendering used for
//! token counting, and tokenization.
//!
//! Read fields: `model` (string, required), `prompt` (completions: a string, an array of
//! strings, an array of token ids, or an array of token-id arrays; a batch is counted as the
//! concatenation of its parts), `messages` (chat: objects with a string `role` and a
//! `content` that is a string, null, or an array of parts whose `text` strings count),
//! `max_tokens` (or `max_completion_tokens` for chat; a non-negative integer) and `stream`
//! (bool). Every other field is forwarded to the worker untouched.
//!
//! Chat rendering (what the router hashes and counts, not what the worker sees): by default
//! each message becomes `"<role>: <content>\n"`, followed by `"assistant:"`; with a
//! configured chat template, the template's rendering (`chat_template`).
//!
//! Tokenization: by default tiktoken `o200k_base`, ordinary (special tokens are plain
//! text); `[tokenizer]` may choose another (`tokenizer`). Token ids given in the body are
//! used as they are. The free functions here ([`tokenize`], [`ParsedRequest::parse`]) are
//! the defaults; a [`super::Prompter`] applies the configured choice.

use super::error::ApiError;
use super::limits::Deadline;
use serde_json::{Map, Value};

/// Which OpenAI route a request came in on (and goes out to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

impl Endpoint {
    /// The upstream path on the worker.
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
}

/// What the router needs to know about the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text to tokenize (parts of a batch are tokenized one by one and concatenated).
    Text(Vec<String>),
    /// Token ids as given.
    Tokens(Vec<u32>),
}

/// A validated OpenAI request.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    pub endpoint: Endpoint,
    pub model: String,
    pub stream: bool,
    pub max_tokens: Option<u64>,
    pub prompt: PromptInput,
    /// The body as received.
    pub body: Map<String, Value>,
    /// When the request must be finished (set by the handler; `None`: no deadline). A
    /// stream still running then is ended with an error event (`proxy.rs`).
    pub deadline: Option<Deadline>,
}

impl ParsedRequest {
    /// Parses `bytes` as a request for `endpoint` (chat rendered plainly, [`render_chat`]);
    /// errors name the offending field.
    pub fn parse(endpoint: Endpoint, bytes: &[u8]) -> Result<Self, ApiError> {
        Self::parse_with(endpoint, bytes, render_chat)
    }

    /// [`ParsedRequest::parse`] with chat `messages` rendered by `render`.
    pub fn parse_with(
        endpoint: Endpoint,
        bytes: &[u8],
        render: impl FnOnce(Option<&Value>) -> Result<String, ApiError>,
    ) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_field("body", format!("not valid JSON: {e}")))?;
        let Value::Object(body) = value else {
            return Err(ApiError::bad_field("body", "must be a JSON object"));
        };
        let model = match body.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            Some(Value::String(_)) => {
                return Err(ApiError::bad_field("model", "must not be empty"));
            }
            Some(_) => return Err(ApiError::bad_field("model", "must be a string")),
            None => return Err(ApiError::bad_field("model", "is required")),
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ApiError::bad_field("stream", "must be a boolean")),
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
            deadline: None,
        })
    }

    /// Replaces the body's `prompt` with token ids, which the worker then uses instead of
    /// tokenizing the text again (vLLM's `/v1/completions` takes `prompt` as a list of ids).
    pub fn set_prompt_ids(&mut self, ids: &[u32]) {
        self.body
            .insert("prompt".to_owned(), Value::from(ids.to_vec()));
    }

    /// The body for the worker: the client's body with `stream: true` (the router must see
    /// the first token), serialized. A client that did not ask to stream gets one JSON answer
    /// with its `usage`, as from any OpenAI server: the stream is asked to end with it
    /// (`stream_options.include_usage`; real engines send no usage in a stream otherwise).
    pub fn upstream_body(&self) -> Vec<u8> {
        // Written straight from the parsed body: no copy of it (a prompt may be large).
        let body = UpstreamBody {
            body: &self.body,
            ask_usage: !self.stream,
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// The client's body as the worker gets it: every field as received except `stream`
/// (always true) and, when `ask_usage`, `stream_options` (`{"include_usage": true}`).
struct UpstreamBody<'a> {
    body: &'a Map<String, Value>,
    ask_usage: bool,
}

impl serde::Serialize for UpstreamBody<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.body {
            match key.as_str() {
                "stream" => {}
                "stream_options" if self.ask_usage => {}
                _ => map.serialize_entry(key, value)?,
            }
        }
        map.serialize_entry("stream", &true)?;
        if self.ask_usage {
            map.serialize_entry(
                "stream_options",
                &IncludeUsage {
                    include_usage: true,
                },
            )?;
        }
        map.end()
    }
}

#[derive(serde::Serialize)]
struct IncludeUsage {
    include_usage: bool,
}

fn optional_u64(body: &Map<String, Value>, field: &str) -> Result<Option<u64>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::bad_field(field, "must be a non-negative integer")),
        Some(_) => Err(ApiError::bad_field(field, "must be a non-negative integer")),
    }
}

fn token_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|t| u32::try_from(t).ok())
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .map(|v| {
            token_id(v).ok_or_else(|| {
                ApiError::bad_field("prompt", "token ids must be integers in 0..=4294967295")
            })
        })
        .collect()
}

fn parse_prompt(prompt: Option<&Value>) -> Result<PromptInput, ApiError> {
    const SHAPE: &str = "must be a string, an array of strings, an array of token ids or an array of arrays of token ids";
    let items = match prompt {
        None => return Err(ApiError::bad_field("prompt", "is required")),
        Some(Value::String(s)) => return Ok(PromptInput::Text(vec![s.clone()])),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ApiError::bad_field("prompt", SHAPE)),
    };
    match items.first() {
        None => Err(ApiError::bad_field("prompt", "must not be an empty array")),
        Some(Value::String(_)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(PromptInput::Text)
            .ok_or_else(|| ApiError::bad_field("prompt", SHAPE)),
        Some(Value::Number(_)) => token_ids(items).map(PromptInput::Tokens),
        Some(Value::Array(_)) => {
            let mut all = Vec::new();
            for item in items {
                let Value::Array(ids) = item else {
                    return Err(ApiError::bad_field("prompt", SHAPE));
                };
                all.extend(token_ids(ids)?);
            }
            Ok(PromptInput::Tokens(all))
        }
        Some(_) => Err(ApiError::bad_field("prompt", SHAPE)),
    }
}

/// Renders chat `messages` as `"<role>: <content>\n"` per message followed by
/// `"assistant:"`. Content may be a string, null, or an array of parts (their `text`
/// strings are concatenated; other parts, such as images, count as nothing).
pub fn render_chat(messages: Option<&Value>) -> Result<String, ApiError> {
    let messages = match messages {
        None => return Err(ApiError::bad_field("messages", "is required")),
        Some(Value::Array(m)) if m.is_empty() => {
            return Err(ApiError::bad_field("messages", "must not be empty"));
        }
        Some(Value::Array(m)) => m,
        Some(_) => return Err(ApiError::bad_field("messages", "must be an array")),
    };
    let mut out = String::new();
    for (i, message) in messages.iter().enumerate() {
        let Value::Object(message) = message else {
            return Err(ApiError::bad_field(
                &format!("messages[{i}]"),
                "must be an object",
            ));
        };
        let Some(Value::String(role)) = message.get("role") else {
            return Err(ApiError::bad_field(
                &format!("messages[{i}].role"),
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
                return Err(ApiError::bad_field(
                    &format!("messages[{i}].content"),
                    "must be a string, null or an array of parts",
                ));
            }
        }
        out.push('\n');
    }
    out.push_str("assistant:");
    Ok(out)
}

/// The prompt's token ids with the default tokenizer (tiktoken o200k_base): see
/// [`super::Prompter::tokenize`].
pub async fn tokenize(prompt: PromptInput) -> Vec<u32> {
    super::Prompter::default().tokenize(prompt).await
}

/// Builds the default tokenizer on a blocking thread (about a second in a debug build), so
/// the first text request does not pay for it.
pub async fn warm_tokenizer() {
    super::Prompter::default().warm().await;
}

/// Text as 4-byte little-endian pieces: the count when a tokenizer cannot be used.
pub(super) fn byte_pieces(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.as_bytes().chunks(4).map(|c| {
        let mut b = [0u8; 4];
        b[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(b)
    })
}
