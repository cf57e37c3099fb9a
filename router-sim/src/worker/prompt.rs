//! How the simulated worker reads an OpenAI request body: the [`PromptReader`] it is given.
//!
//! A reader parses the fields every OpenAI route shares (`model`, the prompt or chat
//! `messages`, `max_tokens`, `stream`) and turns the prompt into token ids; the worker reads
//! its own fields (`cache_salt`, `kv_transfer_params`, the SGLang bootstrap fields) from the
//! JSON object the reader hands back. For the worker's KV events to name the blocks the
//! routers look requests up by, its reader must tokenize exactly as the routers do: both
//! read bodies with router-tokenizer, and a [`Prompter`] is a reader (give the worker the
//! routers' prompter: their `[tokenizer]`).
//!
//! [`TokenIds`], the default, needs no tokenizer: it reads completions whose `prompt` is an
//! array of token ids (or of token-id arrays, concatenated) and answers a 400 naming the
//! field for text prompts and for chat, which need a real reader. Both read the body with
//! router-tokenizer's one parser ([`RequestBody`]).

use futures::future::BoxFuture;
use router_core::Endpoint;
use router_tokenizer::{PromptError, PromptInput, Prompter, RequestBody};
use serde_json::{Map, Value};

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
        PromptError::field(field, why).into()
    }
}

impl From<PromptError> for BadRequest {
    fn from(e: PromptError) -> Self {
        Self(e.to_string())
    }
}

/// Parses and tokenizes request bodies for the simulated worker.
pub trait PromptReader: Send + Sync + std::fmt::Debug {
    /// Parses `body`, a request on `endpoint`, and tokenizes its prompt.
    fn read<'a>(
        &'a self,
        endpoint: Endpoint,
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
        endpoint: Endpoint,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<PromptRequest, BadRequest>> {
        Box::pin(async move { read_token_ids(endpoint, body) })
    }
}

fn read_token_ids(endpoint: Endpoint, bytes: &[u8]) -> Result<PromptRequest, BadRequest> {
    let no_chat = |_: &Map<String, Value>| {
        Err(PromptError::field(
            "messages",
            "this worker reads token-id prompts only; chat needs a reader with a tokenizer",
        ))
    };
    let request = RequestBody::parse_with(endpoint, bytes, no_chat)?;
    let PromptInput::Tokens(tokens) = request.prompt else {
        return Err(BadRequest::field(
            "prompt",
            "must be an array of token ids or of token-id arrays \
             (this worker has no tokenizer for text)",
        ));
    };
    Ok(PromptRequest {
        model: request.model,
        tokens,
        max_tokens: request.max_tokens,
        stream: request.stream,
        body: request.body,
    })
}

/// The routers' own reader: parse, render chat and tokenize with their [`Prompter`].
impl PromptReader for Prompter {
    fn read<'a>(
        &'a self,
        endpoint: Endpoint,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<PromptRequest, BadRequest>> {
        Box::pin(async move {
            let request = self.parse(endpoint, body)?;
            let tokens = self.tokenize_for(endpoint, request.prompt).await;
            Ok(PromptRequest {
                model: request.model,
                tokens,
                max_tokens: request.max_tokens,
                stream: request.stream,
                body: request.body,
            })
        })
    }

    fn warm(&self) -> BoxFuture<'static, ()> {
        Box::pin(self.clone().warm())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(route: Endpoint, body: Value) -> Result<PromptRequest, BadRequest> {
        read_token_ids(route, body.to_string().as_bytes())
    }

    #[test]
    fn token_id_prompts_are_read_and_batches_concatenated() {
        let r = read(
            Endpoint::Completions,
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
                Endpoint::Completions,
                json!({"model": "m", "prompt": "hi"}),
                "prompt",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": [-1]}),
                "prompt",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": []}),
                "prompt",
            ),
            (Endpoint::Completions, json!({"prompt": [1]}), "model"),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": [1], "stream": 1}),
                "stream",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": [1], "max_tokens": -1}),
                "max_tokens",
            ),
            (
                Endpoint::Chat,
                json!({"model": "m", "messages": []}),
                "messages",
            ),
        ] {
            let err = read(route, body.clone()).expect_err("a bad body");
            assert!(err.0.contains(&format!("`{field}`")), "{body}: {err}");
        }
        assert!(read_token_ids(Endpoint::Completions, b"{nope").is_err());
    }
}
