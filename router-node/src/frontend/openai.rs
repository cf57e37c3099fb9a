//! An OpenAI request as the frontend holds it: the body fields the tokenizer crate reads
//! ([`router_tokenizer::RequestBody`]: `model`, the prompt or chat `messages`, `max_tokens`,
//! `stream`; every other field forwarded to the worker untouched, except the engine-control
//! fields only the router may set: [`REFUSED_FIELDS`], [`DROPPED_FIELDS`]), the request's
//! deadline, and the body the worker gets.

use super::error::ApiError;
use super::limits::{Deadline, Limits};
use router_core::Endpoint;
use router_tokenizer::{PromptError, PromptInput, RequestBody, TextPrompt, TokenizeError};
use serde_json::{Map, Value};

/// A validated OpenAI request.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    pub endpoint: Endpoint,
    pub model: String,
    pub stream: bool,
    /// Output tokens per sequence (the larger of `max_tokens` and `max_completion_tokens`).
    pub max_tokens: Option<u64>,
    /// Sequences the engine generates (`n` or `best_of`, times a batch's prompts).
    pub sequences: u64,
    pub prompt: PromptInput,
    /// How a completion's text prompt was given (it is in `prompt`, not in `body`).
    pub text_prompt: Option<TextPrompt>,
    /// The body as received, less a text prompt.
    pub body: Map<String, Value>,
    /// The router's token ids of a one-text completion prompt, sent upstream in its place
    /// (`forward_token_ids`).
    pub prompt_ids: Option<Vec<u32>>,
    /// When the request must be finished (set by the handler; `None`: no deadline). A
    /// stream still running then is ended with an error event (`proxy.rs`).
    pub deadline: Option<Deadline>,
    /// The LoRA adapter `model` names, when some worker serves it as one: only workers that
    /// serve it are eligible, and its blocks hash in the adapter's scope.
    pub lora: Option<String>,
    /// The client's `cache_salt` (kept in the body: the engine salts its cache with it).
    pub cache_salt: Option<String>,
}

impl From<RequestBody> for ParsedRequest {
    fn from(request: RequestBody) -> Self {
        Self {
            endpoint: request.endpoint,
            model: request.model,
            stream: request.stream,
            max_tokens: request.max_tokens,
            sequences: request.sequences,
            prompt: request.prompt,
            text_prompt: request.text_prompt,
            body: request.body,
            prompt_ids: None,
            deadline: None,
            lora: None,
            cache_salt: None,
        }
    }
}

impl From<PromptError> for ApiError {
    fn from(e: PromptError) -> Self {
        ApiError::bad_field(&e.field, e.why)
    }
}

impl From<TokenizeError> for ApiError {
    /// No tokenizer slot in time is a 503 `tokenizer_saturated`; a piece over the limit a
    /// 400 `word_too_long`.
    fn from(e: TokenizeError) -> Self {
        match e {
            TokenizeError::Busy(busy) => ApiError::tokenizer_saturated(&busy),
            TokenizeError::PieceTooLong(p) => ApiError::word_too_long(p.piece, p.limit),
        }
    }
}

/// Engine-control fields a client may not send: a 400 names the field. `kv_transfer_params`
/// would make an engine with a KV connector pull KV from a host the client names; SGLang's
/// `bootstrap_*` would pair a decode worker with a prefill room the client picks. The router
/// sets them itself on the legs of a disaggregated request.
pub const REFUSED_FIELDS: [&str; 4] = [
    "kv_transfer_params",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
];

/// The longest `cache_salt` accepted, in bytes.
pub const MAX_CACHE_SALT: usize = 1024;

/// Engine-control fields dropped from a client's body: the engines' request ids (a client's
/// could collide with another request's) and `priority` (the engine's own queue order, which
/// would jump the router's classes; the router sets it from the class's `engine_priority`).
pub const DROPPED_FIELDS: [&str; 3] = ["request_id", "rid", "priority"];

impl ParsedRequest {
    /// Parses `bytes` as a request for `endpoint` (chat rendered plainly); errors (400s)
    /// name the offending field.
    pub fn parse(endpoint: Endpoint, bytes: &[u8]) -> Result<Self, ApiError> {
        let mut request: Self = RequestBody::parse(endpoint, bytes)?.into();
        request.take_engine_fields()?;
        Ok(request)
    }

    /// Refuses the client's [`REFUSED_FIELDS`] and drops its [`DROPPED_FIELDS`]: only the
    /// router talks to the engine in those.
    pub fn take_engine_fields(&mut self) -> Result<(), ApiError> {
        if let Some(field) = REFUSED_FIELDS.iter().find(|f| self.body.contains_key(**f)) {
            return Err(ApiError::bad_field(
                field,
                "is set by the router, never by a client",
            ));
        }
        for field in DROPPED_FIELDS {
            self.body.remove(field);
        }
        Ok(())
    }

