//! Where and how spans are exported: the `[telemetry]` section merged with the standard
//! OpenTelemetry environment, resolved once at start-up into a [`TraceExport`] (pure: the
//! environment comes in as a function, so every rule is unit-tested).
//!
//! | variable | effect |
//! |---|---|
//! | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | no export, whatever else is set |
//! | `OTEL_TRACES_EXPORTER` | `otlp` (the default) or `none`; anything else is refused |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the full traces URL (used as given) |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | the base URL: `/v1/traces` is appended for HTTP |
//! | `SWITCHYARD_OTLP_ENDPOINT`, then `telemetry.otlp_endpoint` | as before: the URL used as given |
//! | `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL` | `grpc` or `http/protobuf` (`http/json` is refused: not built in) |
//! | `OTEL_SERVICE_NAME` | `service.name`, over `OTEL_RESOURCE_ATTRIBUTES` and `telemetry.service_name` |
//! | `OTEL_RESOURCE_ATTRIBUTES` | `key=value,...` (percent-encoded values) added to the resource |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | the sampler (default `parentbased_always_on`) and its ratio |
//!
//! Endpoints are taken in the order listed; the first one set wins. Without a protocol
//! variable, an endpoint from an `OTEL_*` variable is spoken to in `http/protobuf` (the
//! specification's default) and one from the config or `SWITCHYARD_OTLP_ENDPOINT` in
//! `telemetry.otlp_protocol`. Nothing set: no export. A value that cannot be used is an
//! error naming its variable (the node refuses to start, exit code 2) rather than a silent
//! default. The exporter itself still reads `OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`,
//! `..._COMPRESSION` (and their `_TRACES_` forms) and the batch processor `OTEL_BSP_*`.

use crate::config::{OtlpProtocol, TelemetrySection};
use std::time::Duration;

/// Which spans are sampled (`OTEL_TRACES_SAMPLER`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerChoice {
    AlwaysOn,
    AlwaysOff,
    /// This fraction of traces, by trace id.
    TraceIdRatio(f64),
    /// A traced parent's decision, else always on.
    ParentBasedAlwaysOn,
    /// A traced parent's decision, else none.
    ParentBasedAlwaysOff,
    /// A traced parent's decision, else this fraction.
    ParentBasedTraceIdRatio(f64),
}

