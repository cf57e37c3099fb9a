//! The frontend's input limits over real sockets: clients that trickle their bodies hold no
//! concurrency permit (a normal client is served at once; they get a 408 at the body read
//! timeout and their connection closes), a 4 MiB single-word prompt is refused at once,
//! `max_tokens` and prompt-token caps are 400s naming the limit (a huge text refused from its
//! byte length, before tokenizing), and a request past its deadline is ended (a stream with an
//! error event, a non-streaming request with a 504) with its booking released.

use crate::support::{Fault, Node, error_of, spawn_faulty_worker, spawn_node, spawn_worker};
use futures::StreamExt;
use router_node::frontend::Limits;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MS: Duration = Duration::from_millis(1);

/// A client that sends a request's headers announcing a `declared`-byte body, then one byte
/// of it every `every`, until the server answers and closes. Returns the answer and when the
/// server closed the connection (from the first byte sent).
async fn trickle(addr: &str, declared: usize, every: Duration) -> (String, Duration) {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {declared}\r\n\r\n"
    );
    let started = Instant::now();
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            read = conn.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            },
            _ = tick.tick() => {
                // JSON allows leading blanks: a body that is valid so far, never finished.
                let _ = conn.write_all(b" ").await;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the server never closed a trickling client's connection"
        );
    }
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

fn addr(node: &Node) -> String {
    node.url.trim_start_matches("http://").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_hold_no_permit_and_get_a_408_at_the_body_timeout() {
    let worker = spawn_worker(2, MS).await;
    let timeout = 1500 * MS;
    let limits = Limits {
        max_concurrent_requests: 2,
        body_read_timeout: timeout,
        ..Limits::default()
    };
    let node = spawn_node(&[&worker.url], limits).await;
    // Twice as many trickling clients as there are permits.
    let slow: Vec<_> = (0..4)
        .map(|_| tokio::spawn(trickle_owned(addr(&node), 10_000, 100 * MS)))
        .collect();
    tokio::time::sleep(300 * MS).await;
    let asked = Instant::now();
    let normal = node
        .call("/v1/completions", json!({"model": "m", "prompt": "hello"}))
        .await;
    let took = asked.elapsed();
    assert_eq!(normal.status(), 200, "{:?}", normal.text().await);
    assert!(
        took < timeout,
        "a normal client waited {took:?} behind trickling ones"
    );
    for client in slow {
        let (answer, closed) = client.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("body_timeout"), "{answer}");
        assert!(
            answer.contains(&timeout.as_millis().to_string()),
            "{answer}"
        );
        // Cut at the timeout, and the connection closed after the answer.
        assert!(closed >= timeout && closed < timeout * 3, "{closed:?}");
    }
    let metrics = node.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(
            r#"switchyard_http_rejections_total{class="interactive",reason="body_timeout"} 4"#
        ),
        "{metrics}"
    );
    node.assert_idle().await;
}

