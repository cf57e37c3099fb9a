//! The byte bound of the input limits: a tokenizer's [`Tokenizer::longest_token_bytes`] `L`
//! promises that a text of `n` bytes never encodes to fewer than `ceil(n / L)` tokens, which
//! lets the frontend refuse a prompt over `http.max_prompt_tokens` without tokenizing it.
//! Checked for every tiktoken encoding and the byte-level BPE fixture (plain and as the
//! engine) on random strings, long runs of one character (where tokens are longest) and
//! varied text; a tokenizer whose pre-tokenizer drops text gives no bound.

use crate::varied_text;

use proptest::prelude::*;
use router_tokenizer::{Prompter, TiktokenEncoding, Tokenizer};
use std::path::Path;
use std::sync::OnceLock;

/// Every tokenizer that gives a bound, with it.
fn bounded() -> &'static [(Tokenizer, usize)] {
    static ALL: OnceLock<Vec<(Tokenizer, usize)>> = OnceLock::new();
    ALL.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
        let engine = Prompter::from_model_dir(&dir).unwrap().tokenizer().clone();
        let plain = Tokenizer::huggingface(&dir.join("tokenizer.json")).unwrap();
        [
            TiktokenEncoding::O200kBase,
            TiktokenEncoding::Cl100kBase,
            TiktokenEncoding::R50kBase,
            TiktokenEncoding::P50kBase,
        ]
        .into_iter()
        .map(Tokenizer::Tiktoken)
        .chain([engine, plain])
        .map(|tokenizer| {
            tokenizer.warm();
            let longest = tokenizer
                .longest_token_bytes()
                .unwrap_or_else(|| panic!("{} gives no bound", tokenizer.describe()));
            (tokenizer, longest)
        })
        .collect()
    })
}

fn holds(text: &str) -> Result<(), TestCaseError> {
    for (tokenizer, longest) in bounded() {
        let at_least = text.len().div_ceil(*longest);
        let count = tokenizer.encode(text).len();
        prop_assert!(
            count >= at_least,
            "{}: {count} tokens for {} bytes, the bound says at least {at_least}",
            tokenizer.describe(),
            text.len()
        );
    }
    Ok(())
}

/// Pieces of text and long runs of one character.
fn text() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        prop::sample::select(vec![
            "a",
            "word",
            " ",
            "\n",
            "\t",
            ".",
            ",",
            "'s",
            "1",
            "123",
            "é",
            "東京",
            "😀",
            "<|eot_id|>",
            "\u{301}",
            "=",
            "-",
        ])
        .prop_map(str::to_owned),
        (
            prop::sample::select(vec![" ", "-", "=", "a", "\n", "0", "*", "é"]),
            1usize..600
        )
            .prop_map(|(c, n)| c.repeat(n)),
    ];
    prop::collection::vec(atom, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn no_text_encodes_to_fewer_tokens_than_the_bound(text in text()) {
        holds(&text)?;
    }
}

#[test]
fn the_bound_holds_on_varied_text_and_is_tight_for_o200k_and_cl100k() {
    for seed in 0..3 {
        holds(&varied_text::varied_text(20_000, seed)).unwrap();
    }
    for (tokenizer, longest) in bounded() {
        println!("{}: {longest} bytes", tokenizer.describe());
        if let Tokenizer::Tiktoken(TiktokenEncoding::O200kBase | TiktokenEncoding::Cl100kBase) =
            tokenizer
        {
            // The bound is tight: a run of 128 spaces is one token.
            assert_eq!(*longest, 128, "{}", tokenizer.describe());
            assert_eq!(tokenizer.encode(&" ".repeat(128)).len(), 1);
        }
    }
}

#[test]
fn a_tokenizer_that_drops_whitespace_gives_no_bound() {
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
    let model = BPE::builder()
        .vocab_and_merges(
            [("a".to_owned(), 0), ("[UNK]".to_owned(), 1)]
                .into_iter()
                .collect::<tokenizers::models::bpe::Vocab>(),
            Vec::new(),
        )
        .unk_token("[UNK]".to_owned())
        .build()
        .unwrap();
    let mut hf = tokenizers::Tokenizer::new(model);
    hf.with_pre_tokenizer(Some(WhitespaceSplit));
    let dir = std::env::temp_dir().join(format!("switchyard-bound-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    hf.save(&path, false).unwrap();
    let tokenizer = Tokenizer::huggingface(&path).unwrap();
    assert_eq!(tokenizer.longest_token_bytes(), None);
    // Why: 10,001 bytes that are one token.
    let text = format!("{}a", " ".repeat(10_000));
    assert_eq!(tokenizer.encode(&text).len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}
