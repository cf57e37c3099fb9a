//! Tokenizing one long text prompt, as the frontend does for every request.
//!
//! `tokenize/<tokenizer>/<path>` over 50 KB of varied text (`varied_text.rs`):
//! - `tiktoken-o200k`: the default tokenizer; `hf-bpe`: the byte-level BPE `tokenizer.json`
//!   of the test model directory (`tests/fixtures/tiny-llama`, shaped like Llama 3's, 4k
//!   tokens); `hf-o200k-llama3`: the same shape with a real-sized vocabulary (200k tokens made
//!   from `o200k_base`, `hf_o200k.rs`).
//! - `encode`: [`Tokenizer::encode`] on this thread (split at safe boundaries and encoded in
//!   parallel when long); `whole`: the text in one piece on this thread, as before the
//!   split; `prompter`: [`Prompter::tokenize_for`] from a tokio task, the blocking-thread
//!   handoff included (what a request pays); `tiktoken-o200k/tiktoken-rs`: tiktoken-rs's own
//!   `encode_ordinary` (fancy-regex), what the router used before; `hf-*/tokenizers`: the
//!   `tokenizers` crate's own pipeline (onig), what the router ran before `hf_fast.rs`.
//!
//! `handoff/2k/<path>`: 2 KB (above the inline limit) encoded on this thread and through the
//! prompter's blocking thread: the difference is the handoff.
//!
//! Run: `cargo bench -p router-tokenizer --bench tokenize`. Figures in BENCHMARKS.md.

#![allow(clippy::expect_used)]

#[path = "hf_o200k.rs"]
mod hf_o200k;
#[path = "varied_text.rs"]
mod varied_text;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use router_tokenizer::{Endpoint, PromptInput, Prompter, Tokenizer};
use std::hint::black_box;
use std::path::{Path, PathBuf};

const BYTES: usize = 50 * 1024;

/// (name, tokenizer, its `tokenizer.json` when a HuggingFace one).
fn tokenizers() -> Vec<(&'static str, Tokenizer, Option<PathBuf>)> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
    let mut all = vec![("tiktoken-o200k", Tokenizer::default(), None)];
    for (name, path) in [
        ("hf-bpe", fixture.join("tokenizer.json")),
        ("hf-o200k-llama3", hf_o200k::o200k_llama3_tokenizer_json()),
    ] {
        let hf = Tokenizer::huggingface(&path).expect("the tokenizer loads");
        all.push((name, hf, Some(path)));
    }
    all
}

fn bench(c: &mut Criterion) {
    let text = varied_text::varied_text(BYTES, 7);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("tokenize");
    group.throughput(Throughput::Bytes(text.len() as u64));
    let reference = tiktoken_rs::o200k_base_singleton();
    group.bench_function("tiktoken-o200k/tiktoken-rs", |b| {
        b.iter(|| black_box(reference.encode_ordinary(black_box(&text))))
    });
    for (name, tokenizer, path) in tokenizers() {
        // Build the tables first (tiktoken is lazy).
        black_box(tokenizer.encode(&text));
        if let Some(path) = path {
            let mut crate_own = tokenizers::Tokenizer::from_file(&path).expect("loads");
            crate_own.set_encode_special_tokens(true);
            assert_eq!(
                crate_own
                    .encode_fast(text.as_str(), false)
                    .expect("encodes")
                    .get_ids(),
                tokenizer.encode(&text),
                "{name}: the same ids as the crate"
            );
            group.bench_function(format!("{name}/tokenizers"), |b| {
                b.iter(|| black_box(crate_own.encode_fast(black_box(text.as_str()), false)))
            });
        }
        group.bench_function(format!("{name}/encode"), |b| {
            b.iter(|| black_box(tokenizer.encode(black_box(&text))))
        });
        group.bench_function(format!("{name}/whole"), |b| {
            b.iter(|| black_box(tokenizer.encode_whole(black_box(&text))))
        });
        let prompter = Prompter::new(tokenizer.clone(), None);
        group.bench_function(format!("{name}/prompter"), |b| {
            b.iter(|| {
                let prompt = PromptInput::Text(vec![text.clone()]);
                runtime.block_on(prompter.tokenize_for(Endpoint::Completions, prompt))
            })
        });
    }
    group.finish();

    // The blocking-thread handoff alone: 2 KB (above the inline limit, below the split) on
    // this thread and through the prompter's blocking thread.
    let short = varied_text::varied_text(2 * 1024, 3);
    let tokenizer = Tokenizer::default();
    let prompter = Prompter::new(tokenizer.clone(), None);
    black_box(tokenizer.encode(&short));
    let mut group = c.benchmark_group("handoff");
    group.bench_function("2k/encode", |b| {
        b.iter(|| black_box(tokenizer.encode(black_box(&short))))
    });
    group.bench_function("2k/prompter", |b| {
        b.iter(|| {
            let prompt = PromptInput::Text(vec![short.clone()]);
            runtime.block_on(prompter.tokenize_for(Endpoint::Completions, prompt))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
