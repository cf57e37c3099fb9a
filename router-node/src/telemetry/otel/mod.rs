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

use super::{OtlpProtocol, TelemetrySection};
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
mod tests;
