//! A HuggingFace `tokenizer.json` (the `tokenizers` crate, offline), in one of two modes:
//!
//! - plain (`kind = "huggingface"`): special-token strings are ordinary text and nothing is
//!   added around the text, as with tiktoken;
//! - as the engine (`model_dir`): special-token strings are their special tokens, and a
//!   completion's prompt gets the special tokens the tokenizer's post-processor adds (Llama:
//!   a BOS before it), as `tokenizer(prompt)` does in vLLM; `add_bos_token` /
//!   `add_eos_token` from `tokenizer_config.json` add or remove the BOS / EOS, as
//!   transformers does.
//!
//! Truncation and padding in the file are ignored (vLLM's tokenizer does not apply them).
//! Whether the text may be split for parallel encoding (`split.rs`) is decided at load: no
//! normalizer other than NFC, no added token that holds whitespace or strips it on its
//! right, and a probe text full of cut points tokenized cut and whole gives the same ids.
//!
//! Byte-level BPE tokenizers of the usual shapes are encoded by `hf_fast.rs` (the same ids,
//! checked at load against the crate's pipeline on a probe text), others by the crate.

use crate::hf_fast::FastHf;
use crate::split;
use crate::tokenizer::TokenizerLoadError;
use std::path::Path;
use std::sync::Arc;
use tokenizers::{
    Encoding, ModelWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior, Token,
};

/// A HuggingFace tokenizer loaded from a `tokenizer.json`. Cheap to clone.
#[derive(Clone)]
pub struct HuggingFaceTokenizer {
    describe: Arc<str>,
    inner: Arc<tokenizers::Tokenizer>,
    /// As the engine: the ids added before and after a completion's prompt.
    specials: Option<Arc<(Vec<u32>, Vec<u32>)>>,
    splittable: bool,
    /// The most bytes one token stands for, when that bounds the count ([`longest_token`]).
    longest: Option<usize>,
    /// The faster encoder, when this tokenizer has its shape and passed its self-check.
    fast: Option<Arc<FastHf>>,
}

impl std::fmt::Debug for HuggingFaceTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HuggingFaceTokenizer")
            .field("describe", &self.describe)
            .field("specials", &self.specials)
            .field("splittable", &self.splittable)
            .field("longest", &self.longest)
            .field("fast", &self.fast.is_some())
            .finish_non_exhaustive()
    }
}

/// The special-token settings of a model directory's `tokenizer_config.json`.
#[derive(Debug, Clone, Default)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
}

impl HuggingFaceTokenizer {
    /// Plain text: special-token strings are ordinary text; nothing is added.
    pub(crate) fn plain(path: &Path) -> Result<Self, TokenizerLoadError> {
        let mut inner = load(path)?;
        inner.set_encode_special_tokens(true);
        Ok(Self::new(
            format!("huggingface {}", path.display()),
            inner,
            None,
        ))
    }

    /// As the engine serving a model directory (see the module docs). `special` names the
    /// BOS / EOS and whether to add them; errors name what is wrong.
    pub(crate) fn engine(
        path: &Path,
        describe: String,
        special: &SpecialTokens,
    ) -> Result<Self, TokenizerLoadError> {
        let inner = load(path)?;
        let sentinel = Encoding::from_tokens(vec![Token::new(u32::MAX, String::new(), (0, 0))], 0);
        let processed = inner
            .post_process(sentinel, None, true)
            .map_err(|e| TokenizerLoadError(format!("the post-processor fails: {e}")))?;
        let ids = processed.get_ids();
        let at = ids.iter().position(|&id| id == u32::MAX).ok_or_else(|| {
            TokenizerLoadError("the post-processor drops the sequence".to_owned())
        })?;
        let (mut before, mut after) = (ids[..at].to_vec(), ids[at + 1..].to_vec());
        let id_of = |key: &str, token: &Option<String>| {
            let token = token.as_deref().ok_or_else(|| {
                TokenizerLoadError(format!("add_{key} is true but {key} is not set"))
            })?;
            inner.token_to_id(token).ok_or_else(|| {
                TokenizerLoadError(format!("{key} {token:?} is not in the vocabulary"))
            })
        };
        match special.add_bos_token {
            Some(true) => {
                let bos = id_of("bos_token", &special.bos_token)?;
                if before.first() != Some(&bos) {
                    before.insert(0, bos);
                }
            }
            Some(false) => {
                if let Some(bos) = special
                    .bos_token
                    .as_deref()
                    .and_then(|t| inner.token_to_id(t))
                    && before.first() == Some(&bos)
                {
                    before.remove(0);
                }
            }
            None => {}
        }
        match special.add_eos_token {
            Some(true) => {
                let eos = id_of("eos_token", &special.eos_token)?;
                if after.last() != Some(&eos) {
                    after.push(eos);
                }
            }
            Some(false) => {
                if let Some(eos) = special
                    .eos_token
                    .as_deref()
                    .and_then(|t| inner.token_to_id(t))
                    && after.last() == Some(&eos)
                {
                    after.pop();
                }
            }
            None => {}
        }
        Ok(Self::new(describe, inner, Some(Arc::new((before, after)))))
    }

