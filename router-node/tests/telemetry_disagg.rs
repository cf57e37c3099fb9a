//! Traces of a disaggregated request over OTLP: both legs get the same spans. One request
//! carrying a W3C `traceparent` through a prefill and a decode simulated worker gives, in
//! the client's trace: `http.request` → `router.admission` (one per pool, each with its
//! class, outcome, chosen worker and blocks) → `router.selection`, and one `worker.leg` per
//! leg whose context reached its worker: each worker's `worker.generate` span is the leg's
//! child. Exported to an in-process OTLP gRPC collector.
//!
//! One test per binary: it installs the process-wide subscriber.

#![allow(clippy::unwrap_used)]

mod support;

use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use router_node::config::{OtlpProtocol, TelemetrySection};
use router_node::telemetry;
use serde_json::json;
use std::time::Duration;

// The harness's other fleets and scenarios are for the disaggregated frontend tests.
#[allow(dead_code)]
#[path = "support/disagg.rs"]
mod disagg;

use disagg::*;
/// The harness serves the vLLM convention (`kv_transfer_params`).
const CONVENTION: router_node::frontend::DisaggConvention =
    router_node::frontend::DisaggConvention::Vllm;

const TRACE_ID: &str = "5b8efff798038103d269b633813fc60c";
const CLIENT_SPAN: &str = "eee19b7ec3c1b174";

/// The spans named `name` whose attribute `key` shows `value` (OTLP `AnyValue` text).
fn with<'a>(spans: &'a [ExportedSpan], name: &str, key: &str, value: &str) -> &'a ExportedSpan {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| s.attributes.get(key).is_some_and(|v| v.contains(value)))
        .collect();
    assert_eq!(found.len(), 1, "{name} with {key}={value}: {spans:#?}");
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
async fn both_legs_of_a_disaggregated_request_are_traced_down_to_their_workers() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let config = TelemetrySection {
        otlp_endpoint: Some(collector.endpoint()),
        otlp_protocol: OtlpProtocol::Grpc,
        log_filter: "warn".to_owned(),
        ..TelemetrySection::default()
    };
    let guard = telemetry::init(&config).unwrap();
    let fe = sim_fleet(16_384, 20.0, 20.0).await;
    let response = fe
        .post("/v1/completions")
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"))
        .json(&json!({"model": "sim", "prompt": prompt(3, 4), "max_tokens": 4, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    fe.assert_idle().await;

    guard.flush().await;
    let spans = collector.exported_spans(9, Duration::from_secs(10)).await;
    for span in &spans {
        assert_eq!(span.trace_id, TRACE_ID, "{span:#?}");
    }
    let request = spans.iter().find(|s| s.name == "http.request").unwrap();
    assert_eq!(request.parent_span_id, CLIENT_SPAN);
    for (pool, role, worker) in [
        ("prefill", "prefill", PREFILL_ID),
        ("decode", "decode", DECODE_ID),
    ] {
        let admission = with(&spans, "router.admission", "pool", pool);
        assert_eq!(admission.parent_span_id, request.span_id, "{pool}");
        has(admission, "class", "\"interactive\"");
        has(admission, "outcome", "\"admitted\"");
        has(admission, "worker", &format!("\"{worker}\""));
        has(admission, "prompt_blocks", "\"4\"");
        assert!(
            admission.attributes.contains_key("matched_blocks"),
            "{admission:#?}"
        );
        assert!(
            admission.attributes.contains_key("queue_wait_ms"),
            "{admission:#?}"
        );
        let selection = spans
            .iter()
            .find(|s| s.name == "router.selection" && s.parent_span_id == admission.span_id)
            .unwrap_or_else(|| panic!("no selection under the {pool} admission: {spans:#?}"));
        has(selection, "worker", &format!("\"{worker}\""));

        let leg = with(&spans, "worker.leg", "pool", pool);
        assert_eq!(leg.parent_span_id, request.span_id, "{pool}");
        assert_eq!(leg.kind, "SPAN_KIND_CLIENT");
        has(leg, "worker", &format!("\"{worker}\""));
        let generate = with(&spans, "worker.generate", "role", role);
        assert_eq!(
            generate.parent_span_id, leg.span_id,
            "{role} worker's parent"
        );
        assert_eq!(generate.kind, "SPAN_KIND_SERVER");
        has(generate, "prompt_tokens", "\"64\"");
    }
    // The decode worker was handed the staged KV; the prefill worker computed it.
    has(
        with(&spans, "worker.generate", "role", "decode"),
        "staged_prefix",
        "true",
    );
    guard.shutdown().await;
}
