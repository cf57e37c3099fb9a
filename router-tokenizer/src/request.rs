//! OpenAI request bodies as far as the prompt goes: the fields every route shares, read with
//! errors naming the field, and the plain chat rendering used for token counting.
//!
//! Read fields: `model` (string, required), `prompt` (completions: a string, an array of
//! strings, an array of token ids, or an array of token-id arrays; a batch is counted as the
//! concatenation of its parts), `messages` (chat: objects with a string `role` and a
//! `content` that is a string, null, or an array of parts whose `text` strings count),
//! `max_tokens` and `max_completion_tokens` (non-negative integers; the larger counts, so a
//! client cannot book one output token and have the engine generate the other), `n` and
//! `best_of` (the sequences generated per prompt, 1 to [`MAX_SEQUENCES`]) and `stream`
//! (bool). Every other field stays in [`RequestBody::body`] untouched; so does a token-id
//! prompt, while a text prompt is moved out of it into [`RequestBody::prompt`] (never copied:
//! a prompt may be megabytes), its shape kept in [`RequestBody::text_prompt`] for whoever
//! writes the body again.
//!
//! Chat rendering (what the router hashes and counts, not what the worker sees): by default
//! each message becomes `"<role>: <content>\n"`, followed by `"assistant:"` ([`render_chat`]),
//! and the request's `tools` definitions after them, so they count ([`render_request`]); with
//! a configured chat template, the template's rendering ([`crate::ChatTemplate`]), which gets
//! the tools itself.

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

/// Most sequences one request may ask the engine for (`n` or `best_of`, per prompt).
pub const MAX_SEQUENCES: u64 = 128;

/// The fields of an OpenAI request body that say what to run.
#[derive(Debug, Clone)]
pub struct RequestBody {
    pub endpoint: Endpoint,
    pub model: String,
    pub stream: bool,
    /// Output tokens per sequence: the larger of `max_tokens` and `max_completion_tokens`.
    pub max_tokens: Option<u64>,
    /// Sequences the engine generates: the larger of `n` and `best_of`, times the prompts of
    /// a completion's batch. Every one of them holds decode KV.
    pub sequences: u64,
    pub prompt: PromptInput,
    /// How a completion's text prompt was given (`None`: ids, kept in `body`, or a chat).
    pub text_prompt: Option<TextPrompt>,
    /// The body as received, less a text prompt (moved to `prompt`).
    pub body: Map<String, Value>,
}

/// The shape of a completion's text prompt, moved out of the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextPrompt {
    /// `"prompt": "..."`.
    One,
    /// `"prompt": ["...", ...]`, a batch.
    Batch,
}

impl RequestBody {
    /// Parses `bytes` as a request for `endpoint` (chat rendered plainly, [`render_chat`]);
    /// errors name the offending field.
    pub fn parse(endpoint: Endpoint, bytes: &[u8]) -> Result<Self, PromptError> {
        Self::parse_with(endpoint, bytes, render_request)
    }

