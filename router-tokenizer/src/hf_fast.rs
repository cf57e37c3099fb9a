//! A faster encoder for the usual HuggingFace byte-level BPE `tokenizer.json` (GPT-2, Llama 3,
//! Qwen 2 shapes): the same ids as the `tokenizers` crate's pipeline, without its costs.
//!
//! The crate runs its split regex on onig and keeps an offset-tracking string per piece, then
//! merges each piece through its BPE model with a token string per result. Here, for a
//! tokenizer with no normalizer, a pre-tokenizer that is `Split(one of the known patterns,
//! Isolated)` then `ByteLevel` without its own regex (or `ByteLevel` with the GPT-2 regex),
//! and a BPE model over the 256 byte-level characters without a subword prefix, suffix or
//! dropout, each step is redone on plain bytes:
//!
//! 1. added tokens are cut out as the crate does (two leftmost-longest passes: tokens matched
//!    on the raw text, then, in what is left, tokens matched on normalized text; special ones
//!    skipped when the tokenizer is plain, their region still consumed);
//! 2. the rest is split by [`Splitter`] (the pattern on `regex-automata`);
//! 3. each piece's bytes are looked up whole (when the model ignores merges for whole-vocab
//!    words) or merged pair by pair in rank order, lowest rank then leftmost first, exactly as
//!    the crate's `Word::merge_all` does, over the model's own vocabulary and merges (read
//!    back from the loaded model).
//!
//! The encoder is used only when a probe text (every added token, the split probe, varied
//! scripts and whitespace) gives the crate's ids; else the crate's pipeline runs.

use crate::pretokenize::{self, Splitter};
use aho_corasick::{AhoCorasick, MatchKind};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tokenizers::pre_tokenizers::split::SplitPattern;
use tokenizers::{ModelWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

/// The faster encoder of one loaded tokenizer (module docs).
pub(crate) struct FastHf {
    splitter: Splitter,
    /// Every vocabulary token as the bytes it stands for, when whole pieces are looked up.
    words: FxHashMap<Box<[u8]>, u32>,
    byte_ids: [u32; 256],
    /// (left, right) -> (rank, merged id).
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// Added tokens matched on the raw text, then those matched on normalized text.
    added: [AddedTrie; 2],
}

impl std::fmt::Debug for FastHf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastHf")
            .field("words", &self.words.len())
            .field("merges", &self.merges.len())
            .finish_non_exhaustive()
    }
}

/// The model's vocabulary and merges, as the crate serializes them (merges in rank order).
#[derive(serde::Deserialize)]
struct ModelDump {
    vocab: FxHashMap<String, u32>,
    merges: Vec<(String, String)>,
}

impl FastHf {
    /// The encoder for `inner` when it has the supported shape and passes the self-check
    /// against `reference` (the crate's ids of a text) on `probe`.
    pub(crate) fn build(
        inner: &tokenizers::Tokenizer,
        probe: &str,
        reference: impl Fn(&str) -> Option<Vec<u32>>,
    ) -> Option<Self> {
        if inner.get_normalizer().is_some() {
            return None;
        }
        let splitter = Splitter::new(split_pattern(inner.get_pre_tokenizer()?)?)?;
        let ModelWrapper::BPE(bpe) = inner.get_model() else {
            return None;
        };
        if bpe.dropout.is_some_and(|d| d > 0.0)
            || bpe.continuing_subword_prefix.is_some()
            || bpe.end_of_word_suffix.is_some()
        {
            return None;
        }
        let dump: ModelDump = serde_json::to_value(bpe)
            .and_then(serde_json::from_value)
            .ok()?;
        let to_byte = byte_of_char();
        let as_bytes = |token: &str| -> Option<Box<[u8]>> {
            token.chars().map(|c| to_byte.get(&c).copied()).collect()
        };
        let mut words = FxHashMap::default();
        words.reserve(dump.vocab.len());
        for (token, &id) in &dump.vocab {
            if let Some(bytes) = as_bytes(token) {
                words.insert(bytes, id);
            }
        }
        let mut byte_ids = [0u32; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = *words.get(&[b as u8][..])?;
        }
        let mut merges = FxHashMap::default();
        merges.reserve(dump.merges.len());
        for (rank, (a, b)) in dump.merges.iter().enumerate() {
            let id = |t: &str| dump.vocab.get(t).copied();
            if let (Some(a_id), Some(b_id), Some(new)) = (id(a), id(b), id(&format!("{a}{b}"))) {
                merges.insert((a_id, b_id), (u32::try_from(rank).ok()?, new));
            }
        }
        if !bpe.ignore_merges {
            words = FxHashMap::default();
        }
        let fast = Self {
            splitter,
            words,
            byte_ids,
            merges,
            added: AddedTrie::build(inner)?,
        };
        (Some(fast.encode(probe)) == reference(probe)).then_some(fast)
    }

