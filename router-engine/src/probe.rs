//! Asking an engine over HTTP: `GET /health`, `GET /metrics`, and SGLang's server info.
//! Every request is bounded by the probe's timeout; an engine that does not answer in time
//! counts as not answering.

use crate::load::{Capacity, EngineKind, EngineReport, read_metrics, sglang_capacity};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    /// No answer within the probe's timeout: the engine may only be busy.
    #[error("{url}: no answer within the probe timeout")]
    Timeout { url: String },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: no KV capacity in the answer ({what})")]
    NoCapacity { url: String, what: &'static str },
}

/// One engine's HTTP probe.
#[derive(Debug, Clone)]
pub struct Probe {
    client: reqwest::Client,
    base: String,
    kind: EngineKind,
}

impl Probe {
    /// A probe of the engine at `base` (its OpenAI base URL, e.g. `http://host:8000`).
    pub fn new(kind: EngineKind, base: &str, timeout: Duration) -> Result<Self, ProbeError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| ProbeError::Http {
                url: base.to_owned(),
                message: e.to_string(),
            })?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_owned(),
            kind,
        })
    }

    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn get(&self, path: &str) -> Result<bytes::Bytes, ProbeError> {
        let url = format!("{}{path}", self.base);
        let http = |e: reqwest::Error| {
            if e.is_timeout() {
                ProbeError::Timeout { url: url.clone() }
            } else {
                ProbeError::Http {
                    url: url.clone(),
                    message: e.to_string(),
                }
            }
        };
        let response = self.client.get(&url).send().await.map_err(http)?;
        let status = response.status();
        if !status.is_success() {
            return Err(ProbeError::Status {
                url,
                status: status.as_u16(),
            });
        }
        response.bytes().await.map_err(http)
    }

    /// `GET /health` answered 2xx in time, or why not.
    pub async fn health(&self) -> Result<(), ProbeError> {
        self.get("/health").await.map(drop)
    }

    /// One `/metrics` scrape, read.
    pub async fn report(&self) -> Result<EngineReport, ProbeError> {
        let body = self.get("/metrics").await?;
        Ok(read_metrics(self.kind, &String::from_utf8_lossy(&body)))
    }

    /// The engine's KV block size and blocks per rank, with the scrape that gave them (vLLM)
    /// or a fresh one (SGLang, whose capacity comes from its server info).
    pub async fn capacity(&self) -> Result<(Capacity, EngineReport), ProbeError> {
        let report = self.report().await?;
        let capacity = match self.kind {
            EngineKind::Vllm => report.capacity.ok_or_else(|| ProbeError::NoCapacity {
                url: format!("{}/metrics", self.base),
                what: "vllm:cache_config_info with block_size and num_gpu_blocks",
            })?,
            EngineKind::Sglang => {
                // `/server_info` in current releases, `/get_server_info` in older ones.
                let body = match self.get("/server_info").await {
                    Ok(body) => body,
                    Err(_) => self.get("/get_server_info").await?,
                };
                sglang_capacity(&body).ok_or_else(|| ProbeError::NoCapacity {
                    url: format!("{}/server_info", self.base),
                    what: "page_size and max_total_num_tokens",
                })?
            }
        };
        Ok((capacity, report))
    }
}
