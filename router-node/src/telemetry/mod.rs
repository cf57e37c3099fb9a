//! Logs and traces: a `tracing` subscriber writing text or JSON logs (events only, under an
//! env-filter directive), and, when `telemetry.otlp_endpoint` is set, an OpenTelemetry tracer
//! exporting the node's spans over OTLP (gRPC via tonic, or HTTP/protobuf). Spans go to the
//! exporter alone: without one they are disabled and cost the request path nothing.
//!
//! The request spans are made by the frontend: `http.request` (its parent is the client's
//! W3C `traceparent` when there is one) → `router.admission` (class, outcome) →
//! `router.selection` (worker, rank), and `worker.leg` (the upstream call, until the stream
//! ends), whose context goes to the worker as `traceparent`. See [`propagation`].
//!
//! [`init`] installs the subscriber for the process and returns a [`TelemetryGuard`]; call
//! [`TelemetryGuard::shutdown`] at exit so the last spans are flushed.

pub mod propagation;

use crate::config::{LogFormat, OtlpProtocol, TelemetrySection};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::time::Duration;
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, LevelFilter, Targets, filter_fn};
use tracing_subscriber::layer::{Identity, SubscriberExt as _};
use tracing_subscriber::{Layer, Registry};

/// How long one OTLP export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.log_filter: {0}")]
    Filter(String),
    #[error("telemetry.otlp_endpoint: cannot build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(String),
}

/// Keeps the tracer provider; shutting it down flushes the spans not exported yet.
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// True when spans are exported over OTLP.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports every finished span now (blocking work runs off the async threads).
    pub async fn flush(&self) {
        if let Some(provider) = self.provider.clone() {
            let _ = tokio::task::spawn_blocking(move || provider.force_flush()).await;
        }
    }

    /// Flushes and stops the exporter.
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(e)) = done {
                eprintln!("telemetry: flushing spans at shutdown failed: {e}");
            }
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        // Not shut down through `shutdown` (an early return): flush on a plain thread, as
        // the async-runtime batch processor must not be waited on from its own runtime.
        if let Some(provider) = self.provider.take() {
            let _ = std::thread::spawn(move || provider.shutdown()).join();
        }
    }
}

/// A subscriber built from `config` (not installed) and the guard of its exporter. Must be
/// called inside a Tokio runtime when an OTLP endpoint is configured.
pub fn subscriber(
    config: &TelemetrySection,
) -> Result<
    (
        impl tracing::Subscriber + Send + Sync + 'static,
        TelemetryGuard,
    ),
    TelemetryError,
> {
    let filter = EnvFilter::try_new(&config.log_filter)
        .map_err(|e| TelemetryError::Filter(format!("{e}: {:?}", config.log_filter)))?;
    // Logs are events only: a span enabled for the log layer costs every request its
    // fields formatted into a string and a filter lookup on each poll (~8 µs of CPU per
    // request, BENCHMARKS.md), for context only the few events inside a request would print.
    // Without an exporter no layer enables a span, so request spans cost next to nothing.
    let filter = filter.and(filter_fn(|meta| meta.is_event()));
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    let (traces, provider) = match &config.otlp_endpoint {
        // A layer that enables nothing, not `None`: an absent `Option` layer next to the
        // filtered log layer makes the registry create every span (tracing-subscriber 0.3).
        None => (Identity::new().with_filter(LevelFilter::OFF).boxed(), None),
        Some(endpoint) => {
            let provider = tracer_provider(endpoint, config.otlp_protocol, &config.service_name)?;
            let tracer = provider.tracer("router-node");
            // The node's own spans only: the exporter's (tonic, hyper, reqwest) would feed
            // back into themselves.
            let targets = Targets::new()
                .with_target("router_node", LevelFilter::INFO)
                .with_target("router_actors", LevelFilter::INFO)
                .with_default(LevelFilter::OFF);
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(targets)
                .boxed();
            (layer, Some(provider))
        }
    };
    let subscriber = Registry::default().with(logs).with(traces);
    Ok((subscriber, TelemetryGuard { provider }))
}

/// Builds the subscriber and installs it for the whole process (once).
pub fn init(config: &TelemetrySection) -> Result<TelemetryGuard, TelemetryError> {
    let (subscriber, guard) = subscriber(config)?;
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| TelemetryError::AlreadyInstalled(e.to_string()))?;
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    Ok(guard)
}

fn tracer_provider(
    endpoint: &str,
    protocol: OtlpProtocol,
    service_name: &str,
) -> Result<SdkTracerProvider, TelemetryError> {
    let resource = Resource::builder()
        .with_service_name(service_name.to_owned())
        .build();
    let builder = SdkTracerProvider::builder().with_resource(resource);
    let provider = match protocol {
        OtlpProtocol::Grpc => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            builder.with_batch_exporter(exporter).build()
        }
        OtlpProtocol::Http => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            // The default batch processor runs on a thread without a Tokio reactor, where
            // the reqwest client cannot run: export from a task on the runtime instead.
            let processor =
                opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                    exporter,
                    opentelemetry_sdk::runtime::Tokio,
                )
                .build();
            builder.with_span_processor(processor).build()
        }
    };
    Ok(provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_exporter_spans_are_disabled_and_events_still_log() {
        let (subscriber, guard) = subscriber(&TelemetrySection::default()).expect("default config");
        assert!(!guard.exporting());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("http.request", class = "batch");
            assert!(span.is_disabled(), "a span without an exporter: {span:?}");
            let event_enabled = tracing::event_enabled!(tracing::Level::INFO);
            assert!(event_enabled, "info events are logged by default");
            let debug_enabled = tracing::event_enabled!(tracing::Level::DEBUG);
            assert!(!debug_enabled, "the default filter is info");
        });
    }
}
