//! The router's HTTP frontend in front of a real simulated worker: the frontend forces
//! `stream: true` upstream and parses the worker's SSE; streaming and non-streaming clients
//! get the worker's tokens, and every booking is released at the end.

use crate::support;
use crate::support::{spawn_node, spawn_sim_worker};
use router_actors::bus::local::LocalBus;
use router_core::WorkerId;
use router_node::frontend::Limits;
use router_sim::{SimConfig, SimWorker};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

#[tokio::test]
async fn the_frontend_relays_a_simulated_worker() {
    let worker = spawn_sim_worker(20.0).await;
    let node = spawn_node(&[worker.endpoint()], Limits::default()).await;

    let body: Value = node
        .call(
            "/v1/completions",
            json!({"model": "sim", "prompt": "hello world", "max_tokens": 5}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["text"], "tok tok tok tok tok ", "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 5, "{body}");

    let text = node
        .post("/v1/chat/completions")
        .json(
            &json!({"model": "sim", "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 3, "stream": true}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text.matches(r#""content":"tok ""#).count(), 3, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    node.assert_idle().await;
}

/// Streamed responses go out in small writes: without `TCP_NODELAY` on the worker's and the
/// frontend's accepted sockets, each would wait for the client's delayed ACK (~40 ms), so
/// ten streamed requests would take at least 400 ms. An instant worker takes no engine time.
#[tokio::test]
async fn streamed_responses_do_not_wait_for_delayed_acks() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = SimConfig {
        worker_id: WorkerId(1),
        instant: true,
        heartbeat: Duration::from_millis(100),
        ..support::sim_config()
    };
    let worker = SimWorker::start(listener, Arc::new(LocalBus::new()), cfg)
        .await
        .unwrap();
    let node = spawn_node(&[worker.endpoint()], Limits::default()).await;
    let body = json!({"model": "sim", "prompt": "hello", "max_tokens": 2, "stream": true});
    let stream = || async {
        let text = node
            .post("/v1/completions")
            .json(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    };
    stream().await; // connections and tokenizer warm
    let start = tokio::time::Instant::now();
    for _ in 0..10 {
        stream().await;
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(400),
        "10 streamed requests took {took:?}"
    );
    node.assert_idle().await;
}