async fn trickle_owned(addr: String, declared: usize, every: Duration) -> (String, Duration) {
    trickle(&addr, declared, every).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4_mib_single_word_prompt_is_refused_at_once() {
    let worker = spawn_worker(1, MS).await;
    // Room for the 4 MiB prompt and its JSON around it.
    let limits = Limits {
        max_body_bytes: 8 * 1024 * 1024,
        ..Limits::default()
    };
    let max_word = limits.max_word_bytes;
    let node = spawn_node(&[&worker.url], limits).await;
    let word = "a".repeat(4 * 1024 * 1024);
    let started = Instant::now();
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": word}))
        .await;
    let took = started.elapsed();
    assert_eq!(response.status(), 400);
    let err = error_of(response).await;
    assert_eq!(err["reason"], "word_too_long", "{err}");
    let message = err["message"].as_str().unwrap();
    // Read up to a few bytes past the limit, not the whole 4 MiB: a lower bound over it.
    let at_least: usize = message
        .split("at least ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no length in {message}"));
    assert!(at_least > max_word && at_least < 2 * max_word, "{message}");
    assert!(message.contains(&max_word.to_string()), "{message}");
    println!("a 4 MiB single-word prompt refused in {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Within the limit, words are served.
    let fine = node
        .call(
            "/v1/completions",
            json!({"model": "m", "prompt": "a".repeat(max_word)}),
        )
        .await;
    assert_eq!(fine.status(), 200);
    assert_eq!(
        worker.seen.lock().unwrap().len(),
        1,
        "only the word within the limit"
    );
    node.assert_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_and_prompt_tokens_over_their_limits_are_400s_naming_them() {
    // The tokenizer's vocabulary read, as `serve` does in the background at start.
    router_tokenizer::Prompter::default().warm().await;
    let worker = spawn_worker(1, MS).await;
    let limits = Limits {
        max_tokens_limit: 1000,
        max_prompt_tokens: Some(500),
        ..Limits::default()
    };
    let node = spawn_node(&[&worker.url], limits).await;
    let call = |body| node.call("/v1/completions", body);

    let over = call(json!({"model": "m", "prompt": [1, 2], "max_tokens": 1001})).await;
    assert_eq!(over.status(), 400);
    let err = error_of(over).await;
    assert_eq!(err["reason"], "max_tokens_too_large");
    assert!(err["message"].as_str().unwrap().contains("1000"), "{err}");
    let chat = node
        .call(
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "max_completion_tokens": 5000}),
        )
        .await;
    assert_eq!(error_of(chat).await["reason"], "max_tokens_too_large");
    let at = call(json!({"model": "m", "prompt": [1, 2], "max_tokens": 1000})).await;
    assert_eq!(at.status(), 200);

    // Token ids are counted as they are.
    let ids: Vec<u32> = (0..501).collect();
    let long = call(json!({"model": "m", "prompt": ids})).await;
    assert_eq!(long.status(), 400);
    let err = error_of(long).await;
    assert_eq!(err["reason"], "prompt_too_long");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("501") && message.contains("500"),
        "{message}"
    );

    // Text: counted after tokenizing (600 words of one token each)...
    let words = "hello ".repeat(600);
    let err = error_of(call(json!({"model": "m", "prompt": words})).await).await;
    assert_eq!(err["reason"], "prompt_too_long");
    assert!(
        !err["message"].as_str().unwrap().contains("at least"),
        "{err}"
    );
    // ... and 1 MiB of it refused from its length alone (128 bytes at most per token: at
    // least 8192 tokens), without tokenizing.
    let huge = "hello ".repeat(1024 * 1024 / 6);
    let started = Instant::now();
    let response = call(json!({"model": "m", "prompt": huge})).await;
    let took = started.elapsed();
    let err = error_of(response).await;
    assert_eq!(err["reason"], "prompt_too_long");
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("at least 8192 tokens"), "{message}");
    assert!(message.contains("500"), "{message}");
    println!("1 MiB of text over the prompt cap refused in {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        worker.seen.lock().unwrap().len(),
        1,
        "only the request within the limits"
    );
    node.assert_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stalled_past_the_deadline_ends_with_an_error_event_and_frees_its_booking() {
    // Two chunks, then the worker goes silent with the connection open.
    let worker = spawn_faulty_worker(10, 20 * MS, Fault::StallAfter(2)).await;
    let deadline = 1200 * MS;
    let limits = Limits {
        request_timeout: deadline,
        ..Limits::default()
    };
    let node = spawn_node(&[&worker.url], limits).await;
    // The tokenizer loaded before the clock starts (a debug build on a loaded machine takes
    // a good part of the deadline to build it on the first request).
    node.state.prompter.clone().warm().await;
    let started = Instant::now();
    let response = node
        .call(
            "/v1/completions",
            json!({"model": "m", "prompt": "stall", "stream": true}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let ended = started.elapsed();
    assert_eq!(text.matches("\"text\":\"tok\"").count(), 2, "{text}");
    let last = text.trim_end().rsplit("data: ").next().unwrap();
    let event: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(event["error"]["reason"], "request_timeout", "{text}");
    assert!(
        event["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&deadline.as_millis().to_string())
    );
    assert!(!text.contains("[DONE]"), "{text}");
    assert!(ended >= deadline && ended < deadline * 3, "{ended:?}");
    node.assert_idle().await;

    // A non-streaming client gets a 504 at the deadline.
    let started = Instant::now();
    let response = node
        .call("/v1/completions", json!({"model": "m", "prompt": "stall"}))
        .await;
    let ended = started.elapsed();
    assert_eq!(response.status(), 504);
    assert_eq!(error_of(response).await["reason"], "request_timeout");
    assert!(ended >= deadline && ended < deadline * 3, "{ended:?}");
    node.assert_idle().await;
    let metrics = node.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(
            r#"switchyard_http_rejections_total{class="interactive",reason="request_timeout"} 2"#
        ),
        "{metrics}"
    );
}
