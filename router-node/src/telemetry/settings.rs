//! `[telemetry]`'s settings: the log format and filter, and where traces go. Defined with
//! the telemetry that reads them (the node's config holds a section of this type), so
//! telemetry depends on no other part of the node.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP over gRPC (tonic), usually port 4317.
    #[default]
    Grpc,
    /// OTLP over HTTP/protobuf, usually `http://host:4318/v1/traces` (give the full URL).
    Http,
}

/// `[telemetry]`: logs and traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// Logs are events only (spans go to the OTLP exporter alone).
    pub log_format: LogFormat,
    /// A `tracing` env-filter directive for log events (`info`, `router_node=debug,info`, ...).
    pub log_filter: String,
    /// Where to export traces; absent: no trace export.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: OtlpProtocol,
    /// `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Text,
            log_filter: "info".to_owned(),
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::Grpc,
            service_name: "switchyard-router".to_owned(),
        }
    }
}
