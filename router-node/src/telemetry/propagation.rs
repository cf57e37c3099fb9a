//! W3C trace context across the node: the client's `traceparent` / `tracestate` become the
//! parent of the request's `http.request` span, and a span's own context goes to the worker.
//!
//! Without an OpenTelemetry layer installed both are no-ops, and the frontend passes the
//! client's headers on unchanged.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The headers trace context travels in.
pub const HEADERS: [&str; 2] = ["traceparent", "tracestate"];

struct Extract<'a>(&'a HeaderMap);

impl Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct Inject<'a>(&'a mut HeaderMap);

impl Injector for Inject<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Makes the trace context in `headers` (if valid) the parent of `span`. Call it before
/// the span is first entered. A malformed `traceparent` is ignored: the span starts a trace.
pub fn set_remote_parent(span: &tracing::Span, headers: &HeaderMap) {
    if span.is_disabled() {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&Extract(headers));
    if cx.span().span_context().is_valid() {
        // Fails only without an OpenTelemetry layer, where there is nothing to link.
        let _ = span.set_parent(cx);
    }
}

/// `span`'s trace context as W3C headers; empty when the span is not being traced.
pub fn context_headers(span: &tracing::Span) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if span.is_disabled() {
        return headers;
    }
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut Inject(&mut headers));
    }
    headers
}
