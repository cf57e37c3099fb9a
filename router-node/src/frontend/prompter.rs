//! The [`Prompter`]: a tokenizer plus the chat rendering, i.e. how a request's prompt becomes
//! the token ids the router hashes and counts.
//!
//! The chat rendering is a [`ChatTemplate`] when one is configured, else the plain rendering
//! of [`super::render_chat`]. The special-token rule follows vLLM: a completion's text prompt
//! is tokenized with the tokenizer's special tokens ([`Tokenizer::encode_with_specials`]),
//! a rendered chat prompt without them (the template writes its own). Only a tokenizer
//! loaded from a model directory adds any. The frontend and the simulated worker share one
//! prompter, so both hash the same tokens. [`Prompter::default`] is exactly the behaviour of
//! [`super::tokenize`] and [`super::render_chat`].

use super::chat_template::ChatTemplate;
use super::error::ApiError;
use super::openai::{Endpoint, ParsedRequest, PromptInput, byte_pieces, render_chat};
use super::tokenizer::Tokenizer;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// Text up to this many bytes (all parts together) is tokenized on the calling task once the
/// tokenizer is built: that takes microseconds, less than handing the work to a blocking
/// thread and waking the task again (a mutex, a condvar and two thread wake-ups).
pub const INLINE_TOKENIZE_MAX_BYTES: usize = 1024;

/// A tokenizer and a chat rendering. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Prompter {
    tokenizer: Tokenizer,
    chat_template: Option<Arc<ChatTemplate>>,
}

impl Prompter {
    pub fn new(tokenizer: Tokenizer, chat_template: Option<ChatTemplate>) -> Self {
        Self {
            tokenizer,
            chat_template: chat_template.map(Arc::new),
        }
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_deref()
    }

    /// The chat prompt of `messages`: the chat template's rendering, or the plain one.
    /// Errors (a 400) name `messages`.
    pub fn render_chat(&self, messages: Option<&Value>) -> Result<String, ApiError> {
        match &self.chat_template {
            None => render_chat(messages),
            Some(template) => template.render(messages),
        }
    }

    /// Parses `bytes` as a request for `endpoint`, rendering chat messages with this
    /// prompter.
    pub fn parse(&self, endpoint: Endpoint, bytes: &[u8]) -> Result<ParsedRequest, ApiError> {
        ParsedRequest::parse_with(endpoint, bytes, |messages| self.render_chat(messages))
    }

    /// The token ids of `text`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text)
    }

    /// The prompt's token ids as a completion's prompt: [`Prompter::tokenize_for`] with
    /// [`Endpoint::Completions`].
    pub async fn tokenize(&self, prompt: PromptInput) -> Vec<u32> {
        self.tokenize_for(Endpoint::Completions, prompt).await
    }

    /// The prompt's token ids for a request on `endpoint`: ids given in the body as they are;
    /// text tokenized (parts of a batch one by one, concatenated), a completion's with the
    /// tokenizer's special tokens and a rendered chat prompt without. Short text
    /// ([`INLINE_TOKENIZE_MAX_BYTES`]) is tokenized on the calling task once the tokenizer is
    /// built, longer text on a blocking thread (which encodes long parts in parallel
    /// pieces). If the tokenizer fails, the text is counted as 4-byte pieces instead.
    pub async fn tokenize_for(&self, endpoint: Endpoint, prompt: PromptInput) -> Vec<u32> {
        let parts = match prompt {
            PromptInput::Tokens(ids) => return ids,
            PromptInput::Text(parts) => parts,
        };
        let specials = endpoint == Endpoint::Completions;
        let bytes: usize = parts.iter().map(String::len).sum();
        if bytes <= INLINE_TOKENIZE_MAX_BYTES && self.tokenizer.ready() {
            encode_parts(&self.tokenizer, &parts, specials)
        } else {
            let tokenizer = self.tokenizer.clone();
            tokio::task::spawn_blocking(move || encode_parts(&tokenizer, &parts, specials))
                .await
                // The task catches the tokenizer's panics; it cannot fail.
                .unwrap_or_default()
        }
    }

    /// Builds the tokenizer's tables on a blocking thread, so the first text request does
    /// not pay for them.
    pub async fn warm(self) {
        let _ = tokio::task::spawn_blocking(move || self.tokenizer.warm()).await;
    }
}

/// The ids of `parts`, concatenated; a panicking tokenizer counts 4-byte pieces instead.
fn encode_parts(tokenizer: &Tokenizer, parts: &[String], specials: bool) -> Vec<u32> {
    let encode = || {
        let mut ids = Vec::new();
        for part in parts {
            match specials {
                true => ids.extend(tokenizer.encode_with_specials(part)),
                false => ids.extend(tokenizer.encode(part)),
            }
        }
        ids
    };
    std::panic::catch_unwind(AssertUnwindSafe(encode))
        .unwrap_or_else(|_| parts.iter().flat_map(|p| byte_pieces(p)).collect())
}
