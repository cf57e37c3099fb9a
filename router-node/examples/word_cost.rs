//! What one giant "word" costs the tokenizer, and what the input limits' checks cost instead
//! (the figures of BENCHMARKS.md's "Input limits" section).
//!
//! For runs of one character (`a`, `-`, a space) of 16 KiB, 256 KiB and 4 MiB, and for
//! ordinary text of the same sizes, prints how long the default tokenizer (tiktoken
//! `o200k_base`, as the frontend runs it: long text in parallel pieces) takes, and how long
//! the checks before tokenizing take (`http.max_word_bytes`' scan of runs and the byte
//! bound). A run is one pre-tokenizer piece: it cannot be cut into parallel pieces, and its
//! merges cost far more per byte than text. A 4 MiB whitespace run makes tiktoken-rs's
//! regex engine give up (a panic, caught here as the frontend catches it).
//!
//! `cargo run -p router-node --example word_cost` (add `--release` for an optimised build).

use router_node::frontend::longest_run;
use router_tokenizer::Tokenizer;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [16 * 1024, 256 * 1024, 4 * 1024 * 1024];

fn main() {
    // The tokenizer's panic is reported in the table, not as a backtrace.
    std::panic::set_hook(Box::new(|_| {}));
    let tokenizer = Tokenizer::default();
    tokenizer.warm();
    let longest = tokenizer.longest_token_bytes().unwrap_or(1);
    println!(
        "tokenizer: {} (longest token {longest} bytes)",
        tokenizer.describe()
    );
    println!(
        "{:<10} {:>9} {:>12} {:>9} {:>12}",
        "text", "bytes", "tokenize", "tokens", "checks"
    );
    let sentence = "The quick brown fox, number 42, jumps over the lazy dog. ";
    for size in SIZES {
        let runs = [
            ("a", "a".repeat(size)),
            ("-", "-".repeat(size)),
            ("space", " ".repeat(size)),
        ];
        let text = sentence.repeat(size / sentence.len() + 1)[..size].to_owned();
        for (name, text) in runs.into_iter().chain([("text", text)]) {
            let (took, tokens) = timed(|| {
                std::panic::catch_unwind(AssertUnwindSafe(|| tokenizer.encode(&text).len()))
            });
            let (checked, _) = timed(|| {
                let run = longest_run(&text);
                (run, text.len().div_ceil(longest))
            });
            let tokens = match tokens {
                Ok(n) => n.to_string(),
                Err(_) => "panicked".to_owned(),
            };
            println!(
                "{name:<10} {size:>9} {:>12} {tokens:>9} {:>12}",
                format!("{took:.2?}"),
                format!("{checked:.2?}")
            );
        }
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let started = Instant::now();
    let out = f();
    (started.elapsed(), out)
}
