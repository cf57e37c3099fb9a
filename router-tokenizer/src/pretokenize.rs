//! Split-regex pre-tokenizers on `regex-automata`, with the pieces `onig` / fancy-regex give.
//!
//! The pre-tokenizer patterns of tiktoken and of GPT-2-, Llama-3- and Qwen-style HuggingFace
//! tokenizers end in `\s+(?!\S)|\s+`, a look-ahead the `regex` crate's engine cannot run.
//! A [`Splitter`] runs the rest of the pattern (the head) anchored at each piece's start on
//! `regex-automata` and, where the head does not match, takes those two alternatives by hand,
//! as a backtracking engine tries them in order: a whitespace run up to the end of the text
//! is one piece; a longer run followed by more text gives back its last character (which then
//! starts the next piece, e.g. a word's leading space); a single whitespace character is a
//! piece. Where nothing matches (no character here, for the known patterns), the characters
//! up to the next match are one piece, as a split that keeps its delimiters makes them.
//!
//! Only the patterns in [`KNOWN_PATTERNS`] are run this way: their character classes (`\s`,
//! `\p{L}`, `\p{N}` and the letter categories) and case-insensitive contractions were compared
//! with onig's on every code point (`hf_fast_tests.rs`); a pattern with other constructs
//! (`\w`, anchors, multi-character case folds) might differ, so it keeps its own engine.

use regex_automata::meta::{Cache, Regex};
use regex_automata::util::pool::Pool;
use regex_automata::{Anchored, Input};

/// The look-ahead tail every supported pattern ends with, taken by hand.
pub(crate) const TAIL: &str = r"|\s+(?!\S)|\s+";

/// Llama 3's split pattern (the same as tiktoken's `cl100k_base`).
pub(crate) const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's (digits one by one).
pub(crate) const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-2's: the one `ByteLevel(use_regex = true)` runs.
pub(crate) const GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// The patterns a [`Splitter`] is built for: the above and tiktoken's `o200k_base`.
pub(crate) fn known_pattern(pattern: &str) -> bool {
    [LLAMA3, QWEN2, GPT2, tiktoken_rs::O200K_BASE_PAT_STR].contains(&pattern)
}

/// Makes a search cache of the head.
type NewCache =
    Box<dyn Fn() -> Cache + Send + Sync + std::panic::RefUnwindSafe + std::panic::UnwindSafe>;

/// A known split pattern on `regex-automata` (module docs).
pub(crate) struct Splitter {
    head: Regex,
    /// Search caches, one taken per split (not per piece: the regex's own pool is a mutex
    /// away on every thread but the first that used it, and a text has a piece a word).
    caches: Pool<Cache, NewCache>,
}

