//! Traces in a real OpenTelemetry backend: Arize Phoenix (from PyPI, `scripts/install-phoenix.sh`)
//! receives the spans of two `serve` replicas over NATS and a simulated worker, configured
//! only through the standard environment, and its query API shows each request's trace with
//! the expected parents.
//!
//! - replica 0 exports over OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`, the base URL, protocol
//!   by default `http/protobuf`); replica 1 over OTLP/gRPC through the `SWITCHYARD_OTLP_ENDPOINT`
//!   alias; the worker over HTTP;
//! - every process puts its spans in one Phoenix project named by `OTEL_RESOURCE_ATTRIBUTES`
//!   (`openinference.project.name`), so finding them there shows the resource attributes
//!   arrived;
//! - the replicas sample with `OTEL_TRACES_SAMPLER=parentbased_always_off`: a request without
//!   a `traceparent` leaves no trace at all, one with a sampled `traceparent` is traced;
//! - in each traced request: the client's span id is the parent of the replica's
//!   `http.request` (a server span); `router.admission` (class, outcome, queue wait, worker,
//!   blocks) and `worker.leg` (a client span) are its children, `router.selection` the
//!   admission's; the worker's `worker.generate` (a server span in another process) is the
//!   child of `worker.leg`: the trace context went client → router → engine.
//!
//! Ignored by default (it needs Phoenix, about 850 MB): `scripts/test-traces.sh` installs it
//! and runs this. It skips, saying so, only when Phoenix cannot be installed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::time::Duration;
use switchyard_system_tests::support::{ClusterBuilder, Phoenix, Role};

const CLIENT_TRACES: [(&str, &str); 2] = [
    ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"),
    ("9c1e6a0d2b7f4e58a3d6c0b1e2f3a4b5", "1a2b3c4d5e6f7081"),
];

/// The spans a traced request leaves: the replica's four and the worker's one.
const SPANS_PER_TRACE: usize = 5;

/// An attribute as text (strings unquoted, numbers and booleans as written).
fn attr(span: &Value, key: &str) -> String {
    match &span["attributes"][key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found: Vec<_> = spans.iter().filter(|s| s["name"] == name).collect();
    assert_eq!(found.len(), 1, "one {name} wanted: {spans:#?}");
    found[0]
}

fn span_id(span: &Value) -> &str {
    span["context"]["span_id"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Arize Phoenix: scripts/test-traces.sh installs it and runs this"]
async fn two_replicas_and_a_worker_trace_into_phoenix_with_the_clients_parent() {
    let bin = match Phoenix::binary() {
        Ok(bin) => bin,
        Err(why) => {
            eprintln!("SKIPPED: no trace backend: Arize Phoenix cannot be installed here: {why}");
            return;
        }
    };
    let phoenix = Phoenix::start(bin).await;
    let project = format!("switchyard-{}", uuid::Uuid::new_v4().simple());
    let attributes = format!("openinference.project.name={project},deployment.environment=test");
    let cluster = ClusterBuilder::new()
        .replicas(2)
        .workers(Role::Agg, 1, 4096)
        .speedup(20.0)
        .without_haproxy()
        .env("OTEL_RESOURCE_ATTRIBUTES", &attributes)
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .worker_env("OTEL_EXPORTER_OTLP_ENDPOINT", &phoenix.http_url())
        .worker_env("OTEL_SERVICE_NAME", "switchyard-worker")
        .replica_env(0, "OTEL_EXPORTER_OTLP_ENDPOINT", &phoenix.http_url())
        .replica_env(0, "OTEL_SERVICE_NAME", "switchyard-router-a")
        .replica_env(0, "OTEL_TRACES_SAMPLER", "parentbased_always_off")
        .replica_env(1, "SWITCHYARD_OTLP_ENDPOINT", &phoenix.grpc_url())
        .replica_env(1, "OTEL_SERVICE_NAME", "switchyard-router-b")
        .replica_env(1, "OTEL_TRACES_SAMPLER", "parentbased_always_off")
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let send = |url: String, traceparent: Option<String>| {
        let http = http.clone();
        async move {
            let mut request = http.post(format!("{url}/v1/completions")).json(&json!({
                "model": "sim", "prompt": "tell me about trace context", "max_tokens": 6,
                "stream": true,
            }));
            if let Some(traceparent) = traceparent {
                request = request.header("traceparent", traceparent);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            let text = response.text().await.unwrap();
            assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        }
    };
    // Not traced: the replica samples only what its client sampled.
    send(cluster.replicas[0].url().to_owned(), None).await;
    for (replica, (trace, parent)) in cluster.replicas.iter().zip(CLIENT_TRACES) {
        send(
            replica.url().to_owned(),
            Some(format!("00-{trace}-{parent}-01")),
        )
        .await;
    }

    for (i, (trace, client_span)) in CLIENT_TRACES.iter().enumerate() {
        let query = format!("trace_id={trace}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let spans = loop {
            let spans = phoenix.spans(&http, &project, &query).await.unwrap();
            if spans.len() >= SPANS_PER_TRACE {
                break spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "replica {i}: {} of {SPANS_PER_TRACE} spans of trace {trace} in Phoenix \
                 project {project}: {spans:#?}\n{}\n{}",
                spans.len(),
                cluster.outputs(),
                phoenix.output()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert_eq!(spans.len(), SPANS_PER_TRACE, "{spans:#?}");
        let request = named(&spans, "http.request");
        let admission = named(&spans, "router.admission");
        let selection = named(&spans, "router.selection");
        let leg = named(&spans, "worker.leg");
        let generate = named(&spans, "worker.generate");
        for span in &spans {
            assert_eq!(span["context"]["trace_id"], *trace, "{span:#}");
        }
        assert_eq!(request["parent_id"], *client_span, "{request:#}");
        assert_eq!(admission["parent_id"], span_id(request), "{admission:#}");
        assert_eq!(selection["parent_id"], span_id(admission), "{selection:#}");
        assert_eq!(leg["parent_id"], span_id(request), "{leg:#}");
        assert_eq!(
            generate["parent_id"],
            span_id(leg),
            "the worker's span is the leg's child: {generate:#}"
        );
        assert_eq!(attr(request, "http.response.status_code"), "200");
        assert_eq!(attr(request, "class"), "default");
        assert_eq!(attr(admission, "outcome"), "admitted");
        assert_eq!(attr(admission, "class"), "default");
        assert_eq!(attr(admission, "pool"), "aggregated");
        assert_eq!(attr(admission, "worker"), "1");
        assert!(
            !attr(admission, "queue_wait_ms").is_empty(),
            "{admission:#}"
        );
        assert!(
            !attr(admission, "matched_blocks").is_empty(),
            "{admission:#}"
        );
        assert_eq!(attr(leg, "worker"), "1");
        assert_eq!(attr(generate, "worker"), "1");
        assert_eq!(attr(generate, "role"), "agg");
    }
    // The unsampled request left nothing: every span in the project has a parent (the root
    // of each trace is the client's span, which is not in Phoenix).
    let roots = phoenix
        .spans(&http, &project, "parent_id=null")
        .await
        .unwrap();
    assert!(roots.is_empty(), "untraced spans were exported: {roots:#?}");
    let all = phoenix.spans(&http, &project, "").await.unwrap();
    assert_eq!(all.len(), SPANS_PER_TRACE * CLIENT_TRACES.len(), "{all:#?}");

    cluster.stop_cleanly();
}