/// Everything the tracer provider is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceExport {
    /// Where spans go: for HTTP the full traces URL, for gRPC the collector's address.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Which setting named the endpoint (for messages).
    pub endpoint_from: &'static str,
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES` less `service.name`, in their order.
    pub resource: Vec<(String, String)>,
    pub sampler: SamplerChoice,
    /// Set when no `OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT` is (the exporter reads those).
    pub timeout: Option<Duration>,
}

/// A setting that cannot be used, by the variable (or key) that holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {why}")]
pub struct OtelEnvError {
    pub name: &'static str,
    pub why: String,
}

fn invalid(name: &'static str, why: impl Into<String>) -> OtelEnvError {
    OtelEnvError {
        name,
        why: why.into(),
    }
}

/// How long one OTLP export may take unless the environment says.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The export `config` and the environment (`env(name)`, empty values unset) ask for;
/// `None` when spans are not exported.
pub fn resolve(
    config: &TelemetrySection,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<TraceExport>, OtelEnvError> {
    let get = |name: &str| {
        env(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match get("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(invalid(
                "OTEL_TRACES_EXPORTER",
                format!("{other:?} is not supported (otlp or none)"),
            ));
        }
    }
    let protocol_var = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|name| get(name).map(|v| (name, v)));
    let protocol = match &protocol_var {
        Some((name, value)) => Some(protocol_named(name, value)?),
        None => None,
    };
    let (endpoint, endpoint_from, protocol) =
        if let Some(url) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            let protocol = protocol.unwrap_or(OtlpProtocol::Http);
            (url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", protocol)
        } else if let Some(base) = get("OTEL_EXPORTER_OTLP_ENDPOINT") {
            let protocol = protocol.unwrap_or(OtlpProtocol::Http);
            let url = match protocol {
                OtlpProtocol::Http => format!("{}/v1/traces", base.trim_end_matches('/')),
                OtlpProtocol::Grpc => base,
            };
            (url, "OTEL_EXPORTER_OTLP_ENDPOINT", protocol)
        } else if let Some(url) = get("SWITCHYARD_OTLP_ENDPOINT") {
            let protocol = protocol.unwrap_or(config.otlp_protocol);
            (url, "SWITCHYARD_OTLP_ENDPOINT", protocol)
        } else if let Some(url) = config
            .otlp_endpoint
            .clone()
            .filter(|u| !u.trim().is_empty())
        {
            let protocol = protocol.unwrap_or(config.otlp_protocol);
            (url, "telemetry.otlp_endpoint", protocol)
        } else {
            return Ok(None);
        };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(invalid(
            endpoint_from,
            format!("must be an http:// or https:// URL, got {endpoint:?}"),
        ));
    }
    let mut resource = match get("OTEL_RESOURCE_ATTRIBUTES") {
        Some(text) => resource_attributes(&text)?,
        None => Vec::new(),
    };
    let from_attributes = resource
        .iter()
        .position(|(k, _)| k == "service.name")
        .map(|i| resource.remove(i).1);
    let service_name = get("OTEL_SERVICE_NAME")
        .or(from_attributes)
        .unwrap_or_else(|| config.service_name.clone());
    let timeout = [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .all(|name| get(name).is_none())
    .then_some(EXPORT_TIMEOUT);
    Ok(Some(TraceExport {
        endpoint,
        protocol,
        endpoint_from,
        service_name,
        resource,
        sampler: sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))?,
        timeout,
    }))
}

fn protocol_named(name: &'static str, value: &str) -> Result<OtlpProtocol, OtelEnvError> {
    match value {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::Http),
        "http/json" => Err(invalid(
            name,
            "http/json is not built in: use http/protobuf or grpc",
        )),
        other => Err(invalid(
            name,
            format!("{other:?} is not a protocol (grpc or http/protobuf)"),
        )),
    }
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas, values
/// percent-decoded (W3C Baggage octets).
fn resource_attributes(text: &str) -> Result<Vec<(String, String)>, OtelEnvError> {
    const NAME: &str = "OTEL_RESOURCE_ATTRIBUTES";
    let mut out = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(invalid(NAME, format!("{pair:?} is not key=value")));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(invalid(NAME, format!("{pair:?} has an empty key")));
        }
        let value = percent_decode(value.trim())
            .ok_or_else(|| invalid(NAME, format!("{pair:?}: bad percent-encoding")))?;
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn sampler(name: Option<String>, arg: Option<String>) -> Result<SamplerChoice, OtelEnvError> {
    let ratio = || -> Result<f64, OtelEnvError> {
        match &arg {
            None => Ok(1.0),
            Some(text) => text
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| {
                    invalid(
                        "OTEL_TRACES_SAMPLER_ARG",
                        format!("{text:?} is not a ratio between 0 and 1"),
                    )
                }),
        }
    };
    Ok(match name.as_deref() {
        None | Some("parentbased_always_on") => SamplerChoice::ParentBasedAlwaysOn,
        Some("always_on") => SamplerChoice::AlwaysOn,
        Some("always_off") => SamplerChoice::AlwaysOff,
        Some("traceidratio") => SamplerChoice::TraceIdRatio(ratio()?),
        Some("parentbased_always_off") => SamplerChoice::ParentBasedAlwaysOff,
        Some("parentbased_traceidratio") => SamplerChoice::ParentBasedTraceIdRatio(ratio()?),
        Some(other) => {
            return Err(invalid(
                "OTEL_TRACES_SAMPLER",
                format!(
                    "{other:?} is not supported (always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off, parentbased_traceidratio)"
                ),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
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
}