impl std::fmt::Debug for Splitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Splitter")
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl Splitter {
    /// `None` unless `pattern` is one of the known patterns and its head compiles.
    pub(crate) fn new(pattern: &str) -> Option<Self> {
        if !known_pattern(pattern) {
            return None;
        }
        let head = Regex::new(pattern.strip_suffix(TAIL)?).ok()?;
        let template = head.clone();
        Some(Self {
            head,
            caches: Pool::new(Box::new(move || template.create_cache())),
        })
    }

    /// Calls `each` with the pieces of `text` in order; they concatenate to `text`.
    pub(crate) fn split<'t>(&self, text: &'t str, mut each: impl FnMut(&'t str)) {
        let mut cache = self.caches.get();
        let mut at = 0;
        let mut gap: Option<usize> = None;
        while at < text.len() {
            match self.piece_end(&mut cache, text, at, text.len()) {
                Some(end) => {
                    if let Some(start) = gap.take() {
                        each(&text[start..at]);
                    }
                    each(&text[at..end]);
                    at = end;
                }
                None => {
                    gap.get_or_insert(at);
                    at += text[at..].chars().next().map_or(1, char::len_utf8);
                }
            }
        }
        if let Some(start) = gap {
            each(&text[start..]);
        }
    }

    /// The longest piece of `text` in bytes (0 for empty text): what [`Self::split`] would
    /// give, measured without keeping the pieces. Linear in the text, no allocation.
    pub(crate) fn longest_piece(&self, text: &str) -> usize {
        let mut longest = 0;
        self.split(text, |piece| longest = longest.max(piece.len()));
        longest
    }

    /// The first piece of `text` longer than `limit` bytes, by a lower bound of its length
    /// (more than `limit`); `None` when every piece is within it. Each piece is looked for
    /// within [`PIECE_WINDOW`] bytes past `limit` from its start: one that fills that window
    /// is over the limit whatever follows, so a refusal costs no more than the scan to the
    /// piece plus the window (not the rest of a megabyte-long piece).
    pub(crate) fn piece_over(&self, text: &str, limit: usize) -> Option<usize> {
        let mut cache = self.caches.get();
        let mut at = 0;
        let mut gap: Option<usize> = None;
        while at < text.len() {
            let window = window_end(text, at, limit);
            match self.piece_end(&mut cache, text, at, window) {
                Some(end) => {
                    if let Some(start) = gap.take()
                        && at - start > limit
                    {
                        return Some(at - start);
                    }
                    if end - at > limit {
                        return Some(end - at);
                    }
                    at = end;
                }
                None => {
                    gap.get_or_insert(at);
                    at += text[at..].chars().next().map_or(1, char::len_utf8);
                }
            }
        }
        gap.map(|start| text.len() - start).filter(|&n| n > limit)
    }

    /// Where the piece starting at `at` ends, if one starts there, reading `text` up to
    /// `window` only (`text.len()` for the whole text): a piece that reaches `window`
    /// before the text's end is cut there, so it is at least as long as it says.
    fn piece_end(&self, cache: &mut Cache, text: &str, at: usize, window: usize) -> Option<usize> {
        let input = Input::new(&text[..window])
            .range(at..)
            .anchored(Anchored::Yes);
        // The known heads never match empty text; should one, the tail is tried instead.
        if let Some(half) = self.head.search_half_with(cache, &input)
            && half.offset() > at
        {
            return Some(half.offset());
        }
        let (mut last, mut end) = (None, 0);
        for (i, c) in text[at..window].char_indices() {
            if !c.is_whitespace() {
                break;
            }
            (last, end) = (Some(i), i + c.len_utf8());
        }
        let last = last?;
        Some(match at + end == text.len() {
            // `\s+(?!\S)` takes the whole run when nothing follows it.
            true => at + end,
            // A run cut by the window: as long as the window lets it be.
            false if at + end == window => window,
            // Followed by more text: all but the last character when that leaves one (the
            // look-ahead then sees whitespace), else `\s+` takes the one character.
            false if last > 0 => at + last,
            false => at + end,
        })
    }
}

/// How far past a limit [`Splitter::piece_over`] reads for one piece: more than any
/// alternative of the known patterns needs to tell which one matches (a contraction, a
/// character before a word), so a piece that fills the window is over the limit.
const PIECE_WINDOW: usize = 16;

/// The end of the window [`Splitter::piece_over`] reads a piece starting at `at` in: `limit`
/// plus [`PIECE_WINDOW`] bytes, moved forward to a character boundary, at most the text.
fn window_end(text: &str, at: usize, limit: usize) -> usize {
    let mut end = at.saturating_add(limit).saturating_add(PIECE_WINDOW);
    if end >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(end) {
        end += 1;
    }
    end
}

/// What kind of character continues a run ([`longest_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Letter,
    Digit,
    Space,
    Other,
}

/// `None`: a combining mark (variation selectors among them) or a format character (ZWJ,
/// ZWNJ), which continues whatever run it follows.
fn kind(c: char) -> Option<Kind> {
    use unicode_categories::UnicodeCategories;
    if !c.is_ascii() && (c.is_mark() || c.is_other_format()) {
        None
    } else if c.is_alphabetic() {
        Some(Kind::Letter)
    } else if c.is_numeric() {
        Some(Kind::Digit)
    } else if c.is_whitespace() {
        Some(Kind::Space)
    } else {
        Some(Kind::Other)
    }
}

