//! Long text is cut at safe boundaries and encoded in parallel pieces: the ids must be
//! exactly those of the whole text, for every tiktoken encoding and for the byte-level BPE
//! of the model directory fixture (plain and as the engine), on varied text and on random
//! strings built from the characters that matter at a boundary. A tokenizer whose
//! normalizer changes piece starts is not split. The faster `o200k_base` gives tiktoken-rs's
//! ids.

use crate::varied_text;

use proptest::prelude::*;
use router_tokenizer::{Prompter, SPLIT_MIN_BYTES, TiktokenEncoding, Tokenizer, pieces};
use std::path::Path;
use std::sync::OnceLock;

fn tokenizers() -> &'static [Tokenizer] {
    static ALL: OnceLock<Vec<Tokenizer>> = OnceLock::new();
    ALL.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
        let engine = Prompter::from_model_dir(&dir).unwrap().tokenizer().clone();
        let plain = Tokenizer::huggingface(&dir.join("tokenizer.json")).unwrap();
        let mut all: Vec<Tokenizer> = [
            TiktokenEncoding::O200kBase,
            TiktokenEncoding::Cl100kBase,
            TiktokenEncoding::R50kBase,
            TiktokenEncoding::P50kBase,
        ]
        .into_iter()
        .map(Tokenizer::Tiktoken)
        .collect();
        all.extend([engine, plain]);
        all
    })
}

#[test]
fn long_varied_text_encodes_in_pieces_exactly_as_whole() {
    for seed in 0..3 {
        let text = varied_text::varied_text(SPLIT_MIN_BYTES * 2 + 1000 * seed as usize, seed);
        assert!(pieces(&text, 8 * 1024).len() > 2, "the text is cut");
        for tokenizer in tokenizers() {
            assert!(tokenizer.splits_long_text(), "{}", tokenizer.describe());
            let whole = tokenizer.encode_whole(&text);
            assert_eq!(
                tokenizer.encode(&text),
                whole,
                "{} seed {seed}",
                tokenizer.describe()
            );
            let with_specials = tokenizer.encode_with_specials(&text);
            assert!(with_specials.ends_with(&whole), "{}", tokenizer.describe());
        }
    }
}

/// Characters that matter around a cut: letters (ASCII and not), digits, punctuation,
/// apostrophes, every kind of whitespace.
fn nasty() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        "Z",
        "word",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\u{a0}",
        "\u{3000}",
        "\u{b}",
        ".",
        ",",
        "'s",
        "'",
        "(",
        "/",
        "-",
        "1",
        "123",
        "9999",
        "é",
        "東京",
        "😀",
        "ß",
        "<|eot_id|>",
        "_",
        "\"",
        "#",
        "`",
        "\u{85}",
        "\u{2028}",
        "\u{c}",
        "\r",
        "\u{301}",
        "É",
        "ǅ",
        "٣",
        "//",
        "'LL",
        "\n\n\n",
    ]);
    prop::collection::vec(atoms, 0..300).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn cutting_anywhere_allowed_keeps_the_ids(text in nasty(), piece in 1usize..64) {
        for tokenizer in tokenizers() {
            let whole = tokenizer.encode_whole(&text);
            let cut: Vec<u32> = pieces(&text, piece)
                .into_iter()
                .flat_map(|p| tokenizer.encode_whole(p))
                .collect();
            prop_assert_eq!(cut, whole, "{}", tokenizer.describe());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_faster_o200k_gives_tiktoken_s_ids(text in nasty()) {
        let ours = Tokenizer::Tiktoken(TiktokenEncoding::O200kBase).encode_whole(&text);
        prop_assert_eq!(ours, tiktoken_rs::o200k_base_singleton().encode_ordinary(&text));
    }
}

#[test]
fn the_faster_o200k_gives_tiktoken_s_ids_on_varied_text() {
    let tokenizer = Tokenizer::Tiktoken(TiktokenEncoding::O200kBase);
    for seed in 0..4 {
        let text = varied_text::varied_text(20_000, seed);
        let expected = tiktoken_rs::o200k_base_singleton().encode_ordinary(&text);
        assert_eq!(tokenizer.encode_whole(&text), expected, "seed {seed}");
        assert_eq!(tokenizer.encode(&text), expected, "seed {seed}");
    }
}

#[test]
fn a_tokenizer_whose_normalizer_prepends_is_not_split() {
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::normalizers::prepend::Prepend;
    use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
    let model = WordLevel::builder()
        .vocab(
            [("[UNK]".to_owned(), 0), ("_a".to_owned(), 1)]
                .into_iter()
                .collect(),
        )
        .unk_token("[UNK]".to_owned())
        .build()
        .unwrap();
    let mut hf = tokenizers::Tokenizer::new(model);
    hf.with_normalizer(Some(Prepend::new("_".to_owned())));
    hf.with_pre_tokenizer(Some(WhitespaceSplit));
    let dir = std::env::temp_dir().join(format!("switchyard-split-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    hf.save(&path, false).unwrap();
    let tokenizer = Tokenizer::huggingface(&path).unwrap();
    assert!(!tokenizer.splits_long_text());
    let text = "x a ".repeat(SPLIT_MIN_BYTES);
    assert_eq!(tokenizer.encode(&text), tokenizer.encode_whole(&text));
    let _ = std::fs::remove_dir_all(dir);
}
