//! An OpenAI request as the frontend holds it: the body fields the tokenizer crate reads
//! ([`router_tokenizer::RequestBody`]: `model`, the prompt or chat `messages`, `max_tokens`,
//! `stream`; every other field forwarded to the worker untouched), the request's deadline,
//! and the body the worker gets.

use super::error::ApiError;
use super::limits::Deadline;
use router_core::Endpoint;
use router_tokenizer::{PromptError, PromptInput, RequestBody};
use serde_json::{Map, Value};

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

impl From<RequestBody> for ParsedRequest {
    fn from(request: RequestBody) -> Self {
        Self {
            endpoint: request.endpoint,
            model: request.model,
            stream: request.stream,
            max_tokens: request.max_tokens,
            prompt: request.prompt,
            body: request.body,
            deadline: None,
        }
    }
}

impl From<PromptError> for ApiError {
    fn from(e: PromptError) -> Self {
        ApiError::bad_field(&e.field, e.why)
    }
}

impl ParsedRequest {
    /// Parses `bytes` as a request for `endpoint` (chat rendered plainly); errors (400s)
    /// name the offending field.
    pub fn parse(endpoint: Endpoint, bytes: &[u8]) -> Result<Self, ApiError> {
        Ok(RequestBody::parse(endpoint, bytes)?.into())
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
