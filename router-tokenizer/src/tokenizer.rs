//! Tokenizers: how text becomes the token ids the router hashes and counts.
//!
//! A [`Tokenizer`] is tiktoken (one of the encodings built into tiktoken-rs; the default is
//! `o200k_base`) or a HuggingFace `tokenizer.json` loaded from a file (offline: no hub).
//!
//! Special tokens: with tiktoken and with `kind = "huggingface"` text is plain: special-token
//! strings such as `<|endoftext|>` are tokenized as ordinary text, and no special tokens (BOS,
//! EOS) are added around it. A tokenizer loaded from a model directory
//! ([`crate::Prompter::from_model_dir`], `huggingface.rs`) tokenizes as vLLM does:
//! special-token strings in the text are their special tokens, and [`Tokenizer::encode_with_specials`] (a
//! completion's prompt) adds the tokenizer's own special tokens (its post-processor's, e.g.
//! Llama's BOS) while [`Tokenizer::encode`] (a rendered chat prompt) adds none.
//!
//! Long text is cut at boundaries no pre-tokenizer piece crosses and the pieces are encoded
//! in parallel (`split.rs`); the ids are the same as encoding the text whole. `o200k_base`
//! runs its pre-tokenizer on the `regex` crate (`o200k.rs`), with tiktoken-rs's ids; so do
//! byte-level BPE `tokenizer.json` files of the usual shapes (`hf_fast.rs`), with the
//! `tokenizers` crate's ids.

use crate::huggingface::HuggingFaceTokenizer;
use crate::o200k;
use crate::pretokenize::{self, Splitter};
use crate::request::byte_pieces;
use crate::split;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Per tiktoken encoding (by discriminant): built yet?
static BUILT: [AtomicBool; 4] = [
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
];

/// Per tiktoken encoding (by discriminant): the most bytes one token stands for, once known.
static LONGEST: [OnceLock<usize>; 4] = [const { OnceLock::new() }; 4];

/// Every rank of the encodings built into tiktoken-rs is below this (o200k_base: 200,019).
const RANK_SPACE: u32 = 1 << 18;

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

    /// The ids of `text` (`o200k_base` through [`o200k`]'s faster pre-tokenizer). The first
    /// call builds the process-wide encoder (about a second in a debug build).
    fn encode(self, text: &str) -> Vec<u32> {
        let ids = match (self, o200k_fast(self)) {
            (_, Some(fast)) => fast.encode(text),
            _ => self.build().encode_ordinary(text),
        };
        BUILT[self as usize].store(true, Ordering::Release);
        ids
    }

    /// Whether the encoder is built already (then encoding short text takes microseconds).
    fn built(self) -> bool {
        BUILT[self as usize].load(Ordering::Acquire)
    }

    /// The most bytes one token stands for (128 for each built-in encoding): computed from
    /// the vocabulary by [`Self::learn_longest_token`]; `None` until then.
    fn longest_token_bytes(self) -> Option<usize> {
        LONGEST[self as usize].get().copied()
    }

    /// Reads the vocabulary for [`Self::longest_token_bytes`] (a fraction of a second).
    fn learn_longest_token(self) {
        LONGEST[self as usize].get_or_init(|| {
            let core = self.build();
            (0..RANK_SPACE)
                .filter_map(|rank| core.decode_bytes(&[rank]).ok())
                .map(|bytes| bytes.len())
                .max()
                .unwrap_or(1)
        });
    }

    /// The splitter of this encoding's pre-tokenizer pieces. `o200k_base` runs its own
    /// pattern; `cl100k_base` is measured with Llama 3's pattern and `r50k_base` /
    /// `p50k_base` with GPT-2's: the same pieces, written without tiktoken's possessive
    /// quantifiers (`pretokenize.rs`). `None` should a splitter not build.
    fn splitter(self) -> Option<&'static Splitter> {
        static SPLITTERS: [OnceLock<Option<Splitter>>; 4] = [const { OnceLock::new() }; 4];
        let pattern = match self {
            Self::O200kBase => tiktoken_rs::O200K_BASE_PAT_STR,
            Self::Cl100kBase => pretokenize::LLAMA3,
            Self::R50kBase | Self::P50kBase => pretokenize::GPT2,
        };
        SPLITTERS[self as usize]
            .get_or_init(|| Splitter::new(pattern))
            .as_ref()
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

/// Why a tokenizer file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokenizerLoadError(pub(crate) String);

