//! The input limits follow the configured tokenizer's own pieces: a 3.9 MB prompt of `a` and a
//! combining acute accent (U+0301) repeated, which o200k's pre-tokenizer keeps as one piece,
//! is refused 400 `word_too_long` before it is tokenized, while a long number (o200k cuts
//! digits in threes) is served; and a request that finds every tokenizer slot of the node busy
//! for its wait is a 503 `tokenizer_saturated`.

use crate::support::{PROFILE, error_of, spawn_node, spawn_node_tuned, spawn_worker};
use router_node::frontend::Limits;
use router_tokenizer::{Prompter, TokenizeGate};
use serde_json::json;
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_letter_and_its_combining_mark_repeated_is_refused_before_tokenizing() {
    let worker = spawn_worker(1, MS).await;
    let limits = Limits::default();
    let max_word = limits.max_word_bytes;
    let node = spawn_node(&[&worker.url], limits).await;
    let prompt = "a\u{301}".repeat(1_300_000);
    assert_eq!(prompt.len(), 3_900_000);
    let started = Instant::now();
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": prompt}))
        .await;
    let took = started.elapsed();
    assert_eq!(response.status(), 400);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "word_too_long", "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("prompt"), "{message}");
    assert!(message.contains("http.max_word_bytes"), "{message}");
    assert!(message.contains(&max_word.to_string()), "{message}");
    println!("3.9 MB of a + U+0301 refused in {took:?}");
    // Tokenizing it takes seconds in a debug build (then a 400 prompt_too_long).
    assert!(took < Duration::from_secs(3), "{took:?}");
    // A long number is many short pieces for o200k: served.
    let number = "7".repeat(64 * 1024);
    let served = node
        .call("/v1/completions", json!({"model": "m", "prompt": number}))
        .await;
    assert_eq!(served.status(), 200, "{:?}", served.text().await);
    assert_eq!(worker.seen.lock().unwrap().len(), 1, "only the number");
    node.assert_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tokenizer_slot_within_the_wait_is_a_503() {
    // The encoder built first (process-wide), so the request after the wait is served in time.
    Prompter::default().warm().await;
    let worker = spawn_worker(1, MS).await;
    let limits = Limits {
        request_timeout: 2000 * MS,
        ..Limits::default()
    };
    let wait = limits.tokenize_wait();
    let gate = TokenizeGate::new(1);
    let tuned = gate.clone();
    let node = spawn_node_tuned(&[&worker.url], limits, Prompter::default(), PROFILE, |s| {
        s.with_tokenize_gate(tuned)
    })
    .await;
    // Longer than what is tokenized on the task: it needs a slot.
    let prompt = "hello world ".repeat(1000);
    let held = gate.try_hold().unwrap();
    let started = Instant::now();
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": prompt}))
        .await;
    assert_eq!(response.status(), 503);
    assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    let err = error_of(response).await;
    assert_eq!(err["reason"], "tokenizer_saturated", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("1 quick tokenizer slots"),
        "{err}"
    );
    drop(held);
    let served = node
        .call("/v1/completions", json!({"model": "m", "prompt": prompt}))
        .await;
    assert_eq!(served.status(), 200);
    assert_eq!(gate.in_use(), 0);
    node.assert_idle().await;
}
