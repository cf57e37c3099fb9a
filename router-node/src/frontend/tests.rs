//! Unit tests of the frontend's pure parts: body parsing and its field-naming errors, the
//! documented chat rendering, the forced upstream `stream`, the status mapping of every
//! rejection reason, and the metrics text. No input may panic.

use super::error::ApiError;
use super::openai::ParsedRequest;
use crate::metrics::Metrics;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use router_core::Endpoint;
use router_core::queue::{ExpiryStage, LimitKind};
use router_core::{GateClosed, RankId, RejectReason, WorkerId};
use router_tokenizer::{PromptInput, render_chat};
use serde_json::{Value, json};
use std::time::Duration;

fn parse(endpoint: Endpoint, body: &Value) -> Result<ParsedRequest, ApiError> {
    ParsedRequest::parse(endpoint, body.to_string().as_bytes())
}

fn field_error(endpoint: Endpoint, body: Value) -> String {
    match parse(endpoint, &body) {
        Ok(p) => panic!("accepted {body}: {p:?}"),
        Err(e) => {
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            e.message
        }
    }
}

#[test]
fn chat_messages_render_as_role_colon_content_lines_then_assistant() {
    let messages = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "image_url"}, {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": null},
    ]);
    assert_eq!(
        render_chat(Some(&messages)).ok(),
        Some("system: be brief\nuser: hi there\nassistant: \nassistant:".to_owned())
    );
}

#[test]
fn every_prompt_shape_is_read() {
    let cases = [
        (json!("abc"), PromptInput::Text(vec!["abc".into()])),
        (
            json!(["a", "b"]),
            PromptInput::Text(vec!["a".into(), "b".into()]),
        ),
        (json!([1, 2, 3]), PromptInput::Tokens(vec![1, 2, 3])),
        (json!([[1, 2], [3]]), PromptInput::Tokens(vec![1, 2, 3])),
    ];
    for (prompt, expected) in cases {
        let p = parse(
            Endpoint::Completions,
            &json!({"model": "m", "prompt": prompt}),
        )
        .unwrap_or_else(|e| panic!("{prompt}: {}", e.message));
        assert_eq!(p.prompt, expected);
        assert!(!p.stream);
        assert_eq!(p.max_tokens, None);
    }
}

#[test]
fn errors_name_the_field() {
    let c = Endpoint::Completions;
    let cases = [
        (c, json!([1]), "`body`"),
        (c, json!({"model": 3, "prompt": "x"}), "`model`"),
        (c, json!({"model": "", "prompt": "x"}), "`model`"),
        (c, json!({"model": "m"}), "`prompt`"),
        (c, json!({"model": "m", "prompt": []}), "`prompt`"),
        (c, json!({"model": "m", "prompt": ["a", 1]}), "`prompt`"),
        (c, json!({"model": "m", "prompt": [1, "a"]}), "`prompt`"),
        (
            c,
            json!({"model": "m", "prompt": [1, 4294967296_u64]}),
            "`prompt`",
        ),
        (c, json!({"model": "m", "prompt": [[1], 2]}), "`prompt`"),
        (c, json!({"model": "m", "prompt": [{}]}), "`prompt`"),
        (
            c,
            json!({"model": "m", "prompt": "x", "max_tokens": -1}),
            "`max_tokens`",
        ),
        (
            c,
            json!({"model": "m", "prompt": "x", "max_tokens": 1.5}),
            "`max_tokens`",
        ),
        (
            c,
            json!({"model": "m", "prompt": "x", "stream": 1}),
            "`stream`",
        ),
        (
            Endpoint::Chat,
            json!({"model": "m", "messages": []}),
            "`messages`",
        ),
        (
            Endpoint::Chat,
            json!({"model": "m", "messages": {}}),
            "`messages`",
        ),
        (
            Endpoint::Chat,
            json!({"model": "m", "messages": [1]}),
            "`messages[0]`",
        ),
        (
            Endpoint::Chat,
            json!({"model": "m", "messages": [{"role": "u", "content": 1}]}),
            "`messages[0].content`",
        ),
        (
            Endpoint::Chat,
            json!({"model": "m", "messages": [{"role": "u"}], "max_completion_tokens": "x"}),
            "`max_completion_tokens`",
        ),
    ];
    for (endpoint, body, field) in cases {
        let message = field_error(endpoint, body.clone());
        assert!(message.contains(field), "{body}: {message}");
    }
}

#[test]
fn odd_bytes_are_errors_never_panics() {
    let deep = "[".repeat(100_000);
    let inputs: [&[u8]; 6] = [
        b"",
        b"\xff\xfe",
        b"null",
        b"{\"model\":\"m\",\"prompt\":\"\\ud800\"}",
        deep.as_bytes(),
        b"{\"model\":\"m\",\"prompt\":1e400}",
    ];
    for input in inputs {
        for endpoint in [Endpoint::Completions, Endpoint::Chat] {
            assert!(ParsedRequest::parse(endpoint, input).is_err());
        }
    }
}

