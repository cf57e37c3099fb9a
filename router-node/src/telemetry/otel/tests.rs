//! The resolution rules of `otel`: precedence of the endpoint variables, protocols, the
//! service name and resource attributes, samplers, refusals and the off switches.

use super::*;
use std::collections::HashMap;

fn resolve_with(
    config: &TelemetrySection,
    vars: &[(&str, &str)],
) -> Result<Option<TraceExport>, OtelEnvError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    resolve(config, |name| vars.get(name).cloned())
}

fn export(vars: &[(&str, &str)]) -> TraceExport {
    resolve_with(&TelemetrySection::default(), vars)
        .expect("valid")
        .expect("exporting")
}

#[test]
fn nothing_set_exports_nothing() {
    let none = resolve_with(&TelemetrySection::default(), &[]).expect("valid");
    assert_eq!(none, None);
    // Only a service name or a sampler: still nowhere to send spans.
    let none = resolve_with(
        &TelemetrySection::default(),
        &[
            ("OTEL_SERVICE_NAME", "x"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
        ],
    );
    assert_eq!(none, Ok(None));
}

#[test]
fn the_standard_endpoint_is_a_base_url_and_http_protobuf_by_default() {
    let e = export(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]);
    assert_eq!(e.endpoint, "http://collector:4318/v1/traces");
    assert_eq!(e.protocol, OtlpProtocol::Http);
    assert_eq!(e.endpoint_from, "OTEL_EXPORTER_OTLP_ENDPOINT");
    assert_eq!(e.service_name, "switchyard-router");
    assert_eq!(e.sampler, SamplerChoice::ParentBasedAlwaysOn);
    assert_eq!(e.timeout, Some(EXPORT_TIMEOUT));
    let grpc = export(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ]);
    assert_eq!(
        (grpc.endpoint.as_str(), grpc.protocol),
        ("http://collector:4317", OtlpProtocol::Grpc)
    );
}

#[test]
fn the_traces_variables_win_over_the_general_ones_and_over_the_config() {
    let config = TelemetrySection {
        otlp_endpoint: Some("http://from-config:4317".to_owned()),
        ..TelemetrySection::default()
    };
    let e = resolve_with(
        &config,
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
            ("SWITCHYARD_OTLP_ENDPOINT", "http://alias:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    )
    .expect("valid")
    .expect("exporting");
    assert_eq!(e.endpoint, "http://t:4318/custom", "used as given");
    assert_eq!(e.protocol, OtlpProtocol::Http);
    // The alias beats the file; the file's protocol (gRPC by default) goes with both.
    let alias = resolve_with(
        &config,
        &[("SWITCHYARD_OTLP_ENDPOINT", "http://alias:4317")],
    )
    .expect("valid")
    .expect("exporting");
    assert_eq!(
        (alias.endpoint.as_str(), alias.protocol, alias.endpoint_from),
        (
            "http://alias:4317",
            OtlpProtocol::Grpc,
            "SWITCHYARD_OTLP_ENDPOINT"
        )
    );
    let file = resolve_with(&config, &[])
        .expect("valid")
        .expect("exporting");
    assert_eq!(file.endpoint_from, "telemetry.otlp_endpoint");
    // A protocol variable applies to the configured endpoint too.
    let http = resolve_with(&config, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])
        .expect("valid")
        .expect("exporting");
    assert_eq!(http.protocol, OtlpProtocol::Http);
}

#[test]
fn service_name_and_resource_attributes() {
    let e = export(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod, service.name=from-attrs,team=a%2Cb%3Dc",
        ),
    ]);
    assert_eq!(e.service_name, "from-attrs");
    assert_eq!(
        e.resource,
        vec![
            ("deployment.environment".to_owned(), "prod".to_owned()),
            ("team".to_owned(), "a,b=c".to_owned()),
        ]
    );
    let named = export(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs"),
        ("OTEL_SERVICE_NAME", "router-eu-1"),
    ]);
    assert_eq!(named.service_name, "router-eu-1");
}

#[test]
fn samplers_and_their_ratio() {
    let with = |sampler: &str, arg: Option<&str>| {
        let mut vars = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_SAMPLER", sampler),
        ];
        if let Some(arg) = arg {
            vars.push(("OTEL_TRACES_SAMPLER_ARG", arg));
        }
        resolve_with(&TelemetrySection::default(), &vars).map(|e| e.map(|e| e.sampler))
    };
    assert_eq!(with("always_off", None), Ok(Some(SamplerChoice::AlwaysOff)));
    assert_eq!(
        with("traceidratio", Some("0.25")),
        Ok(Some(SamplerChoice::TraceIdRatio(0.25)))
    );
    assert_eq!(
        with("parentbased_traceidratio", None),
        Ok(Some(SamplerChoice::ParentBasedTraceIdRatio(1.0)))
    );
    assert_eq!(
        with("parentbased_always_off", None),
        Ok(Some(SamplerChoice::ParentBasedAlwaysOff))
    );
    assert_eq!(
        with("traceidratio", Some("1.5")).map_err(|e| e.name),
        Err("OTEL_TRACES_SAMPLER_ARG")
    );
    assert_eq!(
        with("jaeger_remote", None).map_err(|e| e.name),
        Err("OTEL_TRACES_SAMPLER")
    );
}

#[test]
fn unusable_values_are_refused_by_name_and_off_switches_win() {
    let refused = |vars: &[(&str, &str)]| {
        resolve_with(&TelemetrySection::default(), vars)
            .map(|_| ())
            .map_err(|e| e.name)
    };
    let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
    assert_eq!(
        refused(&[base, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]),
        Err("OTEL_EXPORTER_OTLP_PROTOCOL")
    );
    assert_eq!(
        refused(&[base, ("OTEL_TRACES_EXPORTER", "zipkin")]),
        Err("OTEL_TRACES_EXPORTER")
    );
    assert_eq!(
        refused(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]),
        Err("OTEL_EXPORTER_OTLP_ENDPOINT")
    );
    assert_eq!(
        refused(&[base, ("OTEL_RESOURCE_ATTRIBUTES", "novalue")]),
        Err("OTEL_RESOURCE_ATTRIBUTES")
    );
    for off in [
        ("OTEL_TRACES_EXPORTER", "none"),
        ("OTEL_SDK_DISABLED", "true"),
    ] {
        assert_eq!(
            resolve_with(&TelemetrySection::default(), &[base, off]),
            Ok(None)
        );
    }
    let timed = export(&[base, ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")]);
    assert_eq!(timed.timeout, None, "left to the exporter");
}
