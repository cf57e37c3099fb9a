//! A faster `o200k_base` (the default tokenizer): the same pieces and ids as tiktoken-rs,
//! without its fancy-regex pre-tokenizer.
//!
//! tiktoken's pattern ends in `\s+(?!\S)|\s+`, a look-ahead the `regex` crate cannot run, so
//! tiktoken-rs runs the whole pattern on fancy-regex's backtracking engine, which is most of
//! its cost. Here the pattern runs on `regex-automata` (the `regex` crate's engine, anchored at
//! each piece's start) with `\s+` in place of both, and the
//! look-ahead is applied after the match: a whitespace match (one without `\r` / `\n`, which
//! only the earlier `\s*[\r\n]+` takes) of two or more characters followed by more text gives
//! back its last character, as `\s+(?!\S)` does by backtracking; that character then starts
//! the next match (a word's leading space). Pieces are looked up in the ranks read back from
//! tiktoken-rs's encoder and merged with its `byte_pair_split`. When the pattern is not the
//! expected one, or a self-check at build differs from tiktoken-rs, tiktoken-rs is used.

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};
use rustc_hash::FxHashMap;
use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

/// tiktoken's look-ahead tail of the pattern, replaced here.
const TAIL: &str = r"|\s+(?!\S)|\s+";
/// Every rank of `o200k_base`, its special tokens included (skipped).
const RANKS: u32 = 200_019;

/// The encoder, built on first use; `None` when tiktoken-rs must be used.
pub(super) fn fast() -> Option<&'static FastO200k> {
    static FAST: OnceLock<Option<FastO200k>> = OnceLock::new();
    FAST.get_or_init(FastO200k::build).as_ref()
}

pub(super) struct FastO200k {
    regex: Regex,
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
        let pattern = tiktoken_rs::O200K_BASE_PAT_STR.strip_suffix(TAIL)?;
        let regex = Regex::new(&format!(r"{pattern}|\s+")).ok()?;
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
        let fast = Self { regex, ranks, core };
        let probe = self_check_text();
        (fast.encode(&probe) == core.encode_ordinary(&probe)).then_some(fast)
    }

    /// The ids of `text`, as `CoreBPE::encode_ordinary` gives them.
    pub(super) fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let mut at = 0;
        // Every character starts some alternative, so each piece starts where the last ended:
        // an anchored search needs only the end (no reverse search for the start).
        while at < text.len() {
            let input = Input::new(text).range(at..).anchored(Anchored::Yes);
            let Some(half) = self.regex.search_half(&input) else {
                // Cannot happen (see above); tiktoken-rs takes the rest.
                ids.extend(self.core.encode_ordinary(&text[at..]));
                break;
            };
            let mut end = half.offset();
            let piece = &text[at..end];
            if end < text.len()
                && piece.chars().all(char::is_whitespace)
                && !piece.contains(['\r', '\n'])
                && let Some((last, _)) = piece.char_indices().last()
                && last > 0
            {
                end = at + last;
            }
            self.piece(&text[at..end], &mut ids);
            at = end;
        }
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
