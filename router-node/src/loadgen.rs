//! The load generators' shared request: one streaming OpenAI request measured from the
//! client's side. The HTTP demo's clients (`demo::http::load`) and `router-node bench`
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
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::frontend::CLASS_HEADER;

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

/// The fields of an SSE event the clients read.
#[derive(Debug, Default, Deserialize)]
struct Event {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct Choice {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    delta: Option<Delta>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<Details>,
}

#[derive(Debug, Default, Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

/// Longest SSE line a client keeps while waiting for its end; a longer one marks the stream
/// as an error and is dropped (an endpoint cannot make the benchmark hold unbounded bytes).
pub const MAX_SSE_LINE: usize = 16 << 20;

/// Reads SSE events as they arrive, across chunk borders.
#[derive(Debug, Default)]
pub struct SseReader {
    partial: Vec<u8>,
    /// Inside a line longer than [`MAX_SSE_LINE`]: skip to its end.
    skipping: bool,
    pub done: bool,
    pub error: bool,
    pub content_chunks: u64,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
}

impl SseReader {
    /// Feeds bytes; returns how many content chunks completed in them.
    pub fn feed(&mut self, bytes: &[u8]) -> u64 {
        let mut content = 0;
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(end + 1);
            rest = after;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            let line = if self.partial.is_empty() {
                std::borrow::Cow::Borrowed(line)
            } else {
                self.partial.extend_from_slice(line);
                std::borrow::Cow::Owned(std::mem::take(&mut self.partial))
            };
            content += u64::from(self.event(&line));
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_SSE_LINE {
                self.partial = Vec::new();
                self.skipping = true;
                self.error = true;
            }
        }
        self.content_chunks += content;
        content
    }

    /// Reads one line; true when it was a content chunk.
    fn event(&mut self, line: &[u8]) -> bool {
        let Ok(line) = std::str::from_utf8(line) else {
            return false;
        };
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            return false;
        };
        let data = data.trim_start();
        if data == "[DONE]" {
            self.done = true;
            return false;
        }
        let Ok(event) = serde_json::from_str::<Event>(data) else {
            return false;
        };
        if event.error.is_some_and(|e| !e.is_null()) {
            self.error = true;
        }
        let has_text = event.choices.first().is_some_and(|c| {
            let delta = c.delta.as_ref().and_then(|d| d.content.as_deref());
            c.text.as_deref().or(delta).is_some_and(|t| !t.is_empty())
        });
        if let Some(usage) = event.usage {
            self.prompt_tokens = usage.prompt_tokens.or(self.prompt_tokens);
            self.completion_tokens = usage.completion_tokens.or(self.completion_tokens);
            if let Some(n) = usage.prompt_tokens_details.and_then(|d| d.cached_tokens) {
                self.cached_tokens = Some(n);
            }
        }
        has_text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_counts_content_and_finds_done_usage_and_errors_across_chunk_borders() {
        let mut r = SseReader::default();
        assert_eq!(
            r.feed(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"te"),
            1
        );
        assert_eq!(
            r.feed(b"xt\":\"b\"}]}\n\ndata: {\"choices\":[{\"text\":\"\"}],\"usa"),
            1
        );
        r.feed(b"ge\":{\"prompt_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n");
        r.feed(b"data: [DO");
        assert!(!r.done);
        r.feed(b"NE]\n\n");
        assert!(r.done && !r.error);
        assert_eq!(
            (r.content_chunks, r.prompt_tokens, r.cached_tokens),
            (2, Some(12), Some(8))
        );
        let mut chat = SseReader::default();
        assert_eq!(
            chat.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"),
            1
        );
        let mut broken = SseReader::default();
        broken.feed(b"data: {\"error\":{\"reason\":\"upstream_broken\"}}\n\n");
        assert!(broken.error && !broken.done);
    }
}
