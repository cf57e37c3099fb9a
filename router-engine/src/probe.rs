//! Asking an engine over HTTP: `GET /health`, `GET /metrics`, and SGLang's server info.
//! Every request is bounded by the probe's timeout; an engine that does not answer in time
//! counts as not answering. An answer is read up to [`MAX_ANSWER_BYTES`]; a longer one is an
//! error, not an allocation as large as the engine (or whatever answers at its address) likes.

use crate::load::{
    Capacity, EngineKind, EngineReport, ServedModels, read_metrics, sglang_capacity,
};
use std::time::Duration;

/// The longest answer a probe reads (a vLLM `/metrics` with many adapters is a few hundred
/// KiB).
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("{url}: the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge { url: String },
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
        let mut response = self.client.get(&url).send().await.map_err(http)?;
        let status = response.status();
        if !status.is_success() {
            return Err(ProbeError::Status {
                url,
                status: status.as_u16(),
            });
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
        {
            return Err(ProbeError::TooLarge { url });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(http)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(ProbeError::TooLarge { url });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(bytes::Bytes::from(body))
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

    /// What the engine serves (`/v1/models`: its model, adapters and context length);
    /// `None` when the list cannot be read.
    pub async fn models(&self) -> Option<ServedModels> {
        let body = self.get("/v1/models").await.ok()?;
        crate::load::read_models(&body)
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server whose every answer is 200 with `bytes` bytes of scrape, announced by a
    /// content length or, without one, delimited by closing the connection.
    async fn engine(bytes: usize, with_length: bool) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = socket.read(&mut request).await;
                    let head = if with_length {
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {bytes}\r\n\r\n")
                    } else {
                        "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_owned()
                    };
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let line = [b'#'; 1024];
                    let mut left = bytes;
                    while left > 0 {
                        let n = left.min(line.len());
                        if socket.write_all(&line[..n]).await.is_err() {
                            return;
                        }
                        left -= n;
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn an_answer_past_the_limit_is_an_error_with_or_without_a_length() {
        for with_length in [true, false] {
            let base = engine(MAX_ANSWER_BYTES + 1, with_length).await;
            let probe =
                Probe::new(EngineKind::Vllm, &base, Duration::from_secs(20)).expect("a probe");
            let error = probe.report().await.expect_err("too large");
            assert!(
                matches!(error, ProbeError::TooLarge { .. }),
                "with_length {with_length}: {error}"
            );
            let base = engine(64 * 1024, with_length).await;
            let probe =
                Probe::new(EngineKind::Vllm, &base, Duration::from_secs(20)).expect("a probe");
            let report = probe.report().await.expect("a small answer is read");
            assert!(report.ranks.is_empty());
        }
    }
}