/// Turns text into token ids.
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
    /// Loads a HuggingFace `tokenizer.json` (offline); text is plain (no special tokens parsed
    /// or added).
    pub fn huggingface(path: &std::path::Path) -> Result<Self, TokenizerLoadError> {
        HuggingFaceTokenizer::plain(path).map(Self::HuggingFace)
    }

    /// The token ids of `text` without special tokens added around it (a rendered chat
    /// prompt, which carries its own). Long text is encoded in parallel pieces, with the
    /// same result as [`Tokenizer::encode_whole`]. Should the HuggingFace tokenizer fail on
    /// some text, the text is counted as 4-byte pieces instead (same prefixes still give the
    /// same ids).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_as(text, false)
    }

    /// The token ids of a completion's prompt: as [`Tokenizer::encode`], plus the special
    /// tokens the tokenizer adds to a sequence (its post-processor's, e.g. a BOS) when it was
    /// loaded from a model directory, as vLLM does for `/v1/completions`. Other tokenizers
    /// add none.
    pub fn encode_with_specials(&self, text: &str) -> Vec<u32> {
        self.encode_as(text, true)
    }

    /// [`Tokenizer::encode`] in one piece on this thread (what the split is checked
    /// against, and the benchmark's baseline).
    pub fn encode_whole(&self, text: &str) -> Vec<u32> {
        self.encode_piece(text)
    }

    fn encode_as(&self, text: &str, specials: bool) -> Vec<u32> {
        let body = match self.splits_long_text() {
            true => split::encode_parallel(text, |piece| self.encode_piece(piece)),
            false => self.encode_piece(text),
        };
        match specials {
            true => self.with_specials(body),
            false => body,
        }
    }

    /// `body` with the special tokens this tokenizer adds around a sequence (a tokenizer
    /// loaded from a model directory; none for the others).
    pub(crate) fn with_specials(&self, body: Vec<u32>) -> Vec<u32> {
        match self {
            Self::HuggingFace(hf) => hf.with_specials(body),
            Self::Tiktoken(_) => body,
        }
    }

    /// One piece, no special tokens added.
    fn encode_piece(&self, text: &str) -> Vec<u32> {
        match self {
            Self::Tiktoken(encoding) => encoding.encode(text),
            Self::HuggingFace(hf) => hf.encode_plain(text).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the tokenizer failed: counting bytes instead");
                byte_pieces(text).collect()
            }),
        }
    }

    /// Whether long text is cut at `split.rs`'s boundaries and encoded in parallel: always
    /// for tiktoken (its patterns never put a space before a letter into the piece before
    /// it); for a HuggingFace tokenizer when it was found to cut there (`huggingface.rs`).
    pub fn splits_long_text(&self) -> bool {
        match self {
            Self::Tiktoken(_) => true,
            Self::HuggingFace(hf) => hf.splittable(),
        }
    }

    /// What the configuration calls it (`tiktoken o200k_base`, `huggingface <path>`).
    pub fn describe(&self) -> String {
        match self {
            Self::Tiktoken(encoding) => format!("tiktoken {}", encoding.name()),
            Self::HuggingFace(hf) => hf.describe(),
        }
    }

    /// The most bytes of text one token stands for, when this tokenizer turns every byte
    /// of a text into part of exactly one token: a text of `n` bytes then has at least
    /// `ceil(n / this)` tokens (`limits.rs`). tiktoken: from its vocabulary, once
    /// [`Self::warm`] has read it (`None` before); a HuggingFace tokenizer: only for a
    /// byte-level BPE without a normalizer (`huggingface.rs`).
    pub fn longest_token_bytes(&self) -> Option<usize> {
        match self {
            Self::Tiktoken(encoding) => encoding.longest_token_bytes(),
            Self::HuggingFace(hf) => hf.longest_token_bytes(),
        }
    }

    /// The longest piece this tokenizer's pre-tokenizer cuts `text` into, in bytes: the
    /// longest stretch one BPE merge runs over, whose time and memory grow with it (tiktoken's
    /// merge keeps some 50 bytes per byte of a piece; a piece cannot be encoded in parallel
    /// parts). Measured by running the pre-tokenizer's own split pattern on `regex-automata`
    /// (linear in the text, nothing kept): every tiktoken encoding, and a HuggingFace
    /// tokenizer of the `hf_fast.rs` shapes (its added tokens cut first, as it encodes).
    /// `None` for other HuggingFace pre-tokenizers, whose pieces [`crate::longest_run`]
    /// bounds instead.
    pub fn longest_piece(&self, text: &str) -> Option<usize> {
        match self {
            Self::Tiktoken(encoding) => encoding.splitter().map(|s| s.longest_piece(text)),
            Self::HuggingFace(hf) => hf.longest_piece(text),
        }
    }

    /// The first piece of `text` longer than `limit` bytes, by a lower bound of its length
    /// (each piece read up to a few bytes past the limit), or `None` when none is:
    /// [`Self::longest_piece`]'s pieces, stopping at the first one over; for a
    /// tokenizer whose pieces cannot be measured, the first run of [`crate::longest_run`]
    /// over it. Text of at most `limit` bytes is not scanned.
    pub fn piece_over(&self, text: &str, limit: usize) -> Option<usize> {
        if text.len() <= limit {
            return None;
        }
        let measured = match self {
            Self::Tiktoken(encoding) => encoding.splitter().map(|s| s.piece_over(text, limit)),
            Self::HuggingFace(hf) => hf.piece_over(text, limit),
        };
        measured.unwrap_or_else(|| Some(crate::longest_run(text)).filter(|&run| run > limit))
    }

    /// Builds anything built lazily (the tiktoken tables and their longest token, the
    /// split pattern of the piece check and its search states for common text); a fraction
    /// of a second, on the calling thread.
    pub fn warm(&self) {
        if let Self::Tiktoken(encoding) = self {
            let _ = encoding.encode("");
            encoding.learn_longest_token();
        }
        let sample = "Warm-up: the quick brown fox's 1234 jumps — naïve café, 東京 🚀\n".repeat(16);
        let _ = self.piece_over(&sample, 8);
    }

    /// Whether encoding is cheap now (a HuggingFace tokenizer is loaded with the config).
    pub(crate) fn ready(&self) -> bool {
        match self {
            Self::Tiktoken(encoding) => encoding.built(),
            Self::HuggingFace(_) => true,
        }
    }
}

fn o200k_fast(encoding: TiktokenEncoding) -> Option<&'static o200k::FastO200k> {
    match encoding {
        TiktokenEncoding::O200kBase => o200k::fast(),
        _ => None,
    }
}