    /// The ids of `text`, nothing added around it: the crate's `encode(text, false)`.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let mut scratch = Scratch::default();
        self.added[0].split(text, &mut |segment| match segment {
            Segment::Added(id) => ids.push(id),
            Segment::Text(rest) => self.added[1].split(rest, &mut |segment| match segment {
                Segment::Added(id) => ids.push(id),
                Segment::Text(text) => self.splitter.split(text, |piece| {
                    self.piece(piece.as_bytes(), &mut ids, &mut scratch)
                }),
            }),
        });
        ids
    }

    /// The longest piece [`Self::encode`] would merge in `text`, in bytes: the same cuts
    /// (added tokens, then the split pattern), without merging.
    pub(crate) fn longest_piece(&self, text: &str) -> usize {
        let mut longest = 0;
        self.texts(text, &mut |text| {
            longest = longest.max(self.splitter.longest_piece(text));
            false
        });
        longest
    }

    /// The first piece [`Self::encode`] would merge that is longer than `limit`, by a lower
    /// bound of its length.
    pub(crate) fn piece_over(&self, text: &str, limit: usize) -> Option<usize> {
        let mut over = None;
        self.texts(text, &mut |text| {
            over = over.or_else(|| self.splitter.piece_over(text, limit));
            over.is_some()
        });
        over
    }

    /// Calls `each` with the text between added tokens (both passes) until it says stop.
    fn texts(&self, text: &str, each: &mut impl FnMut(&str) -> bool) {
        let mut stop = false;
        self.added[0].split(text, &mut |segment| {
            if let (false, Segment::Text(rest)) = (stop, segment) {
                self.added[1].split(rest, &mut |segment| {
                    if let (false, Segment::Text(text)) = (stop, segment) {
                        stop = each(text);
                    }
                });
            }
        });
    }

    fn piece(&self, bytes: &[u8], ids: &mut Vec<u32>, scratch: &mut Scratch) {
        if let Some(&id) = self.words.get(bytes) {
            ids.push(id);
            return;
        }
        if let [b] = bytes {
            ids.push(self.byte_ids[usize::from(*b)]);
            return;
        }
        scratch.merge(bytes, &self.byte_ids, &self.merges);
        ids.extend(scratch.symbols.iter().filter(|s| s.alive).map(|s| s.id));
    }
}

/// Reused buffers of one encoding.
#[derive(Default)]
struct Scratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Reverse<(u32, usize, u32)>>,
}

#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: Option<usize>,
    next: Option<usize>,
    alive: bool,
}

impl Scratch {
    /// `bytes` merged as the crate's `Word::merge_all` does: the queued pair of lowest
    /// (rank, position) first; an entry whose pair has changed since is dropped.
    fn merge(
        &mut self,
        bytes: &[u8],
        byte_ids: &[u32; 256],
        merges: &FxHashMap<(u32, u32), (u32, u32)>,
    ) {
        let n = bytes.len();
        self.symbols.clear();
        self.symbols
            .extend(bytes.iter().enumerate().map(|(i, &b)| Symbol {
                id: byte_ids[usize::from(b)],
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
                alive: true,
            }));
        self.queue.clear();
        for (pos, pair) in self.symbols.windows(2).enumerate() {
            if let Some(&(rank, new)) = merges.get(&(pair[0].id, pair[1].id)) {
                self.queue.push(Reverse((rank, pos, new)));
            }
        }
        let symbols = &mut self.symbols;
        while let Some(Reverse((_, pos, new))) = self.queue.pop() {
            let left = symbols[pos];
            let Some(next) = left.next.filter(|_| left.alive) else {
                continue;
            };
            let right = symbols[next];
            if merges
                .get(&(left.id, right.id))
                .is_none_or(|&(_, id)| id != new)
            {
                continue;
            }
            symbols[pos].id = new;
            symbols[pos].next = right.next;
            symbols[next].alive = false;
            if let Some(after) = right.next {
                symbols[after].prev = Some(pos);
            }
            if let Some(prev) = left.prev
                && let Some(&(rank, id)) = merges.get(&(symbols[prev].id, new))
            {
                self.queue.push(Reverse((rank, prev, id)));
            }
            if let Some(after) = right.next
                && let Some(&(rank, id)) = merges.get(&(new, symbols[after].id))
            {
                self.queue.push(Reverse((rank, pos, id)));
            }
        }
    }
}

