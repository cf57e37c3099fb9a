//! Tokenizers and the [`Prompter`]: how a request's text becomes the token ids the router
//! hashes and counts.
//!
//! A [`Tokenizer`] is tiktoken (one of the encodings built into tiktoken-rs; the default is
//! `o200k_base`) or a HuggingFace `tokenizer.json` loaded from a file (offline: no hub).
//! Either way text is plain: special-token strings such as `<|endoftext|>` are tokenized as
//! ordinary text, and no special tokens (BOS, EOS) are added around it.
//!
//! A [`Prompter`] is a tokenizer plus the chat rendering: a [`ChatTemplate`] when one is
//! configured, else the plain rendering of [`super::render_chat`]. The frontend and the
//! simulated worker share one, so both hash the same tokens. [`Prompter::default`] is
//! exactly the behaviour of [`super::tokenize`] and [`super::render_chat`].

use super::chat_template::ChatTemplate;
use super::error::ApiError;
use super::openai::{Endpoint, ParsedRequest, PromptInput, byte_pieces, render_chat};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Text up to this many bytes (all parts together) is tokenized on the calling task once the
/// tokenizer is built: that takes microseconds, less than handing the work to a blocking
/// thread and waking the task again (a mutex, a condvar and two thread wake-ups).
pub const INLINE_TOKENIZE_MAX_BYTES: usize = 1024;

/// Per tiktoken encoding (by discriminant): built yet?
static BUILT: [AtomicBool; 4] = [
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
];

/// The encodings built into tiktoken-rs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TiktokenEncoding {
    #[default]
    #[serde(rename = "o200k_base")]
    O200kBase,
    #[serde(rename = "cl100k_base")]
    Cl100kBase,
    #[serde(rename = "r50k_base")]
    R50kBase,
    #[serde(rename = "p50k_base")]
    P50kBase,
}

impl TiktokenEncoding {
    /// The encoding's name as in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
            Self::R50kBase => "r50k_base",
            Self::P50kBase => "p50k_base",
        }
    }

    /// The process-wide encoder (built once, about a second in a debug build).
    fn bpe(self) -> &'static tiktoken_rs::CoreBPE {
        let bpe = self.build();
        BUILT[self as usize].store(true, Ordering::Release);
        bpe
    }

    /// Whether the encoder is built already (then encoding short text takes microseconds).
    fn built(self) -> bool {
        BUILT[self as usize].load(Ordering::Acquire)
    }

    fn build(self) -> &'static tiktoken_rs::CoreBPE {
        match self {
            Self::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Self::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            Self::R50kBase => tiktoken_rs::r50k_base_singleton(),
            Self::P50kBase => tiktoken_rs::p50k_base_singleton(),
        }
    }
}

/// A HuggingFace tokenizer loaded from a `tokenizer.json`.
#[derive(Clone)]
pub struct HuggingFaceTokenizer {
    path: Arc<Path>,
    inner: Arc<tokenizers::Tokenizer>,
}

impl std::fmt::Debug for HuggingFaceTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HuggingFaceTokenizer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Why a tokenizer file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokenizerLoadError(String);

/// Turns plain text into token ids.
#[derive(Debug, Clone)]
pub enum Tokenizer {
    Tiktoken(TiktokenEncoding),
    HuggingFace(HuggingFaceTokenizer),
}

impl Default for Tokenizer {
    fn default() -> Self {
        Self::Tiktoken(TiktokenEncoding::default())
    }
}

impl Tokenizer {
    /// Loads a HuggingFace `tokenizer.json` (offline).
    pub fn huggingface(path: &Path) -> Result<Self, TokenizerLoadError> {
        let mut inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| TokenizerLoadError(e.to_string()))?;
        // Special-token strings in the text are ordinary text, as with tiktoken.
        inner.set_encode_special_tokens(true);
        Ok(Self::HuggingFace(HuggingFaceTokenizer {
            path: Arc::from(path),
            inner: Arc::new(inner),
        }))
    }

    /// The token ids of `text`, taken as plain text (no special tokens parsed or added).
    /// Should the HuggingFace tokenizer fail on some text, the text is counted as 4-byte
    /// pieces instead (same prefixes still give the same ids).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self {
            Self::Tiktoken(encoding) => encoding.bpe().encode_ordinary(text),
            Self::HuggingFace(hf) => match hf.inner.encode(text, false) {
                Ok(encoding) => encoding.get_ids().to_vec(),
                Err(e) => {
                    tracing::warn!(error = %e, "the tokenizer failed: counting bytes instead");
                    byte_pieces(text).collect()
                }
            },
        }
    }

    /// What the configuration calls it (`tiktoken o200k_base`, `huggingface <path>`).
    pub fn describe(&self) -> String {
        match self {
            Self::Tiktoken(encoding) => format!("tiktoken {}", encoding.name()),
            Self::HuggingFace(hf) => format!("huggingface {}", hf.path.display()),
        }
    }

    /// Builds anything built lazily (the tiktoken tables).
    fn warm(&self) {
        if let Self::Tiktoken(encoding) = self {
            let _ = encoding.bpe();
        }
    }

    /// Whether encoding is cheap now (a HuggingFace tokenizer is loaded with the config).
    fn ready(&self) -> bool {
        match self {
            Self::Tiktoken(encoding) => encoding.built(),
            Self::HuggingFace(_) => true,
        }
    }
}

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

    /// The prompt's token ids: ids given in the body as they are; text tokenized (parts of a
    /// batch one by one, concatenated) on the calling task when it is short
    /// ([`INLINE_TOKENIZE_MAX_BYTES`]) and the tokenizer is built, else on a blocking thread.
    /// If the tokenizer fails, the text is counted as 4-byte pieces instead.
    pub async fn tokenize(&self, prompt: PromptInput) -> Vec<u32> {
        match prompt {
            PromptInput::Tokens(ids) => ids,
            PromptInput::Text(parts) => {
                let bytes: usize = parts.iter().map(String::len).sum();
                let encode = |tokenizer: &Tokenizer, parts: &[String]| {
                    parts
                        .iter()
                        .flat_map(|p| tokenizer.encode(p))
                        .collect::<Vec<u32>>()
                };
                let encoded = if bytes <= INLINE_TOKENIZE_MAX_BYTES && self.tokenizer.ready() {
                    std::panic::catch_unwind(AssertUnwindSafe(|| encode(&self.tokenizer, &parts)))
                        .map_err(drop)
                } else {
                    let tokenizer = self.tokenizer.clone();
                    let owned = parts.clone();
                    tokio::task::spawn_blocking(move || encode(&tokenizer, &owned))
                        .await
                        .map_err(drop)
                };
                match encoded {
                    Ok(ids) => ids,
                    Err(()) => parts.iter().flat_map(|p| byte_pieces(p)).collect(),
                }
            }
        }
    }

    /// Builds the tokenizer's tables on a blocking thread, so the first text request does
    /// not pay for them.
    pub async fn warm(self) {
        let _ = tokio::task::spawn_blocking(move || self.tokenizer.warm()).await;
    }
}