/// The longest run of characters of one kind (letters, digits, whitespace, anything else)
/// in `text`, in bytes, a combining mark or joiner continuing the run it follows (`a` +
/// U+0301 repeated is one run, as o200k makes it one piece). The bound of the input limits
/// for a tokenizer whose pieces cannot be measured ([`crate::Tokenizer::longest_piece`]):
/// a whitespace-, punctuation- or script-splitting pre-tokenizer keeps no piece much longer.
pub fn longest_run(text: &str) -> usize {
    let mut longest = 0;
    let mut run = 0;
    let mut last = None;
    for c in text.chars() {
        match kind(c) {
            Some(k) if last == Some(k) => run += c.len_utf8(),
            Some(k) => {
                run = c.len_utf8();
                last = Some(k);
            }
            None => {
                run += c.len_utf8();
                last = last.or(Some(Kind::Other));
            }
        }
        longest = longest.max(run);
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'t>(splitter: &Splitter, text: &'t str) -> Vec<&'t str> {
        let mut out = Vec::new();
        splitter.split(text, |p| out.push(p));
        out
    }

    #[test]
    fn whitespace_before_a_word_gives_its_last_character_to_the_word() {
        let s = Splitter::new(LLAMA3).expect("a known pattern");
        assert_eq!(
            pieces(&s, "Hi   there\t\t7 x  "),
            vec!["Hi", "  ", " there", "\t", "\t", "7", " x", "  "]
        );
        assert_eq!(pieces(&s, "a\n\n  b"), vec!["a", "\n\n", " ", " b"]);
        assert!(Splitter::new(r"\w+|\s+(?!\S)|\s+").is_none());
    }

    #[test]
    fn the_longest_run_is_of_one_kind_of_character_in_bytes_marks_joining_it() {
        assert_eq!(longest_run(""), 0);
        assert_eq!(longest_run("ab, cd"), 2);
        assert_eq!(longest_run("a    b"), 4);
        assert_eq!(longest_run("x1234567y"), 7);
        assert_eq!(longest_run("-----=====  ab"), 10);
        // Letters of any script count together; bytes, not characters.
        assert_eq!(longest_run("東京abc"), 9);
        // Combining marks, variation selectors and joiners continue the run they follow.
        assert_eq!(longest_run(&"a\u{301}".repeat(10)), 30);
        assert_eq!(longest_run("\u{301}\u{301}x"), 4);
        assert_eq!(longest_run("❤\u{fe0f}\u{200d}🔥 a"), 13);
        assert_eq!(longest_run("ab\u{200c}cd 1"), 7);
    }

    /// The first piece over `limit` by its exact length, from the unbounded split.
    fn first_over(splitter: &Splitter, text: &str, limit: usize) -> Option<usize> {
        pieces(splitter, text)
            .into_iter()
            .map(str::len)
            .find(|&n| n > limit)
    }

    proptest::proptest! {
        /// Reading each piece within a window past the limit refuses exactly the texts the
        /// whole split refuses, with a length between the limit and the piece's own (plus at most one character).
        #[test]
        fn a_windowed_piece_check_refuses_what_the_whole_split_refuses(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "B", "\u{301}", "1", " ", "  ", "\n", "\r\n", "\t", "!", "'s", "東",
                    "\u{200d}", "é", "-", "/",
                ]),
                0..120,
            ),
            limit in 1usize..24,
        ) {
            let text: String = parts.concat();
            for pattern in [tiktoken_rs::O200K_BASE_PAT_STR, LLAMA3, QWEN2, GPT2] {
                let splitter = Splitter::new(pattern).expect("known");
                let exact = first_over(&splitter, &text, limit);
                let bounded = splitter.piece_over(&text, limit);
                proptest::prop_assert_eq!(exact.is_some(), bounded.is_some(), "{:?} {}", text, limit);
                if let (Some(exact), Some(bounded)) = (exact, bounded) {
                    // A whitespace run the window cut may count its last character, which the whole
                    // split gives to the next piece.
                    proptest::prop_assert!(limit < bounded && bounded <= exact + 4);
                }
            }
        }
    }

    #[test]
    fn the_longest_piece_follows_each_patterns_rules_for_marks_and_digits() {
        let o200k = Splitter::new(tiktoken_rs::O200K_BASE_PAT_STR).expect("known");
        let llama3 = Splitter::new(LLAMA3).expect("known");
        // o200k joins letters and combining marks into one piece; Llama 3's `\p{L}+` does not.
        let marked = "a\u{301}".repeat(100);
        assert_eq!(o200k.longest_piece(&marked), marked.len());
        assert_eq!(llama3.longest_piece(&marked), 3);
        // Digits: three at most a piece in both.
        assert_eq!(o200k.longest_piece(&"7".repeat(50)), 3);
        assert_eq!(llama3.longest_piece("ab 1234567 cd"), 3);
        assert_eq!(o200k.longest_piece(""), 0);
        // The first piece over a limit, by a lower bound of its length (read up to the limit
        // and a window past it); none within it.
        let text = format!("ab {marked} cd");
        assert!(
            o200k
                .piece_over(&text, 200)
                .is_some_and(|n| (201..=301).contains(&n))
        );
        assert_eq!(o200k.piece_over(&text, 300), Some(301));
        assert_eq!(o200k.piece_over(&text, 301), None);
        assert_eq!(llama3.piece_over(&text, 3), None);
        // o200k keeps newlines and slashes after a symbol in its piece: `!` then `\n/` runs.
        let slashes = format!("!{}", "\n/".repeat(50));
        assert_eq!(o200k.longest_piece(&slashes), slashes.len());
    }
}
