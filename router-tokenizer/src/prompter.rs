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
//!
//! Tokenizer work is bounded across a process by a [`TokenizeGate`] (one permit per text
//! prompt encoded off the calling task, held until the encoding ends, even when the request
//! that asked for it is gone): [`Prompter::tokenize_gated`] waits for a permit until a given
//! instant and otherwise answers [`TokenizerBusy`]. How long one encoding may run and how much
//! memory it takes is bounded before it starts, by the longest piece
//! ([`Tokenizer::longest_piece`], checked by the caller).

use crate::chat_template::ChatTemplate;
use crate::error::PromptError;
use crate::request::{PromptInput, RequestBody, byte_pieces, render_chat, render_request};
use crate::tokenizer::Tokenizer;
use router_core::Endpoint;
use serde_json::{Map, Value};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Text up to this many bytes (all parts together) is tokenized on the calling task once the
/// tokenizer is built: that takes microseconds, less than handing the work to a blocking
/// thread and waking the task again (a mutex, a condvar and two thread wake-ups).
pub const INLINE_TOKENIZE_MAX_BYTES: usize = 1024;

/// A tokenizer and a chat rendering. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Prompter {
    tokenizer: Tokenizer,
    chat_template: Option<Arc<ChatTemplate>>,
    /// Bounds concurrent encodings off the calling task ([`Prompter::tokenize_gated`]).
    gate: Option<TokenizeGate>,
}

/// At most `capacity` text prompts tokenized at once off their tasks, across every clone of
/// the [`Prompter`] it is given to. Cheap to clone (the permits are shared).
#[derive(Debug, Clone)]
pub struct TokenizeGate {
    permits: Arc<Semaphore>,
    capacity: usize,
}

impl TokenizeGate {
    /// `capacity` encodings at once (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            permits: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// One encoding per core the process may use (one when that is unknown).
    pub fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, usize::from))
    }

    /// How many encodings may run at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes a slot for work outside the prompter (held until dropped); `None` when every
    /// slot is busy.
    pub fn try_hold(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Encodings running now.
    pub fn in_use(&self) -> usize {
        self.capacity
            .saturating_sub(self.permits.available_permits())
    }
}

/// No tokenizer capacity came free before the request's time to wait for it ran out.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "all {capacity} tokenizer slots stayed busy for {} ms; retry later",
    waited.as_millis()
)]
pub struct TokenizerBusy {
    /// The gate's capacity.
    pub capacity: usize,
    /// How long the request waited.
    pub waited: Duration,
}

impl Prompter {
    pub fn new(tokenizer: Tokenizer, chat_template: Option<ChatTemplate>) -> Self {
        Self {
            tokenizer,
            chat_template: chat_template.map(Arc::new),
            gate: None,
        }
    }

    /// Bounds [`Prompter::tokenize_gated`]'s encodings by `gate` (shared with its clones).
    pub fn with_gate(mut self, gate: TokenizeGate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The gate of [`Prompter::tokenize_gated`], if any.
    pub fn gate(&self) -> Option<&TokenizeGate> {
        self.gate.as_ref()
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

    /// The chat prompt of a whole chat request: the template's rendering with the
    /// request's tools and template inputs, or the plain one with the tools appended.
    pub fn render(&self, body: &Map<String, Value>) -> Result<String, PromptError> {
        match &self.chat_template {
            None => render_request(body),
            Some(template) => template.render_body(body),
        }
    }

    /// Parses `bytes` as a request for `endpoint`, rendering a chat request with this
    /// prompter.
    pub fn parse(&self, endpoint: Endpoint, bytes: &[u8]) -> Result<RequestBody, PromptError> {
        RequestBody::parse_with(endpoint, bytes, |body| self.render(body))
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

    /// [`Prompter::tokenize_for`] under the gate ([`Prompter::with_gate`]): text that goes to
    /// a blocking thread first waits for one of the gate's permits, until `until`; then it is
    /// [`TokenizerBusy`]. The permit goes with the work to its thread and is released when
    /// the encoding ends, so a request dropped meanwhile (its deadline) still counts until
    /// its tokenizer work is done. Without a gate, or for ids and short text encoded on the
    /// task, as [`Prompter::tokenize_for`].
    pub async fn tokenize_gated(
        &self,
        endpoint: Endpoint,
        prompt: PromptInput,
        until: tokio::time::Instant,
    ) -> Result<Vec<u32>, TokenizerBusy> {
        let Some(gate) = &self.gate else {
            return Ok(self.tokenize_for(endpoint, prompt).await);
        };
        let parts = match prompt {
            PromptInput::Tokens(ids) => return Ok(ids),
            PromptInput::Text(parts) => parts,
        };
        let specials = endpoint == Endpoint::Completions;
        let bytes: usize = parts.iter().map(String::len).sum();
        if bytes <= INLINE_TOKENIZE_MAX_BYTES && self.tokenizer.ready() {
            return Ok(encode_parts(&self.tokenizer, &parts, specials));
        }
        let asked = tokio::time::Instant::now();
        let permit: OwnedSemaphorePermit =
            match tokio::time::timeout_at(until, gate.permits.clone().acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                // The semaphore is never closed; elapsed or closed, no capacity came free.
                Ok(Err(_)) | Err(_) => {
                    return Err(TokenizerBusy {
                        capacity: gate.capacity,
                        waited: asked.elapsed(),
                    });
                }
            };
        let tokenizer = self.tokenizer.clone();
        Ok(tokio::task::spawn_blocking(move || {
            let ids = encode_parts(&tokenizer, &parts, specials);
            drop(permit);
            ids
        })
        .await
        // The task catches the tokenizer's panics; it cannot fail.
        .unwrap_or_default())
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
    async fn gated_tokenizing_waits_for_a_permit_until_its_instant_then_is_busy() {
        let gate = TokenizeGate::new(1);
        let prompter = Prompter::default().with_gate(gate.clone());
        let long = || PromptInput::Text(vec!["word ".repeat(INLINE_TOKENIZE_MAX_BYTES)]);
        let now = tokio::time::Instant::now;
        // A free permit: tokenized, and the permit is back afterwards.
        let ids = prompter
            .tokenize_gated(Endpoint::Completions, long(), now())
            .await
            .expect("a free permit");
        assert!(!ids.is_empty());
        assert_eq!(gate.in_use(), 0);
        // Held elsewhere (as by another request's encoding): busy once its instant is reached
        // (here at once: the instant has passed).
        let held = gate.try_hold().expect("free");
        assert_eq!(gate.in_use(), 1);
        let busy = prompter
            .tokenize_gated(Endpoint::Completions, long(), now())
            .await
            .expect_err("no permit within the wait");
        assert_eq!(busy.capacity, 1);
        assert!(busy.to_string().contains("1 tokenizer slots"), "{busy}");
        // Ids and short text need no permit.
        let ids = prompter
            .tokenize_gated(
                Endpoint::Completions,
                PromptInput::Tokens(vec![1, 2]),
                now(),
            )
            .await;
        assert_eq!(ids.expect("ids"), vec![1, 2]);
        drop(held);
        assert!(
            prompter
                .tokenize_gated(Endpoint::Completions, long(), now())
                .await
                .is_ok()
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