    /// Reads what the prompt's hashes depend on besides its tokens: the adapter `model`
    /// names when the fleet serves it as one, and `cache_salt` (a string, else a 400).
    pub fn read_scope(&mut self, directory: &dyn super::WorkerDirectory) -> Result<(), ApiError> {
        self.cache_salt = match self.body.get("cache_salt") {
            None | Some(Value::Null) => None,
            Some(Value::String(salt)) if salt.len() <= MAX_CACHE_SALT => Some(salt.clone()),
            Some(Value::String(_)) => {
                return Err(ApiError::bad_field(
                    "cache_salt",
                    format!("must be at most {MAX_CACHE_SALT} bytes"),
                ));
            }
            Some(_) => return Err(ApiError::bad_field("cache_salt", "must be a string")),
        };
        self.lora = directory
            .is_adapter(&self.model)
            .then(|| self.model.clone());
        Ok(())
    }

    /// The scope the prompt's blocks hash in (its adapter and salt).
    pub fn hash_scope(&self) -> router_core::HashScope<'_> {
        router_core::HashScope::new(self.lora.as_deref(), self.cache_salt.as_deref())
    }

    /// The output tokens the engine may generate for this request as the router books and
    /// rates it: per sequence the client's larger output field (else the node's default),
    /// capped by `max_expected_output_tokens`, times the sequences it asks for.
    pub fn expected_output(&self, limits: &Limits) -> u64 {
        self.max_tokens
            .unwrap_or(limits.default_max_tokens)
            .min(limits.max_expected_output_tokens)
            .saturating_mul(self.sequences.max(1))
    }

    /// The engine `priority` of the request's class (`None`: none is sent).
    pub fn set_engine_priority(&mut self, priority: Option<i64>) {
        match priority {
            Some(p) => self.body.insert("priority".to_owned(), Value::from(p)),
            None => self.body.remove("priority"),
        };
    }

    /// Sends the prompt upstream as `ids`, which the worker then uses instead of tokenizing
    /// the text again (vLLM's `/v1/completions` takes `prompt` as a list of ids).
    pub fn set_prompt_ids(&mut self, ids: Vec<u32>) {
        self.prompt_ids = Some(ids);
    }

    /// The body for the worker: the client's body with `stream: true` (the router must see
    /// the first token), serialized. A client that did not ask to stream gets one JSON answer
    /// with its `usage`, as from any OpenAI server: the stream is asked to end with it
    /// (`stream_options.include_usage`; real engines send no usage in a stream otherwise).
    pub fn upstream_body(&self) -> Vec<u8> {
        self.leg_body(&LegFields {
            stream: true,
            ask_usage: !self.stream,
            ..LegFields::default()
        })
    }

    /// The body of one leg: the client's fields as received (the prompt as the router's ids
    /// when forwarded), except what `leg` sets or leaves out, written straight from the
    /// parsed body (no copy of it: a prompt may be large).
    pub fn leg_body(&self, leg: &LegFields) -> Vec<u8> {
        serde_json::to_vec(&LegBody { request: self, leg }).unwrap_or_default()
    }
}

/// What one leg's body changes in the client's.
#[derive(Debug, Default)]
pub struct LegFields {
    /// `stream` as sent.
    pub stream: bool,
    /// `stream_options` becomes `{"include_usage": true}`.
    pub ask_usage: bool,
    /// Fields set for the leg (a client's field of the same name is replaced).
    pub set: Vec<(&'static str, Value)>,
    /// Client fields the leg leaves out.
    pub leave_out: &'static [&'static str],
}

/// The client's body as one leg sends it ([`ParsedRequest::leg_body`]).
struct LegBody<'a> {
    request: &'a ParsedRequest,
    leg: &'a LegFields,
}

impl serde::Serialize for LegBody<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let (request, leg) = (self.request, self.leg);
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in &request.body {
            let key = key.as_str();
            let replaced = key == "stream"
                || (key == "stream_options" && leg.ask_usage)
                || leg.leave_out.contains(&key)
                || leg.set.iter().any(|(k, _)| *k == key);
            if !replaced {
                map.serialize_entry(key, value)?;
            }
        }
        // A text prompt, moved out of the body when it was parsed: as ids, or as it came.
        if let Some(shape) = request.text_prompt {
            match (&request.prompt_ids, &request.prompt, shape) {
                (Some(ids), _, _) => map.serialize_entry("prompt", ids)?,
                (None, PromptInput::Text(parts), TextPrompt::One) if parts.len() == 1 => {
                    map.serialize_entry("prompt", &parts[0])?;
                }
                (None, PromptInput::Text(parts), _) => map.serialize_entry("prompt", parts)?,
                (None, PromptInput::Tokens(_), _) => {}
            }
        }
        for (key, value) in &leg.set {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("stream", &leg.stream)?;
        if leg.ask_usage {
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