#[test]
fn upstream_always_streams_and_keeps_other_fields() {
    let p = parse(
        Endpoint::Chat,
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false,
                "max_completion_tokens": 9, "temperature": 0.5, "vendor": {"x": [1]}}),
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(p.max_tokens, Some(9));
    let sent: Value = serde_json::from_slice(&p.upstream_body()).unwrap_or_default();
    assert_eq!(sent["stream"], json!(true));
    assert_eq!(sent["temperature"], json!(0.5));
    assert_eq!(sent["vendor"], json!({"x": [1]}));
    assert_eq!(
        sent["stream_options"],
        json!({"include_usage": true}),
        "a non-streaming answer carries usage"
    );
    // A streaming client's own stream options are passed through untouched.
    let p = parse(
        Endpoint::Completions,
        &json!({"model": "m", "prompt": "hi", "stream": true}),
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    let sent: Value = serde_json::from_slice(&p.upstream_body()).unwrap_or_default();
    assert_eq!(sent.get("stream_options"), None);
    let p = parse(
        Endpoint::Completions,
        &json!({"model": "m", "prompt": "hi", "stream": true,
                "stream_options": {"include_usage": false, "continuous_usage_stats": true}}),
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    let raw = p.upstream_body();
    let sent: Value = serde_json::from_slice(&raw).unwrap_or_default();
    assert_eq!(
        sent["stream_options"],
        json!({"include_usage": false, "continuous_usage_stats": true})
    );
    // Overridden fields are written once, not appended after the client's.
    let p = parse(
        Endpoint::Completions,
        &json!({"model": "m", "prompt": "hi", "stream": false, "stream_options": {"x": 1}}),
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    let raw = String::from_utf8(p.upstream_body()).unwrap_or_default();
    assert_eq!(raw.matches("\"stream\":").count(), 1, "{raw}");
    assert_eq!(raw.matches("\"stream_options\":").count(), 1, "{raw}");
}

#[test]
fn every_rejection_reason_has_its_status() {
    let rank = RankId::new(1, 0);
    let cases = [
        (
            RejectReason::QueueFull {
                kind: LimitKind::Requests,
                current: 1,
                limit: 1,
            },
            429,
        ),
        (
            RejectReason::DeadlinePassed {
                stage: ExpiryStage::Dispatch,
                overdue_ms: 0,
            },
            429,
        ),
        (
            RejectReason::WouldQueue {
                cause: GateClosed::PrefillBusy,
            },
            429,
        ),
        (RejectReason::BehindBacklog, 429),
        (RejectReason::AllWorkersOverloaded, 429),
        (RejectReason::NoWorkers, 503),
        (RejectReason::PinnedOverloaded { rank }, 503),
        (RejectReason::PinnedUnavailable { rank }, 503),
        (RejectReason::Duplicate, 500),
        (RejectReason::UnknownClass, 500),
    ];
    for (reason, status) in cases {
        let err = ApiError::rejected(&reason, "batch".into());
        let body: Value = serde_json::from_str(&err.body_json()).unwrap_or_default();
        assert_eq!(body["error"]["reason"], reason.label());
        assert_eq!(body["error"]["class"], "batch");
        assert_eq!(body["error"]["stage"], "admission");
        let response = err.into_response();
        assert_eq!(response.status().as_u16(), status, "{reason:?}");
        let retry = response
            .headers()
            .get("retry-after")
            .map(|v| v.as_bytes().to_vec());
        assert_eq!(retry, (status == 429).then(|| b"1".to_vec()), "{reason:?}");
    }
}

#[test]
fn metrics_render_every_family() {
    let m = Metrics::new();
    m.request("completions", "batch");
    m.rejection("batch", "queue_full");
    m.admission_latency("batch", Duration::from_millis(3));
    m.inflight_inc();
    m.prefix_hit(
        "prefill",
        router_core::PrefixHit {
            prompt_blocks: 8,
            matched_blocks: 6,
            cached_tokens: 96,
        },
    );
    m.upstream_request("decode", WorkerId(7));
    m.upstream_error("decode", WorkerId(7), "upstream_stream");
    let text = m.render();
    for needle in [
        r#"switchyard_http_requests_total{endpoint="completions",class="batch"} 1"#,
        r#"switchyard_http_rejections_total{class="batch",reason="queue_full"} 1"#,
        r#"switchyard_admission_latency_seconds_count{class="batch"} 1"#,
        "switchyard_http_inflight 1",
        r#"switchyard_prefix_matched_blocks_total{pool="prefill"} 6"#,
        r#"switchyard_prefix_prompt_blocks_total{pool="prefill"} 8"#,
        r#"switchyard_upstream_requests_total{pool="decode",worker="7"} 1"#,
        r#"switchyard_upstream_errors_total{pool="decode",worker="7",reason="upstream_stream"} 1"#,
        "# TYPE switchyard_build_info gauge",
    ] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
    // A family without a series yet is not rendered.
    assert!(!text.contains("time_to_first_token"), "{text}");
    m.inflight_dec();
    assert_eq!(m.inflight(), 0);
}

#[test]
fn a_text_prompt_moved_out_of_the_body_goes_upstream_as_it_came_or_as_ids() {
    let sent = |p: &ParsedRequest| -> Value {
        serde_json::from_slice(&p.upstream_body()).unwrap_or_default()
    };
    let one = parse(
        Endpoint::Completions,
        &json!({"model": "m", "prompt": "a long prompt", "max_tokens": 2}),
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    assert!(one.body.get("prompt").is_none(), "moved, not copied");
    assert_eq!(sent(&one)["prompt"], json!("a long prompt"));
    let batch = parse(
        Endpoint::Completions,
        &json!({"model": "m", "prompt": ["a", "b"]}),
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(sent(&batch)["prompt"], json!(["a", "b"]));
    let ids = parse(
        Endpoint::Completions,
        &json!({"model": "m", "prompt": [1, 2]}),
    )
    .unwrap_or_else(|e| panic!("{}", e.message));
    assert_eq!(sent(&ids)["prompt"], json!([1, 2]));
    let mut forwarded = one.clone();
    forwarded.set_prompt_ids(vec![7, 8, 9]);
    let raw = String::from_utf8(forwarded.upstream_body()).unwrap_or_default();
    assert_eq!(raw.matches("\"prompt\":").count(), 1, "{raw}");
    assert_eq!(sent(&forwarded)["prompt"], json!([7, 8, 9]));
}
