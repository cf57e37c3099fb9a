//! Tests of `hf_fast.rs` and `pretokenize.rs` against the `tokenizers` crate: the pieces of
//! every known split pattern are onig's, and the faster encoder's ids are the crate's for
//! random text, for the test model's small tokenizer and a generated 200k-token one, plain
//! and as the engine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../benches/hf_o200k.rs"]
mod hf_o200k;

use crate::huggingface::{HuggingFaceTokenizer, SpecialTokens};
use crate::pretokenize::{self, Splitter};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tokenizers::utils::SysRegex;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama/tokenizer.json")
}

/// (name, tokenizer) for both files, plain and as the engine; loaded once.
fn tokenizers() -> &'static [(String, HuggingFaceTokenizer)] {
    static ALL: OnceLock<Vec<(String, HuggingFaceTokenizer)>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut all = Vec::new();
        for (name, path) in [
            ("tiny-llama", fixture()),
            ("o200k-llama3", hf_o200k::o200k_llama3_tokenizer_json()),
        ] {
            let plain = HuggingFaceTokenizer::plain(&path).expect("loads");
            let engine =
                HuggingFaceTokenizer::engine(&path, name.to_owned(), &SpecialTokens::default())
                    .expect("loads");
            all.push((format!("{name}/plain"), plain));
            all.push((format!("{name}/engine"), engine));
        }
        all
    })
}

/// The pieces onig's `Split(pattern, Isolated)` makes of `text`.
fn onig_pieces<'t>(pattern: &str, text: &'t str) -> Vec<&'t str> {
    let regex = SysRegex::new(pattern).expect("onig compiles it");
    let mut out = Vec::new();
    let mut prev = 0;
    for (start, end) in regex.find_iter(text) {
        if prev < start {
            out.push(&text[prev..start]);
        }
        out.push(&text[start..end]);
        prev = end;
    }
    if prev < text.len() {
        out.push(&text[prev..]);
    }
    out
}

fn splitter_pieces<'t>(pattern: &str, text: &'t str) -> Vec<&'t str> {
    let splitter = Splitter::new(pattern).expect("a known pattern");
    let mut out = Vec::new();
    splitter.split(text, |p| out.push(p));
    out
}

const PATTERNS: [&str; 4] = [
    pretokenize::LLAMA3,
    pretokenize::QWEN2,
    pretokenize::GPT2,
    tiktoken_rs::O200K_BASE_PAT_STR,
];

#[test]
fn every_tokenizer_takes_the_faster_path() {
    for (name, tokenizer) in tokenizers() {
        assert!(tokenizer.fast().is_some(), "{name}: {tokenizer:?}");
    }
}

#[test]
fn the_pattern_classes_are_onigs_on_every_code_point() {
    let all: String = (0u32..0x11_0000).filter_map(char::from_u32).collect();
    let starts = |found: Vec<(usize, usize)>| -> Vec<usize> {
        found.into_iter().map(|(start, _)| start).collect()
    };
    // Every class and case-insensitive letter the known patterns use.
    let classes = [
        r"\s",
        r"\p{L}",
        r"\p{N}",
        r"\p{Lu}",
        r"\p{Ll}",
        r"\p{Lt}",
        r"\p{Lm}",
        r"\p{Lo}",
        r"\p{M}",
        r"[^\s\p{L}\p{N}]",
        r"[^\r\n\p{L}\p{N}]",
        r"(?i:s)",
        r"(?i:t)",
        r"(?i:r)",
        r"(?i:e)",
        r"(?i:v)",
        r"(?i:m)",
        r"(?i:l)",
        r"(?i:d)",
    ];
    for class in classes {
        let onig = starts(
            SysRegex::new(class)
                .expect("onig")
                .find_iter(&all)
                .collect(),
        );
        let ours = regex_automata::meta::Regex::new(class).expect("compiles");
        let ours = starts(ours.find_iter(&all).map(|m| (m.start(), m.end())).collect());
        assert_eq!(onig.len(), ours.len(), "{class}");
        assert!(onig == ours, "{class}: the engines disagree");
    }
    // The splitter's whitespace runs use `char::is_whitespace`.
    let spaces: Vec<usize> = all
        .char_indices()
        .filter(|(_, c)| c.is_whitespace())
        .map(|(i, _)| i)
        .collect();
    let onig = starts(
        SysRegex::new(r"\s")
            .expect("onig")
            .find_iter(&all)
            .collect(),
    );
    assert_eq!(spaces, onig);
}

/// Text made of the fragments tokenizers find hard: words of several scripts, contractions,
/// digit runs, whitespace runs of every kind, punctuation, special-token strings (whole and
/// cut) and any character at all.
fn text() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        prop::sample::select(vec![
            "hello",
            "World",
            "naïve",
            "café",
            "Zürich",
            "привет",
            "東京",
            "😀",
            "ΐ",
            "ǅx",
            "'s",
            "'LL",
            "'ve",
            "'ſ",
            "1",
            "12",
            "1234567",
            "٣٤",
            "!",
            "?!",
            "...",
            "()",
            "{\"a\":",
            "<|begin_of_text|>",
            "<|eot_id|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|eot",
            "id|>",
            "<|",
            "-->",
            "\\n",
        ])
        .prop_map(str::to_owned),
        prop::sample::select(vec![
            " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u{a0}", "\u{3000}", "\u{2028}",
            "\u{85}", "\u{b}", "\u{c}",
        ])
        .prop_flat_map(|ws| (1usize..4).prop_map(move |n| ws.repeat(n))),
        "[a-zA-Z]{1,12}",
        "[0-9]{1,8}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(fragment, 0..40).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_splitter_makes_onigs_pieces(text in text()) {
        for pattern in PATTERNS {
            prop_assert_eq!(splitter_pieces(pattern, &text), onig_pieces(pattern, &text));
        }
    }

    #[test]
    fn the_faster_encoder_gives_the_crates_ids(text in text()) {
        for (name, tokenizer) in tokenizers() {
            let fast = tokenizer.fast().expect("the faster path").encode(&text);
            let expected = tokenizer.encode_by_crate(&text).expect("the crate encodes it");
            prop_assert_eq!(fast, expected, "{}", name);
        }
    }
}

#[test]
fn long_runs_and_long_words_give_the_crates_ids() {
    let text = format!(
        "{}x{}y {}{}",
        " ".repeat(5000),
        "\n".repeat(3000),
        "abcdefgh".repeat(2000),
        "1".repeat(999)
    );
    for (name, tokenizer) in tokenizers() {
        let fast = tokenizer.fast().expect("the faster path").encode(&text);
        assert_eq!(
            fast,
            tokenizer.encode_by_crate(&text).expect("encodes"),
            "{name}"
        );
    }
}
