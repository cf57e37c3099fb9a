//! The load generators' shared request: one streaming OpenAI request measured from the
//! client's side. The HTTP demo's clients (`demo::http::load`) and `router-tools bench`
//! (`crate::bench`) both use it; what they report is built with `crate::report`.
//!
//! [`send_streaming`] posts one JSON body (with the `x-policy-class` header when a class is
//! given) and reads the SSE stream to its end. It ends in exactly one [`Outcome`]:
//! `Admitted` (HTTP 200) with the stream's timings, whether it ended with `[DONE]` and no
//! error event, and the final `usage` (including vLLM's
//! `usage.prompt_tokens_details.cached_tokens`); or `Rejected` with the HTTP status (none on
//! a transport failure) and a reason: the JSON error's `reason`, else `http_<status>`,
//! `client_timeout` or `transport_error`.
//!
//! A *content chunk* is an SSE event whose first choice carries text (`text` of a
//! completion, `delta.content` of a chat chunk). TTFT is send → first content chunk; the
//! inter-token latencies are the gaps between content chunks as the client read them (events
//! that arrive in one network read are 0 apart).

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::Value;
use tokio::time::Instant;

use router_node::frontend::CLASS_HEADER;
use router_node::sse::SseReader;

/// How one streamed request went, as the client saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Streamed {
    /// The stream ended with `[DONE]`, without an error event or a broken connection.
    pub completed: bool,
    /// Send → first content chunk.
    pub ttft: Option<Duration>,
    /// Gaps between consecutive content chunks.
    pub itl: Vec<Duration>,
    /// Send → end of the stream.
    pub e2e: Duration,
    /// Content chunks received (one per token for engines that stream token by token).
    pub content_chunks: u64,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, when the endpoint reports it.
    pub cached_tokens: Option<u64>,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// HTTP 200: the stream was read to its end.
    Admitted(Streamed),
    /// Anything else. `status` is `None` when no HTTP response came (transport failure).
    Rejected { status: Option<u16>, reason: String },
}

/// Posts `body` to `url` and reads the streamed answer to its end.
pub async fn send_streaming(
    client: &reqwest::Client,
    url: &str,
    class: Option<&str>,
    body: &Value,
) -> Outcome {
    let sent = Instant::now();
    let mut request = client.post(url).json(body);
    if let Some(class) = class {
        request = request.header(CLASS_HEADER, class);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => {
            let reason = if e.is_timeout() {
                "client_timeout"
            } else {
                "transport_error"
            };
            return Outcome::Rejected {
                status: None,
                reason: reason.to_owned(),
            };
        }
    };
    let status = response.status();
    if !status.is_success() {
        let reason = response
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v["error"]["reason"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("http_{}", status.as_u16()));
        return Outcome::Rejected {
            status: Some(status.as_u16()),
            reason,
        };
    }
    let mut out = Streamed::default();
    let mut sse = SseReader::default();
    let mut last_content: Option<Instant> = None;
    let mut stream = response.bytes_stream();
    let mut broken = false;
    while let Some(chunk) = stream.next().await {
        let Ok(bytes) = chunk else {
            broken = true;
            break;
        };
        let now = Instant::now();
        for _ in 0..sse.feed(&bytes) {
            match last_content {
                None => out.ttft = Some(now - sent),
                Some(prev) => out.itl.push(now - prev),
            }
            last_content = Some(now);
        }
    }
    out.e2e = sent.elapsed();
    out.completed = !broken && sse.done && !sse.error;
    out.content_chunks = sse.content_chunks;
    out.prompt_tokens = sse.prompt_tokens;
    out.completion_tokens = sse.completion_tokens;
    out.cached_tokens = sse.cached_tokens;
    Outcome::Admitted(out)
}
