//! Writes the small model-directory fixture the tokenizer tests and benchmark use:
//! `router-tokenizer/tests/fixtures/tiny-llama/{tokenizer.json,tokenizer_config.json}`.
//!
//! The tokenizer is shaped like Llama 3's: a byte-level BPE (trained here on this
//! repository's own documentation and sources, 4000 tokens), a `Split` pre-tokenizer with a
//! GPT-4-style regex followed by `ByteLevel` without a prefix space, special tokens, and a
//! post-processor that puts `<|begin_of_text|>` before every sequence. The
//! `tokenizer_config.json` carries a chat template, `bos_token` / `eos_token` and
//! `add_bos_token`, as a model directory served by vLLM does.
//!
//! Run from the workspace root: `cargo run -p router-tokenizer --example tokenizer_fixture`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// The GPT-4-style pre-tokenizer pattern (words with one leading non-letter, numbers of up
/// to three digits, punctuation runs, newline runs, other whitespace).
const PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const SPECIALS: &[&str] = &[
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
];

const CHAT_TEMPLATE: &str = "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
    std::fs::create_dir_all(&out).expect("create the fixture directory");

    let mut tokenizer = Tokenizer::new(BPE::default());
    let split = Split::new(
        SplitPattern::Regex(PATTERN.to_owned()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .expect("the pattern compiles");
    tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![
        split.into(),
        ByteLevel::new(false, true, false).into(),
    ])));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(4000)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .special_tokens(
            SPECIALS
                .iter()
                .map(|s| AddedToken::from(*s, true))
                .collect(),
        )
        .build()
        .into();
    let corpus = corpus(&root);
    tokenizer
        .train(&mut trainer, corpus.iter())
        .expect("training succeeds");
    let bos = tokenizer
        .token_to_id(SPECIALS[0])
        .expect("the BOS token is in the vocabulary");
    let template = TemplateProcessing::builder()
        .try_single(format!("{} $A", SPECIALS[0]))
        .expect("single template")
        .try_pair(format!("{} $A {} $B", SPECIALS[0], SPECIALS[0]))
        .expect("pair template")
        .special_tokens(vec![(SPECIALS[0], bos)])
        .build()
        .expect("the template builds");
    tokenizer.with_post_processor(Some(template));
    tokenizer
        .save(out.join("tokenizer.json"), false)
        .expect("write tokenizer.json");

    let config = serde_json::json!({
        "add_bos_token": true,
        "bos_token": SPECIALS[0],
        "eos_token": {"content": "<|eot_id|>", "lstrip": false, "rstrip": false, "special": true},
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 8192,
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    let text = serde_json::to_string_pretty(&config).expect("serialize");
    std::fs::write(out.join("tokenizer_config.json"), text + "\n")
        .expect("write tokenizer_config.json");
    println!("wrote {}", out.display());
}

/// This repository's documentation and router-node's sources, one line per sequence.
fn corpus(root: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "CHANGELOG.md",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    for dir in ["docs", "router-node/src/frontend", "router-core/src/router"] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .expect("read a corpus directory")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        entries.sort();
        files.extend(entries);
    }
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| text.lines().map(|l| format!("{l}\n")).collect::<Vec<_>>())
        .collect()
}
