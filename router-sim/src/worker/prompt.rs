//! How the simulated worker reads an OpenAI request body: the [`PromptReader`] it is given.
//!
//! A reader parses the fields every OpenAI route shares (`model`, the prompt or chat
//! `messages`, `max_tokens`, `stream`) and turns the prompt into token ids; the worker reads
//! its own fields (`cache_salt`, `kv_transfer_params`, the SGLang bootstrap fields) from the
//! JSON object the reader hands back. For the worker's KV events to name the blocks the
//! routers look requests up by, its reader must tokenize exactly as the routers do: the
//! router node passes its frontend's tokenizer and chat rendering.
//!
//! [`TokenIds`], the default, needs no tokenizer: it reads completions whose `prompt` is an
//! array of token ids (or of token-id arrays, concatenated) and answers a 400 naming the
//! field for text prompts and for chat, which need a real reader.

use futures::future::BoxFuture;
use serde_json::{Map, Value};

/// Which OpenAI route a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Completions,
    Chat,
}

/// A request as the worker needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRequest {
    pub model: String,
    /// The prompt's token ids (a chat request's rendered messages, tokenized).
    pub tokens: Vec<u32>,
    /// `max_tokens` (or `max_completion_tokens` for chat) when given.
    pub max_tokens: Option<u64>,
    pub stream: bool,
    /// The whole JSON object, for the worker's own fields.
    pub body: Map<String, Value>,
}

/// A malformed request: a 400 whose message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

impl BadRequest {
    /// `field \`<field>\`: <why>`, the wording of the router frontend's 400s.
    pub fn field(field: &str, why: impl std::fmt::Display) -> Self {
        Self(format!("field `{field}`: {why}"))
    }
}

/// Parses and tokenizes request bodies for the simulated worker.
pub trait PromptReader: Send + Sync + std::fmt::Debug {
    /// Parses `body`, a request on `route`, and tokenizes its prompt.
    fn read<'a>(
        &'a self,
        route: Route,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<PromptRequest, BadRequest>>;

    /// Prepares the tokenizer (run in the background as the worker starts).
    fn warm(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// The default reader: token-id prompts only, no tokenizer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenIds;

impl PromptReader for TokenIds {
    fn read<'a>(
        &'a self,
        route: Route,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<PromptRequest, BadRequest>> {
        Box::pin(async move { read_token_ids(route, body) })
    }
}

fn read_token_ids(route: Route, bytes: &[u8]) -> Result<PromptRequest, BadRequest> {
    let body = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(body)) => body,
        Ok(_) => return Err(BadRequest::field("body", "must be a JSON object")),
        Err(e) => return Err(BadRequest::field("body", format!("not valid JSON: {e}"))),
    };
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(Value::String(_)) => return Err(BadRequest::field("model", "must not be empty")),
        Some(_) => return Err(BadRequest::field("model", "must be a string")),
        None => return Err(BadRequest::field("model", "is required")),
    };
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(BadRequest::field("stream", "must be a boolean")),
    };
    if route == Route::Chat {
        return Err(BadRequest::field(
            "messages",
            "this worker reads token-id prompts only; chat needs a reader with a tokenizer",
        ));
    }
    let max_tokens = match body.get("max_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| BadRequest::field("max_tokens", "must be a non-negative integer"))?,
        ),
    };
    let tokens = prompt_ids(body.get("prompt"))?;
    Ok(PromptRequest {
        model,
        tokens,
        max_tokens,
        stream,
        body,
    })
}

/// `prompt` as token ids: an array of ids, or an array of id arrays (concatenated).
fn prompt_ids(prompt: Option<&Value>) -> Result<Vec<u32>, BadRequest> {
    const SHAPE: &str = "must be an array of token ids or of token-id arrays \
                         (this worker has no tokenizer for text)";
    let items = match prompt {
        None => return Err(BadRequest::field("prompt", "is required")),
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            return Err(BadRequest::field("prompt", "must not be an empty array"));
        }
        Some(_) => return Err(BadRequest::field("prompt", SHAPE)),
    };
    let id = |v: &Value| {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| BadRequest::field("prompt", SHAPE))
    };
    let mut ids = Vec::new();
    for item in items {
        match item {
            Value::Array(inner) => {
                for v in inner {
                    ids.push(id(v)?);
                }
            }
            v => ids.push(id(v)?),
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(route: Route, body: Value) -> Result<PromptRequest, BadRequest> {
        read_token_ids(route, body.to_string().as_bytes())
    }

    #[test]
    fn token_id_prompts_are_read_and_batches_concatenated() {
        let r = read(
            Route::Completions,
            json!({"model": "m", "prompt": [[1, 2], [3]], "max_tokens": 4, "stream": true}),
        )
        .expect("a valid body");
        assert_eq!(r.tokens, vec![1, 2, 3]);
        assert_eq!(
            (r.model.as_str(), r.max_tokens, r.stream),
            ("m", Some(4), true)
        );
    }

    #[test]
    fn text_chat_and_malformed_fields_are_400s_naming_the_field() {
        for (route, body, field) in [
            (
                Route::Completions,
                json!({"model": "m", "prompt": "hi"}),
                "prompt",
            ),
            (
                Route::Completions,
                json!({"model": "m", "prompt": [-1]}),
                "prompt",
            ),
            (
                Route::Completions,
                json!({"model": "m", "prompt": []}),
                "prompt",
            ),
            (Route::Completions, json!({"prompt": [1]}), "model"),
            (
                Route::Completions,
                json!({"model": "m", "prompt": [1], "stream": 1}),
                "stream",
            ),
            (
                Route::Completions,
                json!({"model": "m", "prompt": [1], "max_tokens": -1}),
                "max_tokens",
            ),
            (
                Route::Chat,
                json!({"model": "m", "messages": []}),
                "messages",
            ),
        ] {
            let err = read(route, body.clone()).expect_err("a bad body");
            assert!(err.0.contains(&format!("`{field}`")), "{body}: {err}");
        }
        assert!(read_token_ids(Route::Completions, b"{nope").is_err());
    }
}