    /// [`RequestBody::parse`] with a chat request rendered by `render` (given the whole body:
    /// `messages`, `tools` and the template's other inputs).
    pub fn parse_with(
        endpoint: Endpoint,
        bytes: &[u8],
        render: impl FnOnce(&Map<String, Value>) -> Result<String, PromptError>,
    ) -> Result<Self, PromptError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| PromptError::field("body", format!("not valid JSON: {e}")))?;
        let Value::Object(mut body) = value else {
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
        let max_tokens = match (
            optional_u64(&body, "max_tokens")?,
            optional_u64(&body, "max_completion_tokens")?,
        ) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let per_prompt = sequences(&body, "n")?.max(sequences(&body, "best_of")?);
        let (prompt, prompts, text_prompt) = match endpoint {
            Endpoint::Completions => {
                let (prompt, prompts, text, ids) = parse_prompt(body.remove("prompt"))?;
                if let Some(ids) = ids {
                    body.insert("prompt".to_owned(), ids);
                }
                (prompt, prompts, text)
            }
            Endpoint::Chat => (PromptInput::Text(vec![render(&body)?]), 1, None),
        };
        Ok(Self {
            endpoint,
            model,
            stream,
            max_tokens,
            sequences: per_prompt.saturating_mul(prompts),
            prompt,
            text_prompt,
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

/// `n` or `best_of`: absent or null is 1.
fn sequences(body: &Map<String, Value>, field: &str) -> Result<u64, PromptError> {
    match optional_u64(body, field) {
        Ok(None) => Ok(1),
        Ok(Some(n)) if (1..=MAX_SEQUENCES).contains(&n) => Ok(n),
        _ => Err(PromptError::field(
            field,
            format!("must be an integer from 1 to {MAX_SEQUENCES}"),
        )),
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

/// A completion's prompt, how many prompts its batch holds, the shape of a text prompt, and
/// a token-id prompt's value to keep in the body (a text prompt's strings are moved out).
fn parse_prompt(
    prompt: Option<Value>,
) -> Result<(PromptInput, u64, Option<TextPrompt>, Option<Value>), PromptError> {
    const SHAPE: &str = "must be a string, an array of strings, an array of token ids or an array of arrays of token ids";
    let items = match prompt {
        None => return Err(PromptError::field("prompt", "is required")),
        Some(Value::String(s)) => {
            return Ok((PromptInput::Text(vec![s]), 1, Some(TextPrompt::One), None));
        }
        Some(Value::Array(items)) => items,
        Some(_) => return Err(PromptError::field("prompt", SHAPE)),
    };
    let batch = items.len() as u64;
    match items.first() {
        None => Err(PromptError::field("prompt", "must not be an empty array")),
        Some(Value::String(_)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|parts| {
                (
                    PromptInput::Text(parts),
                    batch,
                    Some(TextPrompt::Batch),
                    None,
                )
            })
            .ok_or_else(|| PromptError::field("prompt", SHAPE)),
        Some(Value::Number(_)) => {
            let ids = token_ids(&items)?;
            Ok((PromptInput::Tokens(ids), 1, None, Some(Value::Array(items))))
        }
        Some(Value::Array(_)) => {
            let mut all = Vec::new();
            for item in &items {
                let Value::Array(ids) = item else {
                    return Err(PromptError::field("prompt", SHAPE));
                };
                all.extend(token_ids(ids)?);
            }
            Ok((
                PromptInput::Tokens(all),
                batch,
                None,
                Some(Value::Array(items)),
            ))
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

/// A chat request as the plain rendering counts it: its `messages` ([`render_chat`]), then
/// its `tools` definitions as their JSON text, which the engine's template puts in the prompt
/// too.
pub fn render_request(body: &Map<String, Value>) -> Result<String, PromptError> {
    let mut text = render_chat(body.get("messages"))?;
    append_tools(&mut text, body)?;
    Ok(text)
}

/// Appends `tools` (an array of definitions) to a plain rendering.
fn append_tools(text: &mut String, body: &Map<String, Value>) -> Result<(), PromptError> {
    match body.get("tools") {
        None | Some(Value::Null) => Ok(()),
        Some(tools @ Value::Array(_)) => {
            text.push_str("\ntools: ");
            text.push_str(&tools.to_string());
            Ok(())
        }
        Some(_) => Err(PromptError::field("tools", "must be an array")),
    }
}

/// Text as 4-byte little-endian pieces: the count when a tokenizer cannot be used.
pub fn byte_pieces(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.as_bytes().chunks(4).map(|c| {
        let mut b = [0u8; 4];
        b[..c.len()].copy_from_slice(c);
        u32::from_le_bytes(b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(endpoint: Endpoint, body: Value) -> Result<RequestBody, PromptError> {
        RequestBody::parse(endpoint, body.to_string().as_bytes())
    }

    #[test]
    fn the_larger_output_field_counts_on_both_routes() {
        for endpoint in Endpoint::ALL {
            let body = json!({"model": "m", "prompt": "p", "messages": [{"role": "user", "content": "x"}],
                              "max_tokens": 1, "max_completion_tokens": 999_999_999});
            assert_eq!(
                parse(endpoint, body).expect("valid").max_tokens,
                Some(999_999_999)
            );
            let body = json!({"model": "m", "prompt": "p", "messages": [{"role": "user", "content": "x"}],
                              "max_completion_tokens": 7});
            assert_eq!(parse(endpoint, body).expect("valid").max_tokens, Some(7));
        }
    }

    #[test]
    fn sequences_are_n_or_best_of_times_the_prompts_of_a_batch() {
        let cases = [
            (json!({"prompt": "p"}), 1),
            (json!({"prompt": "p", "n": 3}), 3),
            (json!({"prompt": "p", "n": 2, "best_of": 5}), 5),
            (json!({"prompt": ["a", "b", "c"], "n": 2}), 6),
            (json!({"prompt": [[1, 2], [3]], "best_of": 4}), 8),
            (json!({"prompt": [1, 2, 3], "n": 2}), 2),
        ];
        for (mut body, sequences) in cases {
            body["model"] = json!("m");
            let parsed = parse(Endpoint::Completions, body.clone()).expect("valid");
            assert_eq!(parsed.sequences, sequences, "{body}");
        }
        for bad in [
            json!(0),
            json!(MAX_SEQUENCES + 1),
            json!("2"),
            json!(-1),
            json!(1.5),
        ] {
            for field in ["n", "best_of"] {
                let mut body = json!({"model": "m", "prompt": "p"});
                body[field] = bad.clone();
                let err = parse(Endpoint::Completions, body).expect_err("out of range");
                assert_eq!(err.field, field);
            }
        }
    }

    #[test]
    fn tools_count_in_the_plain_rendering() {
        let messages = json!([{"role": "user", "content": "weather?"}]);
        let tools =
            json!([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]);
        let plain =
            parse(Endpoint::Chat, json!({"model": "m", "messages": messages})).expect("valid");
        let with = parse(
            Endpoint::Chat,
            json!({"model": "m", "messages": messages, "tools": tools}),
        )
        .expect("valid");
        let (PromptInput::Text(plain), PromptInput::Text(with)) = (plain.prompt, with.prompt)
        else {
            panic!("chat is text");
        };
        assert!(
            with[0].starts_with(&plain[0]) && with[0].contains("get_weather"),
            "{with:?}"
        );
        let err = parse(
            Endpoint::Chat,
            json!({"model": "m", "messages": messages, "tools": "x"}),
        )
        .expect_err("tools must be an array");
        assert_eq!(err.field, "tools");
    }
}