/// A piece of text between added tokens, or an added token's id.
enum Segment<'t> {
    Text(&'t str),
    Added(u32),
}

/// The added tokens of one pass (module docs, step 1).
struct AddedTrie {
    trie: Option<AhoCorasick>,
    ids: Vec<u32>,
    /// Found but left in the text (special tokens of a plain tokenizer).
    skip: Vec<bool>,
}

impl AddedTrie {
    /// The raw-text and normalized-text passes; `None` when an added token strips spaces,
    /// must be a single word, or shares its text with another (the crate's rules for those
    /// are not redone here).
    fn build(inner: &tokenizers::Tokenizer) -> Option<[Self; 2]> {
        let vocabulary = inner.get_added_vocabulary();
        let skip_special = inner.get_encode_special_tokens();
        let mut tokens: Vec<_> = inner.get_added_tokens_decoder().into_iter().collect();
        tokens.sort_by_key(|(id, _)| *id);
        let mut seen = std::collections::HashSet::new();
        let mut passes: [(Vec<String>, Vec<u32>, Vec<bool>); 2] = Default::default();
        for (id, token) in tokens {
            if token.lstrip || token.rstrip || token.single_word {
                return None;
            }
            if token.content.is_empty() {
                continue;
            }
            if !seen.insert(token.content.clone()) {
                return None;
            }
            let skip = skip_special && vocabulary.is_special_token(&token.content);
            let pass = &mut passes[usize::from(token.normalized)];
            pass.0.push(token.content);
            pass.1.push(id);
            pass.2.push(skip);
        }
        let [raw, normalized] = passes;
        Some([Self::new(raw)?, Self::new(normalized)?])
    }

    fn new((contents, ids, skip): (Vec<String>, Vec<u32>, Vec<bool>)) -> Option<Self> {
        let trie = match contents.is_empty() {
            true => None,
            false => Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&contents)
                    .ok()?,
            ),
        };
        Some(Self { trie, ids, skip })
    }

    fn split<'t>(&self, text: &'t str, each: &mut impl FnMut(Segment<'t>)) {
        let Some(trie) = &self.trie else {
            each(Segment::Text(text));
            return;
        };
        let mut start = 0;
        for found in trie.find_iter(text) {
            let pattern = found.pattern().as_usize();
            if self.skip[pattern] {
                continue;
            }
            if start < found.start() {
                each(Segment::Text(&text[start..found.start()]));
            }
            each(Segment::Added(self.ids[pattern]));
            start = found.end();
        }
        if start < text.len() {
            each(Segment::Text(&text[start..]));
        }
    }
}

/// The split pattern of a supported pre-tokenizer (module docs).
fn split_pattern(pre: &PreTokenizerWrapper) -> Option<&str> {
    match pre {
        PreTokenizerWrapper::ByteLevel(b) if b.use_regex && !b.add_prefix_space => {
            Some(pretokenize::GPT2)
        }
        PreTokenizerWrapper::Sequence(seq) => match seq.as_ref() {
            [
                PreTokenizerWrapper::Split(split),
                PreTokenizerWrapper::ByteLevel(b),
            ] if !b.use_regex
                && !b.add_prefix_space
                && !split.invert
                && split.behavior == SplitDelimiterBehavior::Isolated =>
            {
                match &split.pattern {
                    SplitPattern::Regex(pattern) => Some(pattern),
                    SplitPattern::String(_) => None,
                }
            }
            _ => None,
        },
        _ => None,
    }
}

/// GPT-2's byte-to-character table, reversed: which byte a byte-level character stands for.
fn byte_of_char() -> FxHashMap<char, u8> {
    let visible = |b: u8| matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
    let mut map = FxHashMap::default();
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let c = match visible(b) {
            true => char::from(b),
            false => {
                shifted += 1;
                char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
            }
        };
        map.insert(c, b);
    }
    map
}
