//! The HTTP frontend over real HTTP: a reqwest client against the app on 127.0.0.1:0, a real
//! RouterActor with a real PoolRouter, and a stand-in OpenAI worker: streaming and not,
//! completions and chat, class routing, bad input, and the operational routes. After every
//! test the router's ledger is idle.

use crate::support::{error_of, spawn_node, spawn_worker};
use router_node::frontend::Limits;
use serde_json::{Value, json};
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

#[tokio::test]
async fn streaming_completion_relays_chunks_and_forwards_traceparent() {
    let worker = spawn_worker(3, 5 * MS).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let response = node
        .post("/v1/completions")
        .header("traceparent", trace)
        .json(&json!({"model": "m", "prompt": "hello there", "stream": true, "max_tokens": 8, "echo": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let text = response.text().await.unwrap();
    assert_eq!(text.matches(r#""text":"tok""#).count(), 3, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let seen = worker.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/completions");
    assert_eq!(seen[0].traceparent.as_deref(), Some(trace));
    assert_eq!(seen[0].body["stream"], json!(true));
    assert_eq!(
        seen[0].body["echo"],
        json!(false),
        "other fields pass through"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn non_streaming_completion_is_assembled_from_the_chunks() {
    let worker = spawn_worker(4, MS).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let response = node
        .call(
            "/v1/completions",
            json!({"model": "m", "prompt": [1, 2, 3, 4]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], "toktoktoktok");
    assert_eq!(body["id"], "c1");
    assert_eq!(
        worker.seen.lock().unwrap()[0].body["stream"],
        json!(true),
        "forced upstream"
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn chat_completions_stream_and_assemble() {
    let worker = spawn_worker(2, MS).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let messages =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]);
    let full = node
        .call(
            "/v1/chat/completions",
            json!({"model": "m", "messages": messages}),
        )
        .await;
    assert_eq!(full.status(), 200);
    let body: Value = full.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "toktok");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    let streamed = node
        .call(
            "/v1/chat/completions",
            json!({"model": "m", "messages": messages, "stream": true}),
        )
        .await;
    assert_eq!(streamed.status(), 200);
    let text = streamed.text().await.unwrap();
    assert_eq!(text.matches(r#""content":"tok""#).count(), 2, "{text}");
    assert!(
        worker
            .seen
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.path == "/v1/chat/completions")
    );
    node.assert_idle().await;
}

#[tokio::test]
async fn the_class_header_selects_the_class_and_an_unknown_class_is_a_400() {
    let worker = spawn_worker(1, MS).await;
    let node = spawn_node(&[&worker.url], Limits::default()).await;
    let ok = node
        .post("/v1/completions")
        .header("x-policy-class", "batch")
        .json(&json!({"model": "m", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let bad = node
        .post("/v1/completions")
        .header("x-policy-class", "platinum")
        .json(&json!({"model": "m", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let err = error_of(bad).await;
    assert_eq!(err["reason"], "unknown_class");
    assert_eq!(err["class"], "platinum");
    assert!(
        err["message"].as_str().unwrap().contains("platinum"),
        "{err}"
    );
    let metrics = node.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .contains(r#"switchyard_http_requests_total{endpoint="completions",class="batch"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"switchyard_http_rejections_total{class="unknown",reason="unknown_class"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_admission_latency_seconds_bucket"),
        "{metrics}"
    );
    assert!(metrics.contains("switchyard_http_inflight 0"), "{metrics}");
    node.assert_idle().await;
}

#[tokio::test]
async fn a_malformed_body_is_a_400_naming_the_field() {
    let node = spawn_node(&[], Limits::default()).await;
    let cases = [
        ("/v1/completions", "{not json".to_owned(), "body"),
        ("/v1/completions", r#"{"prompt": "x"}"#.to_owned(), "model"),
        (
            "/v1/completions",
            r#"{"model": "m", "prompt": 5}"#.to_owned(),
            "prompt",
        ),
        (
            "/v1/completions",
            r#"{"model": "m", "prompt": [1, -2]}"#.to_owned(),
            "prompt",
        ),
        (
            "/v1/completions",
            r#"{"model": "m", "prompt": "x", "max_tokens": "ten"}"#.to_owned(),
            "max_tokens",
        ),
        (
            "/v1/completions",
            r#"{"model": "m", "prompt": "x", "stream": "yes"}"#.to_owned(),
            "stream",
        ),
        (
            "/v1/chat/completions",
            r#"{"model": "m"}"#.to_owned(),
            "messages",
        ),
        (
            "/v1/chat/completions",
            r#"{"model": "m", "messages": [{"content": "hi"}]}"#.to_owned(),
            "messages[0].role",
        ),
    ];
    for (path, body, field) in cases {
        let response = node
            .post(path)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let err = error_of(response).await;
        let message = err["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{field}`")), "{body}: {message}");
        assert_eq!(err["type"], "invalid_request_error");
        assert_eq!(err["stage"], "request");
        assert_eq!(err["class"], "interactive");
    }
    node.assert_idle().await;
}

#[tokio::test]
async fn an_oversized_body_is_a_413() {
    let limits = Limits {
        max_body_bytes: 16 * 1024,
        ..Limits::default()
    };
    let node = spawn_node(&[], limits).await;
    let prompt = "y".repeat(64 * 1024);
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": prompt}))
        .await;
    assert_eq!(response.status(), 413);
    assert_eq!(error_of(response).await["reason"], "body_too_large");
    node.assert_idle().await;
}

#[tokio::test]
async fn no_workers_is_a_503() {
    let node = spawn_node(&[], Limits::default()).await;
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": "x"}))
        .await;
    assert_eq!(response.status(), 503);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "no_workers");
    assert_eq!(err["stage"], "admission");
    node.assert_idle().await;
}

#[tokio::test]
async fn operational_routes_answer() {
    let node = spawn_node(&[], Limits::default()).await;
    assert_eq!(node.get("/health").await.status(), 200);
    assert_eq!(node.get("/ready").await.status(), 503);
    node.ready.send(true).unwrap();
    assert_eq!(node.get("/ready").await.status(), 200);
    let models: Value = node.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "stand-in");
    let state = node.admin_get("/debug/state").await;
    assert_eq!(state.status(), 200);
    let state: Value = state.json().await.unwrap();
    assert!(state["scheduler"]["ledger"].is_object(), "{state}");
    node.assert_idle().await;
}
