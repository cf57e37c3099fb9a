//! A faster `o200k_base` (the default tokenizer): the same pieces and ids as tiktoken-rs,
//! without its fancy-regex pre-tokenizer.
//!
//! tiktoken's pattern ends in `\s+(?!\S)|\s+`, a look-ahead the `regex` crate cannot run, so
//! tiktoken-rs runs the whole pattern on fancy-regex's backtracking engine, which is most of
//! its cost. Here the pattern runs on `regex-automata` with the look-ahead taken by hand
//! (`pretokenize.rs`'s [`Splitter`]). Pieces are looked up in the ranks read back from
//! tiktoken-rs's encoder and merged with its `byte_pair_split`. When the pattern is not the
//! expected one, or a self-check at build differs from tiktoken-rs, tiktoken-rs is used.

use crate::pretokenize::Splitter;
use rustc_hash::FxHashMap;
use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

/// Every rank of `o200k_base`, its special tokens included (skipped).
const RANKS: u32 = 200_019;

/// The encoder, built on first use; `None` when tiktoken-rs must be used.
pub(crate) fn fast() -> Option<&'static FastO200k> {
    static FAST: OnceLock<Option<FastO200k>> = OnceLock::new();
    FAST.get_or_init(FastO200k::build).as_ref()
}

pub(crate) struct FastO200k {
    splitter: Splitter,
    ranks: FxHashMap<Vec<u8>, u32>,
    core: &'static CoreBPE,
}

impl std::fmt::Debug for FastO200k {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastO200k")
            .field("ranks", &self.ranks.len())
            .finish_non_exhaustive()
    }
}

impl FastO200k {
    fn build() -> Option<Self> {
        let splitter = Splitter::new(tiktoken_rs::O200K_BASE_PAT_STR)?;
        let core = tiktoken_rs::o200k_base_singleton();
        let specials = core.special_tokens();
        let mut ranks = FxHashMap::default();
        ranks.reserve(RANKS as usize);
        for rank in 0..RANKS {
            if let Ok(bytes) = core.decode_bytes(&[rank])
                && !std::str::from_utf8(&bytes).is_ok_and(|s| specials.contains(s))
            {
                ranks.insert(bytes, rank);
            }
        }
        let fast = Self {
            splitter,
            ranks,
            core,
        };
        let probe = self_check_text();
        (fast.encode(&probe) == core.encode_ordinary(&probe)).then_some(fast)
    }

    /// The ids of `text`, as `CoreBPE::encode_ordinary` gives them.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        self.splitter
            .split(text, |piece| self.piece(piece, &mut ids));
        ids
    }

    fn piece(&self, piece: &str, ids: &mut Vec<u32>) {
        let bytes = piece.as_bytes();
        if let Some(&rank) = self.ranks.get(bytes) {
            ids.push(rank);
            return;
        }
        // tiktoken merges long pieces another way (same result); leave those to it.
        if bytes.len() > 1 && bytes.len() < 100 {
            let parts = tiktoken_rs::byte_pair_split(bytes, &self.ranks);
            let start = ids.len();
            for part in parts {
                match self.ranks.get(part) {
                    Some(&rank) => ids.push(rank),
                    None => {
                        ids.truncate(start);
                        break;
                    }
                }
            }
            if ids.len() > start {
                return;
            }
        }
        ids.extend(self.core.encode_ordinary(piece));
    }
}

/// Whitespace runs of every kind before letters, digits, punctuation and the end; words of
/// several scripts with contractions; digits runs; a long piece.
fn self_check_text() -> String {
    let mut text = String::from("Hello, world! It's 2026: naïve café, Zürich, 東京, привет 😀.\n");
    for ws in [
        " ", "  ", "\t", " \t ", "\n", "\n\n", " \n ", "\r\n", "\u{a0} ", "\u{3000}",
    ] {
        for next in ["word", "Word", "123", "!?", "'s", "é"] {
            text.push_str(&format!("x{ws}{next}"));
        }
    }
    text.push_str(&"-".repeat(150));
    text.push_str("  end  ");
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_faster_encoder_passes_its_self_check() {
        let fast = super::fast().expect("the pattern is the expected one and the check passes");
        let text = "Hello  world,\n\n  it's  東京 123456 !!";
        let expected = tiktoken_rs::o200k_base_singleton().encode_ordinary(text);
        assert_eq!(fast.encode(text), expected);
    }
}
