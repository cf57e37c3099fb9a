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
//! Text is tokenized by plan (`plan.rs`): cut into chunks, each looked up in the prompter's
//! [`TokenCache`] (when it has one), so only text not seen before is encoded. Where that
//! work runs is scheduled by its size, so that a short prompt never waits behind long ones:
//! at most [`INLINE_TOKENIZE_MAX_BYTES`] on the request's own task at once; more on a
//! blocking thread, under one of the [`TokenizeGate`]'s two lanes: the *quick* lane for at
//! most [`QUICK_LANE_MAX_BYTES`], the *bulk* lane for more, each with its own slots (one per
//! core), so a burst of long prompts fills only the bulk lane. A request that finds no slot
//! in its lane before a given instant is [`TokenizerBusy`]. A slot goes with the work to its
//! thread and is released when the encoding ends, even when the request that asked for it is
//! gone. Each chunk to encode is first checked for a pre-tokenizer piece over the caller's
//! limit ([`PieceTooLong`]), which bounds one encoding's time and memory before it starts.

use crate::cache::TokenCache;
use crate::chat_template::ChatTemplate;
use crate::error::PromptError;
use crate::plan::{EncodePlan, PieceTooLong};
use crate::request::{PromptInput, RequestBody, render_chat, render_request};
use crate::tokenizer::Tokenizer;
use router_core::Endpoint;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Text left to encode up to this many bytes is encoded on the calling task once the
/// tokenizer is built: that takes tens of microseconds, less than handing the work to a
/// blocking thread and waking the task again, and it never waits for a slot.
pub const INLINE_TOKENIZE_MAX_BYTES: usize = 4 * 1024;

/// Text left to encode up to this many bytes takes the quick lane's slots; more, the bulk
/// lane's.
pub const QUICK_LANE_MAX_BYTES: usize = 64 * 1024;

/// A tokenizer and a chat rendering. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Prompter {
    tokenizer: Tokenizer,
    chat_template: Option<Arc<ChatTemplate>>,
    /// Bounds concurrent encodings off the calling task ([`Prompter::tokenize_gated`]).
    gate: Option<TokenizeGate>,
    /// The ids of chunks of text already seen, shared with its clones.
    cache: Option<Arc<TokenCache>>,
}

/// The two lanes of tokenizer work off the calling task (module docs), `capacity`
/// encodings at once in each, across every clone of the [`Prompter`] it is given to. Cheap
/// to clone (the slots are shared).
#[derive(Debug, Clone)]
pub struct TokenizeGate {
    quick: Arc<Semaphore>,
    bulk: Arc<Semaphore>,
    capacity: usize,
}

/// The lane text left to encode takes: by its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Quick,
    Bulk,
}

impl Lane {
    /// The lane of `bytes` left to encode.
    pub fn of(bytes: usize) -> Self {
        match bytes <= QUICK_LANE_MAX_BYTES {
            true => Self::Quick,
            false => Self::Bulk,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Quick => "quick",
            Self::Bulk => "bulk",
        }
    }
}

/// One slot of each lane, held for work outside the prompter ([`TokenizeGate::try_hold`]).
#[derive(Debug)]
pub struct HeldSlots {
    _quick: OwnedSemaphorePermit,
    _bulk: OwnedSemaphorePermit,
}

impl TokenizeGate {
    /// `capacity` encodings at once in each lane (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            quick: Arc::new(Semaphore::new(capacity)),
            bulk: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// One encoding per core the process may use in each lane (one when that is unknown).
    pub fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, usize::from))
    }

    /// How many encodings may run at once in each lane.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes a slot of each lane (held until dropped); `None` when a lane has none free.
    pub fn try_hold(&self) -> Option<HeldSlots> {
        Some(HeldSlots {
            _quick: self.try_hold_lane(Lane::Quick)?,
            _bulk: self.try_hold_lane(Lane::Bulk)?,
        })
    }

    /// Takes a slot of `lane` (held until dropped); `None` when it has none free.
    pub fn try_hold_lane(&self, lane: Lane) -> Option<OwnedSemaphorePermit> {
        self.lane(lane).clone().try_acquire_owned().ok()
    }

    /// Encodings running now in `lane`.
    pub fn lane_in_use(&self, lane: Lane) -> usize {
        self.capacity
            .saturating_sub(self.lane(lane).available_permits())
    }

    /// Encodings running now, in both lanes.
    pub fn in_use(&self) -> usize {
        self.lane_in_use(Lane::Quick) + self.lane_in_use(Lane::Bulk)
    }

    fn lane(&self, lane: Lane) -> &Arc<Semaphore> {
        match lane {
            Lane::Quick => &self.quick,
            Lane::Bulk => &self.bulk,
        }
    }
}

