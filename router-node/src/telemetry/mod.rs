//! Logs and traces: a `tracing` subscriber writing text or JSON logs (events only, under an
//! env-filter directive), and, when an OTLP endpoint is configured (the standard
//! `OTEL_EXPORTER_OTLP_*` variables, `SWITCHYARD_OTLP_ENDPOINT` or `telemetry.otlp_endpoint`:
//! [`otel`] resolves them with the service name, resource attributes and sampler), an
//! OpenTelemetry tracer exporting the process's spans over OTLP (gRPC via tonic, or
//! HTTP/protobuf). Spans go to the exporter alone: without one they are disabled and cost
//! the request path nothing. `serve`, `link`, `demo` and `worker --sim` all start it.
//!
//! The request spans are made by the frontend: `http.request` (its parent is the client's
//! W3C `traceparent` when there is one) → `router.admission` (class, pool, phase, outcome,
//! reject reason, queue wait, chosen worker and rank, matched and prompt blocks; one per leg
//! when disaggregated) → `router.selection` (worker, rank, matched blocks), and one
//! `worker.leg` per leg (the upstream call, until its answer ends), whose context goes to
//! the worker as `traceparent`: a simulated worker's `worker.generate` span is its child.
//! See [`propagation`] and `docs/observability.md`.
//!
//! [`init`] installs the subscriber for the process and returns a [`TelemetryGuard`]; call
//! [`TelemetryGuard::shutdown`] at exit so the last spans are flushed.

pub mod otel;
pub mod propagation;
mod settings;

pub use otel::{OtelEnvError, SamplerChoice, TraceExport};
pub use settings::{LogFormat, OtlpProtocol, TelemetrySection};

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, LevelFilter, Targets, filter_fn};
use tracing_subscriber::layer::{Identity, SubscriberExt as _};
use tracing_subscriber::{Layer, Registry};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.log_filter: {0}")]
    Filter(String),
    #[error(transparent)]
    Env(#[from] OtelEnvError),
    #[error("{0}: cannot build the OTLP exporter: {1}")]
    Exporter(&'static str, String),
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

/// A subscriber built from `config` and the process environment (not installed) and the
/// guard of its exporter. Must be called inside a Tokio runtime when an OTLP endpoint is
/// configured.
pub fn subscriber(
    config: &TelemetrySection,
) -> Result<
    (
        impl tracing::Subscriber + Send + Sync + 'static,
        TelemetryGuard,
    ),
    TelemetryError,
> {
    subscriber_with_env(config, |name| std::env::var(name).ok())
}

/// [`subscriber`] with the environment given as a function.
pub fn subscriber_with_env(
    config: &TelemetrySection,
    env: impl Fn(&str) -> Option<String>,
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
    let (traces, provider) = match otel::resolve(config, env)? {
        // A layer that enables nothing, not `None`: an absent `Option` layer next to the
        // filtered log layer makes the registry create every span (tracing-subscriber 0.3).
        None => (Identity::new().with_filter(LevelFilter::OFF).boxed(), None),
        Some(export) => {
            let provider = tracer_provider(&export)?;
            let tracer = provider.tracer("router-node");
            // Our own crates' spans only: the exporter's (tonic, hyper, reqwest) would feed
            // back into themselves.
            let targets = Targets::new()
                .with_target("router_node", LevelFilter::INFO)
                .with_target("router_actors", LevelFilter::INFO)
                .with_target("router_engine", LevelFilter::INFO)
                .with_target("router_sim", LevelFilter::INFO)
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

fn tracer_provider(export: &TraceExport) -> Result<SdkTracerProvider, TelemetryError> {
    let resource = Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_attributes(
            export
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_service_name(export.service_name.clone())
        .build();
    let builder = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_sampler(sampler(export.sampler));
    let failed = |e: opentelemetry_otlp::ExporterBuildError| {
        TelemetryError::Exporter(export.endpoint_from, e.to_string())
    };
    let provider = match export.protocol {
        OtlpProtocol::Grpc => {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(export.endpoint.clone());
            if let Some(timeout) = export.timeout {
                exporter = exporter.with_timeout(timeout);
            }
            builder
                .with_batch_exporter(exporter.build().map_err(failed)?)
                .build()
        }
        OtlpProtocol::Http => {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(export.endpoint.clone());
            if let Some(timeout) = export.timeout {
                exporter = exporter.with_timeout(timeout);
            }
            // The default batch processor runs on a thread without a Tokio reactor, where
            // the reqwest client cannot run: export from a task on the runtime instead.
            let processor =
                opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                    exporter.build().map_err(failed)?,
                    opentelemetry_sdk::runtime::Tokio,
                )
                .build();
            builder.with_span_processor(processor).build()
        }
    };
    Ok(provider)
}

fn sampler(choice: SamplerChoice) -> Sampler {
    match choice {
        SamplerChoice::AlwaysOn => Sampler::AlwaysOn,
        SamplerChoice::AlwaysOff => Sampler::AlwaysOff,
        SamplerChoice::TraceIdRatio(r) => Sampler::TraceIdRatioBased(r),
        SamplerChoice::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        SamplerChoice::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        SamplerChoice::ParentBasedTraceIdRatio(r) => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_exporter_spans_are_disabled_and_events_still_log() {
        let (subscriber, guard) =
            subscriber_with_env(&TelemetrySection::default(), |_| None).expect("default config");
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

    // Multi-threaded: the HTTP exporter's batch processor is a task on the runtime, which
    // must run while the guard shuts it down.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_standard_environment_turns_the_exporter_on_and_bad_values_are_named() {
        let env = |name: &str| {
            (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://127.0.0.1:9".to_owned())
        };
        let (subscriber, guard) =
            subscriber_with_env(&TelemetrySection::default(), env).expect("valid");
        assert!(guard.exporting());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("http.request");
            assert!(!span.is_disabled(), "spans are exported");
        });
        guard.shutdown().await;
        let bad = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:9".to_owned()),
            "OTEL_TRACES_SAMPLER" => Some("sometimes".to_owned()),
            _ => None,
        };
        let err = subscriber_with_env(&TelemetrySection::default(), bad)
            .err()
            .expect("refused");
        assert!(
            err.to_string().starts_with("OTEL_TRACES_SAMPLER: "),
            "{err}"
        );
    }
}
