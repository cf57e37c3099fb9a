//! Traces over OTLP: a request carrying a W3C `traceparent` produces spans in the client's
//! trace, with every span pointing at its parent, exported to an in-process OTLP gRPC
//! collector; the worker receives the `worker.leg` span as its parent. The request span
//! carries the class, the classifier rule that chose it and the name of the API key (never
//! the key).
//!
//! One test per binary: it installs the process-wide subscriber.

#![allow(clippy::unwrap_used)]

mod support;

use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use router_core::PolicyProfile;
use router_node::auth::{KeyStore, generate_key, hash_key, to_hex};
use router_node::config::{OtlpProtocol, TelemetrySection};
use router_node::frontend::Limits;
use router_node::telemetry;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

fn one<'a>(spans: &'a [ExportedSpan], name: &str) -> &'a ExportedSpan {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "{name}: {spans:#?}");
    found[0]
}

fn has(span: &ExportedSpan, key: &str, value: &str) {
    let shown = span.attributes.get(key).map(String::as_str).unwrap_or("");
    assert!(
        shown.contains(value),
        "{} {key} = {shown:?}, wanted {value}",
        span.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_the_collector_in_the_clients_trace() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let config = TelemetrySection {
        otlp_endpoint: Some(collector.endpoint()),
        otlp_protocol: OtlpProtocol::Grpc,
        service_name: "switchyard-test".to_owned(),
        log_filter: "warn".to_owned(),
        ..TelemetrySection::default()
    };
    let guard = telemetry::init(&config).unwrap();
    assert!(guard.exporting());

    let worker = support::spawn_worker(2, Duration::from_millis(1)).await;
    // The shared profile plus one classifier rule that matches this request.
    let profile = format!(
        "{}\n[[classifiers]]\nname = \"model-m\"\nmodel = \"m\"\nclass = \"interactive\"\n",
        support::PROFILE
    );
    let key = generate_key().unwrap();
    let keys = format!(
        "[[keys]]\nname = \"team-a\"\nsha256 = \"{}\"\nclasses = [\"interactive\"]\n",
        to_hex(&hash_key(&key))
    );
    let policy = Arc::new(PolicyProfile::from_toml_str(&profile).unwrap());
    let keys = Arc::new(KeyStore::from_text(Path::new("keys.toml"), &keys, policy).unwrap());
    let node = support::spawn_node_tuned(
        &[&worker.url],
        Limits::default(),
        Default::default(),
        &profile,
        |state| state.with_auth(keys),
    )
    .await;
    // A streaming request: `worker.leg` lives until the stream ends.
    let response = node
        .post("/v1/completions")
        .bearer_auth(&key)
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"))
        .json(&serde_json::json!({"model": "m", "prompt": "hello", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    node.assert_idle().await;

    guard.flush().await;
    let spans = collector.exported_spans(4, Duration::from_secs(10)).await;
    let request = one(&spans, "http.request");
    let admission = one(&spans, "router.admission");
    let selection = one(&spans, "router.selection");
    let leg = one(&spans, "worker.leg");

    // Every span is in the client's trace.
    for span in [request, admission, selection, leg] {
        assert_eq!(span.trace_id, TRACE_ID, "{span:#?}");
    }
    // The parent chain: client → http.request → {router.admission → router.selection,
    // worker.leg}.
    assert_eq!(request.parent_span_id, CLIENT_SPAN);
    assert_eq!(request.kind, "SPAN_KIND_SERVER");
    assert_eq!(admission.parent_span_id, request.span_id);
    assert_eq!(selection.parent_span_id, admission.span_id);
    assert_eq!(leg.parent_span_id, request.span_id);
    assert_eq!(leg.kind, "SPAN_KIND_CLIENT");

    // Attributes (the collector shows each value as its OTLP `AnyValue`).
    has(admission, "class", "\"interactive\"");
    has(admission, "outcome", "\"admitted\"");
    has(selection, "worker", "\"1\"");
    has(request, "http.response.status_code", "200");
    has(request, "http.route", "\"/v1/completions\"");
    has(request, "class", "\"interactive\"");
    has(request, "classifier.rule", "\"model-m\"");
    has(request, "key", "\"team-a\"");
    for span in &spans {
        assert!(
            span.attributes.values().all(|v| !v.contains(&key)),
            "{span:#?}"
        );
    }

    // The worker got the leg as its parent, in the same trace.
    let seen = worker.seen.lock().unwrap().clone();
    let traceparent = seen[0].traceparent.clone().unwrap();
    assert_eq!(traceparent, format!("00-{TRACE_ID}-{}-01", leg.span_id));

    guard.shutdown().await;
}