/// No tokenizer capacity came free in the request's lane before its time to wait for it ran
/// out.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "all {capacity} {} tokenizer slots stayed busy for {} ms; retry later",
    lane.label(),
    waited.as_millis()
)]
pub struct TokenizerBusy {
    /// The lane's capacity.
    pub capacity: usize,
    pub lane: Lane,
    /// How long the request waited.
    pub waited: Duration,
}

/// Why a text prompt was not tokenized.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenizeError {
    #[error(transparent)]
    Busy(#[from] TokenizerBusy),
    #[error(transparent)]
    PieceTooLong(#[from] PieceTooLong),
}

/// A prompt's ids, how long it waited for a tokenizer slot, and its text given back (a text
/// prompt's parts, for whoever sends the text on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    pub ids: Vec<u32>,
    pub waited: Duration,
    pub text: Option<Vec<String>>,
}

impl Prompter {
    pub fn new(tokenizer: Tokenizer, chat_template: Option<ChatTemplate>) -> Self {
        Self {
            tokenizer,
            chat_template: chat_template.map(Arc::new),
            gate: None,
            cache: None,
        }
    }

    /// Bounds [`Prompter::tokenize_gated`]'s encodings by `gate` (shared with its clones).
    pub fn with_gate(mut self, gate: TokenizeGate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Looks chunks of text up in `cache` before encoding them, and keeps what it encodes
    /// there (shared with its clones).
    pub fn with_cache(mut self, cache: Arc<TokenCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The gate of [`Prompter::tokenize_gated`], if any.
    pub fn gate(&self) -> Option<&TokenizeGate> {
        self.gate.as_ref()
    }

    /// The token cache, if any.
    pub fn cache(&self) -> Option<&TokenCache> {
        self.cache.as_deref()
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
    /// tokenizer's special tokens and a rendered chat prompt without; through the cache, with
    /// no gate and no piece limit (module docs).
    pub async fn tokenize_for(&self, endpoint: Endpoint, prompt: PromptInput) -> Vec<u32> {
        match self.run(endpoint, prompt, None, usize::MAX).await {
            Ok(tokenized) => tokenized.ids,
            // Without a gate or a limit neither can happen.
            Err(_) => Vec::new(),
        }
    }

    /// [`Prompter::tokenize_for`] under the gate ([`Prompter::with_gate`]), each chunk to
    /// encode checked for a piece over `max_piece` bytes first: text left to encode beyond
    /// what runs on the task waits for a slot in its lane until `until`, then it is
    /// [`TokenizerBusy`]. Without a gate, as [`Prompter::tokenize_for`] with the piece check.
    pub async fn tokenize_gated(
        &self,
        endpoint: Endpoint,
        prompt: PromptInput,
        until: tokio::time::Instant,
        max_piece: usize,
    ) -> Result<Tokenized, TokenizeError> {
        let gate = self.gate.as_ref().map(|gate| (gate, until));
        self.run(endpoint, prompt, gate, max_piece).await
    }

    async fn run(
        &self,
        endpoint: Endpoint,
        prompt: PromptInput,
        gate: Option<(&TokenizeGate, tokio::time::Instant)>,
        max_piece: usize,
    ) -> Result<Tokenized, TokenizeError> {
        let parts = match prompt {
            PromptInput::Tokens(ids) => {
                return Ok(Tokenized {
                    ids,
                    waited: Duration::ZERO,
                    text: None,
                });
            }
            PromptInput::Text(parts) => parts,
        };
        let specials = endpoint == Endpoint::Completions;
        let plan = EncodePlan::new(&self.tokenizer, self.cache(), parts, specials);
        let left = plan.miss_bytes();
        if left <= INLINE_TOKENIZE_MAX_BYTES && self.tokenizer.ready() {
            let (ids, text) = plan.finish(&self.tokenizer, self.cache(), max_piece)?;
            return Ok(Tokenized {
                ids,
                waited: Duration::ZERO,
                text: Some(text),
            });
        }
        let asked = tokio::time::Instant::now();
        let slot = match gate {
            None => None,
            Some((gate, until)) => {
                let lane = Lane::of(left);
                let acquire = gate.lane(lane).clone().acquire_owned();
                match tokio::time::timeout_at(until, acquire).await {
                    Ok(Ok(slot)) => Some(slot),
                    // The semaphores are never closed; elapsed or closed, no slot came free.
                    Ok(Err(_)) | Err(_) => {
                        return Err(TokenizerBusy {
                            capacity: gate.capacity,
                            lane,
                            waited: asked.elapsed(),
                        }
                        .into());
                    }
                }
            }
        };
        let waited = asked.elapsed();
        let tokenizer = self.tokenizer.clone();
        let cache = self.cache.clone();
        let (ids, text) = tokio::task::spawn_blocking(move || {
            let encoded = plan.finish(&tokenizer, cache.as_deref(), max_piece);
            drop(slot);
            encoded
        })
        .await
        // The encoding catches the tokenizer's panics; only a runtime shutting down fails it.
        .unwrap_or_else(|_| Ok((Vec::new(), Vec::new())))?;
        Ok(Tokenized {
            ids,
            waited,
            text: Some(text),
        })
    }

    /// Builds the tokenizer's tables on a blocking thread, so the first text request does
    /// not pay for them.
    pub async fn warm(self) {
        let _ = tokio::task::spawn_blocking(move || self.tokenizer.warm()).await;
    }
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

    /// Text of `bytes` bytes (words), beyond what is tokenized on the task.
    fn text(bytes: usize) -> PromptInput {
        PromptInput::Text(vec!["word ".repeat(bytes / 5)])
    }

    #[tokio::test]
    async fn gated_tokenizing_waits_for_a_slot_in_its_lane_until_its_instant_then_is_busy() {
        let gate = TokenizeGate::new(1);
        let prompter = Prompter::default().with_gate(gate.clone());
        let quick = || text(4 * INLINE_TOKENIZE_MAX_BYTES);
        let now = tokio::time::Instant::now;
        let gated = |prompt| prompter.tokenize_gated(Endpoint::Completions, prompt, now(), 1024);
        // A free slot: tokenized, and the slot is back afterwards.
        let ids = gated(quick()).await.expect("a free slot").ids;
        assert!(!ids.is_empty());
        assert_eq!(gate.in_use(), 0);
        // Held elsewhere (as by another request's encoding): busy once its instant is reached
        // (here at once: the instant has passed).
        let held = gate.try_hold().expect("free");
        assert_eq!(gate.in_use(), 2);
        let Err(TokenizeError::Busy(busy)) = gated(quick()).await else {
            panic!("no slot within the wait");
        };
        assert_eq!((busy.capacity, busy.lane), (1, Lane::Quick));
        assert!(
            busy.to_string().contains("1 quick tokenizer slots"),
            "{busy}"
        );
        // Ids and short text need no slot.
        let ids = gated(PromptInput::Tokens(vec![1, 2])).await.expect("ids");
        assert_eq!(ids.ids, vec![1, 2]);
        assert!(gated(text(1000)).await.is_ok());
        drop(held);
        assert!(gated(quick()).await.is_ok());
        // A piece over the limit is refused, whatever the lane.
        let marked = PromptInput::Text(vec!["a\u{301}".repeat(2000)]);
        let Err(TokenizeError::PieceTooLong(piece)) = gated(marked).await else {
            panic!("a 6000-byte piece");
        };
        assert_eq!(piece.limit, 1024);
    }

    #[tokio::test]
    async fn a_burst_of_long_prompts_fills_the_bulk_lane_only() {
        let gate = TokenizeGate::new(1);
        let prompter = Prompter::default().with_gate(gate.clone());
        let now = tokio::time::Instant::now;
        let gated = |prompt| prompter.tokenize_gated(Endpoint::Chat, prompt, now(), 1024);
        let bulk = gate.try_hold_lane(Lane::Bulk).expect("free");
        assert_eq!(Lane::of(QUICK_LANE_MAX_BYTES + 1), Lane::Bulk);
        let Err(TokenizeError::Busy(busy)) = gated(text(QUICK_LANE_MAX_BYTES * 2)).await else {
            panic!("the bulk lane is full");
        };
        assert_eq!(busy.lane, Lane::Bulk);
        // A short prompt goes by in the quick lane.
        assert!(gated(text(QUICK_LANE_MAX_BYTES / 2)).await.is_ok());
        drop(bulk);
    }

    #[tokio::test]
    async fn text_the_cache_holds_needs_no_slot() {
        let gate = TokenizeGate::new(1);
        let cache = Arc::new(TokenCache::new(64 << 20));
        let prompter = Prompter::default()
            .with_gate(gate.clone())
            .with_cache(cache.clone());
        let now = tokio::time::Instant::now;
        let long = || text(QUICK_LANE_MAX_BYTES * 3);
        let first = prompter
            .tokenize_gated(Endpoint::Chat, long(), now(), 1024)
            .await
            .expect("a free slot");
        let held = gate.try_hold().expect("free");
        let again = prompter
            .tokenize_gated(Endpoint::Chat, long(), now(), 1024)
            .await
            .expect("every chunk cached: encoded on the task");
        assert_eq!(first.ids, again.ids);
        assert_eq!(
            first.ids,
            Prompter::default()
                .tokenize_for(Endpoint::Chat, long())
                .await
        );
        assert!(cache.stats().hit_bytes >= (QUICK_LANE_MAX_BYTES * 3 - 5) as u64);
        drop(held);
    }

    #[tokio::test]
    async fn short_text_on_the_task_and_long_text_on_a_blocking_thread_tokenize_alike() {
        Prompter::default().warm().await;
        let bpe = tiktoken_rs::o200k_base_singleton();
        let short = "The quick brown fox jumps over the lazy dog. ".repeat(4);
        let long = short.repeat(64);
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
