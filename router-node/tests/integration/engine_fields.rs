//! What a client may not tell an engine, and what the router books for what the engine will
//! really generate: engine-control fields refused or dropped (the class's `engine_priority`
//! set by the router instead), the larger of the two output fields counted, and every
//! sequence (`n`, `best_of`, a batch of prompts) booked. Through real HTTP to a stand-in
//! worker that records what it was sent; the ledger is idle after every test.

use crate::support::{Node, PROFILE, StandInWorker, error_of, spawn_node_profiled, spawn_worker};
use router_node::frontend::Limits;
use router_tokenizer::Prompter;
use serde_json::{Value, json};
use std::time::Duration;

/// A stand-in worker answering after `delay`, behind a node whose profile gives `batch`
/// (only) an engine priority.
async fn fleet(delay: Duration) -> (StandInWorker, Node) {
    let profile = PROFILE.replacen(
        "name = \"batch\"\n",
        "name = \"batch\"\nengine_priority = -3\n",
        1,
    );
    let worker = spawn_worker(1, delay).await;
    let node = spawn_node_profiled(
        &[&worker.url],
        Limits::default(),
        Prompter::default(),
        &profile,
    )
    .await;
    (worker, node)
}

/// `base` with the fields of `extra` set.
fn with(mut base: Value, extra: &Value) -> Value {
    for (k, v) in extra.as_object().into_iter().flatten() {
        base[k] = v.clone();
    }
    base
}

#[tokio::test]
async fn engine_control_fields_from_a_client_never_reach_the_engine() {
    let (worker, node) = fleet(Duration::from_millis(1)).await;
    for field in [
        "kv_transfer_params",
        "bootstrap_host",
        "bootstrap_port",
        "bootstrap_room",
    ] {
        let body = with(
            json!({"model": "m", "prompt": "hello", "max_tokens": 2}),
            &json!({field: {"remote_host": "10.0.0.9"}}),
        );
        let response = node.call("/v1/completions", body).await;
        assert_eq!(response.status(), 400, "{field}");
        let error = error_of(response).await;
        assert!(
            error["message"].as_str().is_some_and(|m| m.contains(field)),
            "{error}"
        );
    }
    assert!(worker.seen.lock().unwrap().is_empty(), "nothing was sent");

    // Ids and priority are dropped; the class's engine priority is the router's to set.
    let tricks = json!({"model": "m", "prompt": "hello", "max_tokens": 2,
                        "request_id": "collide", "rid": "collide", "priority": -100});
    let response = node.call("/v1/completions", tricks.clone()).await;
    assert_eq!(response.status(), 200);
    let response = node
        .post("/v1/completions")
        .header("x-policy-class", "batch")
        .json(&tricks)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen = worker.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        for field in ["request_id", "rid"] {
            assert!(
                s.body.get(field).is_none(),
                "{field} reached the engine: {}",
                s.body
            );
        }
    }
    assert!(seen[0].body.get("priority").is_none(), "{}", seen[0].body);
    assert_eq!(seen[1].body["priority"], -3, "the class's engine priority");
    node.assert_idle().await;
}

#[tokio::test]
async fn the_larger_output_field_is_the_one_that_counts() {
    let (worker, node) = fleet(Duration::from_millis(1)).await;
    let response = node
        .call(
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 1, "max_completion_tokens": 999_999_999}),
        )
        .await;
    assert_eq!(response.status(), 400);
    let error = error_of(response).await;
    assert_eq!(error["reason"], "max_tokens_too_large", "{error}");
    assert!(worker.seen.lock().unwrap().is_empty());
    node.assert_idle().await;
}

/// Books a slow request with `extra` fields and returns the decode blocks it holds.
async fn booked_blocks(extra: serde_json::Value) -> u64 {
    let (_worker, node) = fleet(Duration::from_millis(400)).await;
    let body = with(
        json!({"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": 64}),
        &extra,
    );
    let (http, url) = (node.http.clone(), format!("{}/v1/completions", node.url));
    let sent = tokio::spawn(async move { http.post(url).json(&body).send().await });
    let mut blocks = 0;
    for _ in 0..200 {
        let snap = node.router.observe().await.unwrap();
        blocks = snap
            .scheduler
            .ledger
            .ranks
            .iter()
            .map(|r| r.decode_blocks)
            .sum();
        if blocks > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(sent.await.unwrap().unwrap().status(), 200);
    node.assert_idle().await;
    blocks
}

#[tokio::test]
async fn every_sequence_the_engine_generates_is_booked() {
    let one = booked_blocks(json!({})).await;
    assert!(one > 0);
    // 4 prompt tokens + 64 output tokens in blocks of 16: 5 blocks; n = 4 books 4 outputs.
    assert_eq!(booked_blocks(json!({"n": 4})).await, one + 3 * 4);
    assert_eq!(
        booked_blocks(json!({"n": 2, "best_of": 3})).await,
        one + 2 * 4
    );
    let batch = booked_blocks(json!({"prompt": [[1, 2], [3, 4]], "n": 2})).await;
    assert_eq!(batch, one + 3 * 4, "two prompts times two sequences");
    for bad in [
        json!({"n": 0}),
        json!({"best_of": 100_000}),
        json!({"n": "2"}),
    ] {
        let (_worker, node) = fleet(Duration::from_millis(1)).await;
        let body = with(json!({"model": "m", "prompt": "hello"}), &bad);
        let response = node.call("/v1/completions", body).await;
        assert_eq!(response.status(), 400, "{bad}");
    }
}