    fn new(
        describe: String,
        inner: tokenizers::Tokenizer,
        specials: Option<Arc<(Vec<u32>, Vec<u32>)>>,
    ) -> Self {
        let splittable = splittable(&inner);
        let longest = longest_token(&inner);
        let fast = FastHf::build(&inner, &fast_probe_text(&inner), |text| {
            encode_plain(&inner, text).ok()
        });
        Self {
            describe: Arc::from(describe),
            inner: Arc::new(inner),
            specials,
            splittable,
            longest,
            fast: fast.map(Arc::new),
        }
    }

    /// The ids of `text`, nothing added (`hf_fast.rs` when it applies, else the crate).
    pub(crate) fn encode_plain(&self, text: &str) -> Result<Vec<u32>, tokenizers::Error> {
        match &self.fast {
            Some(fast) => Ok(fast.encode(text)),
            None => encode_plain(&self.inner, text),
        }
    }

    /// The ids of `text` from the crate's own pipeline (what `hf_fast.rs` is checked against).
    #[cfg(test)]
    pub(crate) fn encode_by_crate(&self, text: &str) -> Result<Vec<u32>, tokenizers::Error> {
        encode_plain(&self.inner, text)
    }

    /// The faster encoder, when in use.
    #[cfg(test)]
    pub(crate) fn fast(&self) -> Option<&FastHf> {
        self.fast.as_deref()
    }

    /// `ids` with the special tokens added around a completion's prompt (none when plain).
    pub(crate) fn with_specials(&self, ids: Vec<u32>) -> Vec<u32> {
        match self.specials.as_deref() {
            None => ids,
            Some((before, after)) if before.is_empty() && after.is_empty() => ids,
            Some((before, after)) => {
                let mut out = Vec::with_capacity(before.len() + ids.len() + after.len());
                out.extend_from_slice(before);
                out.extend(ids);
                out.extend_from_slice(after);
                out
            }
        }
    }

    pub(crate) fn splittable(&self) -> bool {
        self.splittable
    }

    pub(crate) fn describe(&self) -> String {
        self.describe.to_string()
    }

    /// The longest piece its pre-tokenizer cuts `text` into, in bytes, when that can be
    /// measured without the crate's pipeline (the `hf_fast.rs` shapes); `None` otherwise.
    pub(crate) fn longest_piece(&self, text: &str) -> Option<usize> {
        self.fast.as_ref().map(|fast| fast.longest_piece(text))
    }

    /// The first piece over `limit` ([`crate::Tokenizer::piece_over`]), when measurable.
    pub(crate) fn piece_over(&self, text: &str, limit: usize) -> Option<Option<usize>> {
        self.fast.as_ref().map(|fast| fast.piece_over(text, limit))
    }

    pub(crate) fn longest_token_bytes(&self) -> Option<usize> {
        self.longest
    }
}

fn load(path: &Path) -> Result<tokenizers::Tokenizer, TokenizerLoadError> {
    let mut inner =
        tokenizers::Tokenizer::from_file(path).map_err(|e| TokenizerLoadError(e.to_string()))?;
    inner
        .with_truncation(None)
        .map_err(|e| TokenizerLoadError(e.to_string()))?;
    inner.with_padding(None);
    Ok(inner)
}

