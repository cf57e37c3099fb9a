//! OTLP over HTTP/protobuf: the exporter posts the node's spans to `/v1/traces` (from the
//! Tokio runtime: the default batch processor's own thread has no reactor for reqwest).
//! The receiver here is a bare axum route; protobuf strings are plain UTF-8, so the span
//! names and the client's trace id bytes can be found in the posted body.
//!
//! One test per binary: it installs the process-wide subscriber.

#![allow(clippy::unwrap_used)]

mod support;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use router_node::config::{OtlpProtocol, TelemetrySection};
use router_node::frontend::Limits;
use router_node::telemetry;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

type Posts = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

async fn receive(State(posts): State<Posts>, headers: HeaderMap, body: Bytes) -> &'static str {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    posts.lock().unwrap().push((content_type, body.to_vec()));
    ""
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_posted_over_http() {
    let posts: Posts = Arc::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(receive))
        .with_state(posts.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let config = TelemetrySection {
        otlp_endpoint: Some(endpoint),
        otlp_protocol: OtlpProtocol::Http,
        log_filter: "warn".to_owned(),
        ..TelemetrySection::default()
    };
    let guard = telemetry::init(&config).unwrap();
    let worker = support::spawn_worker(1, Duration::from_millis(1)).await;
    let node = support::spawn_node(&[&worker.url], Limits::default()).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let response = node
        .post("/v1/completions")
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
        .json(&serde_json::json!({"model": "m", "prompt": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    node.assert_idle().await;
    guard.shutdown().await;

    let mut body = Vec::new();
    for _ in 0..100 {
        body = posts
            .lock()
            .unwrap()
            .iter()
            .flat_map(|(_, b)| b.clone())
            .collect();
        if contains(&body, b"worker.leg") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let posted = posts.lock().unwrap().clone();
    assert!(!posted.is_empty(), "nothing was posted");
    assert!(
        posted.iter().all(|(ct, _)| ct == "application/x-protobuf"),
        "{posted:?}"
    );
    for name in [
        "http.request",
        "router.admission",
        "router.selection",
        "worker.leg",
    ] {
        assert!(contains(&body, name.as_bytes()), "{name} not exported");
    }
    let trace_bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&trace_id[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert!(
        contains(&body, &trace_bytes),
        "the client's trace id is not in the export"
    );
}
