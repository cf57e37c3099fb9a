//! The [`Prompter`]: a tokenizer plus the chat rendering, i.e. how a request's prompt becomes
//! the token ids the router hashes and counts.
//!
//! The chat rendering is a [`ChatTemplate`] when one is configured, else the plain rendering
//! of [`crate::render_chat`]. The special-token rule follows vLLM: a completion's text prompt
//! is tokenized with the tokenizer's special tokens ([`Tokenizer::encode_with_specials`]),
//! a rendered chat prompt without them (the template writes its own). Only a tokenizer
//! loaded from a model directory adds any. The frontend and the simulated worker share one
//! prompter, so both hash the same tokens. [`Prompter::default`] is tiktoken `o200k_base` and
//! the plain [`crate::render_chat`].

use crate::chat_template::ChatTemplate;
use crate::error::PromptError;
use crate::request::{PromptInput, RequestBody, byte_pieces, render_chat};
use crate::tokenizer::Tokenizer;
use router_core::Endpoint;
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
    pub fn render_chat(&self, messages: Option<&Value>) -> Result<String, PromptError> {
        match &self.chat_template {
            None => render_chat(messages),
            Some(template) => template.render(messages),
        }
    }

    /// Parses `bytes` as a request for `endpoint`, rendering chat messages with this
    /// prompter.
    pub fn parse(&self, endpoint: Endpoint, bytes: &[u8]) -> Result<RequestBody, PromptError> {
        RequestBody::parse_with(endpoint, bytes, |messages| self.render_chat(messages))
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn tokenize(prompt: PromptInput) -> Vec<u32> {
        Prompter::default().tokenize(prompt).await
    }

    #[tokio::test]
    async fn token_ids_are_used_as_given_and_text_is_tokenized() {
        assert_eq!(tokenize(PromptInput::Tokens(vec![5, 6])).await, vec![5, 6]);
        let a = tokenize(PromptInput::Text(vec!["hello world".into()])).await;
        assert!(!a.is_empty() && a.len() < 11, "{a:?}");
        let special = tokenize(PromptInput::Text(vec!["<|endoftext|>".into()])).await;
        assert!(
            special.len() > 1,
            "special tokens are plain text: {special:?}"
        );
    }

    #[tokio::test]
    async fn short_text_on_the_task_and_long_text_on_a_blocking_thread_tokenize_alike() {
        Prompter::default().warm().await;
        let bpe = tiktoken_rs::o200k_base_singleton();
        let short = "The quick brown fox jumps over the lazy dog. ".repeat(4);
        let long = short.repeat(16);
        assert!(short.len() <= INLINE_TOKENIZE_MAX_BYTES);
        assert!(long.len() > INLINE_TOKENIZE_MAX_BYTES);
        for text in [short, long] {
            let parts = vec![text.clone(), "tail".to_owned()];
            let mut expected = bpe.encode_ordinary(&text);
            expected.extend(bpe.encode_ordinary("tail"));
            assert_eq!(tokenize(PromptInput::Text(parts)).await, expected);
        }
    }
}