fn encode_plain(inner: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>, tokenizers::Error> {
    Ok(inner.encode_fast(text, false)?.get_ids().to_vec())
}

/// The most bytes of text one token stands for, when every byte of a text ends up in exactly
/// one token: a BPE model without fused unknowns, no normalizer (which may fold text), and
/// pre-tokenizers that drop nothing (`ByteLevel`, `Digits`, a `Split` that keeps its
/// delimiters). A byte-level token's characters are one byte each; otherwise a token's text
/// is what it stands for. Added tokens stand for their content. `None` for anything else.
fn longest_token(inner: &tokenizers::Tokenizer) -> Option<usize> {
    if inner.get_normalizer().is_some() {
        return None;
    }
    let ModelWrapper::BPE(bpe) = inner.get_model() else {
        return None;
    };
    if bpe.fuse_unk {
        return None;
    }
    let mut byte_level = false;
    let mut pending: Vec<&PreTokenizerWrapper> = inner.get_pre_tokenizer().into_iter().collect();
    while let Some(pre) = pending.pop() {
        match pre {
            PreTokenizerWrapper::Sequence(seq) => pending.extend(seq.as_ref()),
            PreTokenizerWrapper::ByteLevel(_) => byte_level = true,
            PreTokenizerWrapper::Digits(_) => {}
            PreTokenizerWrapper::Split(split)
                if split.behavior != SplitDelimiterBehavior::Removed => {}
            _ => return None,
        }
    }
    let per_token = |token: &str| match byte_level {
        true => token.chars().count(),
        false => token.len(),
    };
    let model = bpe.get_vocab().keys().map(|t| per_token(t)).max()?;
    let added = inner
        .get_added_tokens_decoder()
        .values()
        .map(|t| t.content.len())
        .max()
        .unwrap_or(0);
    Some(model.max(added).max(1))
}

/// Whether cutting text at [`split::is_cut`] boundaries keeps the ids (module docs).
fn splittable(inner: &tokenizers::Tokenizer) -> bool {
    let normalizer_ok = matches!(
        inner.get_normalizer(),
        None | Some(NormalizerWrapper::NFC(_))
    );
    let added_ok = inner
        .get_added_tokens_decoder()
        .values()
        .all(|t| !t.rstrip && !t.content.contains(char::is_whitespace));
    if !normalizer_ok || !added_ok {
        return false;
    }
    let probe = probe_text();
    let whole = encode_plain(inner, &probe);
    let bytes = probe.as_bytes();
    let mut cut = Vec::new();
    let mut start = 0;
    for i in 1..bytes.len() {
        if split::is_cut(bytes, i) {
            match encode_plain(inner, &probe[start..i]) {
                Ok(ids) => cut.extend(ids),
                Err(_) => return false,
            }
            start = i;
        }
    }
    match (whole, encode_plain(inner, &probe[start..])) {
        (Ok(whole), Ok(rest)) => {
            cut.extend(rest);
            whole == cut
        }
        _ => false,
    }
}

/// What the faster encoder is checked on at load: [`probe_text`], every added token's text
/// between words and glued to them, runs of every kind of whitespace, digits and other
/// scripts.
fn fast_probe_text(inner: &tokenizers::Tokenizer) -> String {
    let mut text = probe_text();
    for token in inner.get_added_tokens_decoder().values() {
        text.push_str(&format!("x {0}y{0} {0}\n", token.content));
    }
    for ws in [
        " ", "  ", "   ", "\t", "\n", "\n\n", " \n ", "\r\n", "\u{a0} ", "\u{3000}",
    ] {
        for next in [
            "word",
            "Word",
            "123456",
            "!?",
            "'s",
            "'LL",
            "\u{e9}t\u{e9}",
            "",
        ] {
            text.push_str(&format!("x{ws}{next}"));
        }
    }
    text.push_str("na\u{ef}ve caf\u{e9} \u{417}\u{434}\u{440}\u{430}\u{432}\u{441}\u{442}\u{432}\u{443}\u{439} \u{1f600}\u{1f600}");
    text.push_str(&" ".repeat(300));
    text.push_str(&"ab".repeat(300));
    text.push_str("  end  ");
    text
}

/// Every visible ASCII character before a cut, in words, numbers, contractions, other
/// scripts and whitespace runs.
fn probe_text() -> String {
    let mut text = String::new();
    for c in (0x21u8..0x7f).map(char::from) {
        text.push_str(&format!(
            "{c} a{c} Bc {c}{c} x1{c} y\n\t{c}z  Q{c}'s t\u{e9}t\u{e9} \u{6771}\u{4eac} {c}. "
        ));
    }
    text
}
