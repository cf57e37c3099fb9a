//! Reading an OpenAI SSE stream as it arrives, across chunk borders: which events carry
//! generated text (*content chunks*), the final `usage` (with vLLM's
//! `usage.prompt_tokens_details.cached_tokens`), `[DONE]` and error events.
//!
//! Shared by the load generators (`crate::loadgen`: TTFT and inter-token gaps as a client
//! sees them) and the frontend's request metrics (`crate::metrics::RequestObserver`: the same
//! figures as the router relays the worker's stream). A *content chunk* is an event whose
//! first choice carries non-empty text: `text` of a completion, `delta.content` of a chat
//! chunk (a chat stream's role-only first event is not one).

use serde::Deserialize;
use serde::de::IgnoredAny;
use std::borrow::Cow;

/// The fields of an SSE event the readers use (text borrowed from the line when it can be).
#[derive(Debug, Default, Deserialize)]
struct Event<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    /// Present and not null on an error event.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
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

/// Longest SSE line a reader keeps while waiting for its end; a longer one marks the stream
/// as an error and is dropped (an endpoint cannot make a reader hold unbounded bytes).
pub const MAX_SSE_LINE: usize = 16 << 20;

/// Reads SSE events as they arrive, across chunk borders. Each byte is scanned once.
#[derive(Debug, Default)]
pub struct SseReader {
    partial: Vec<u8>,
    /// Inside a line longer than [`MAX_SSE_LINE`]: skip to its end.
    skipping: bool,
    /// `data: [DONE]` was read.
    pub done: bool,
    /// An event with a non-null `error` was read.
    pub error: bool,
    /// Content chunks read so far.
    pub content_chunks: u64,
    /// The last `usage.prompt_tokens` read.
    pub prompt_tokens: Option<u64>,
    /// The last `usage.completion_tokens` read.
    pub completion_tokens: Option<u64>,
    /// The last `usage.prompt_tokens_details.cached_tokens` read.
    pub cached_tokens: Option<u64>,
}

impl SseReader {
    /// Feeds bytes; returns how many content chunks completed in them.
    pub fn feed(&mut self, bytes: &[u8]) -> u64 {
        let mut content = 0;
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = &after[1..];
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            if self.partial.is_empty() {
                content += self.line(line);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                content += self.line(&whole);
            }
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

    /// Events read by someone else (the non-streaming assembler reads each event once for
    /// both): `content` content chunks, then the event's `usage` object as JSON, if any.
    pub fn parsed(&mut self, content: u64, usage: Option<&str>) {
        self.content_chunks += content;
        if let Some(usage) = usage.and_then(|u| serde_json::from_str::<Usage>(u).ok()) {
            self.usage(usage);
        }
    }

    fn usage(&mut self, usage: Usage) {
        self.prompt_tokens = usage.prompt_tokens.or(self.prompt_tokens);
        self.completion_tokens = usage.completion_tokens.or(self.completion_tokens);
        if let Some(n) = usage.prompt_tokens_details.and_then(|d| d.cached_tokens) {
            self.cached_tokens = Some(n);
        }
    }

    /// One line (without its `\n`); 1 when it is a content chunk.
    fn line(&mut self, line: &[u8]) -> u64 {
        let Ok(line) = std::str::from_utf8(line) else {
            return 0;
        };
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            return 0;
        };
        let data = data.trim_start();
        if data == "[DONE]" {
            self.done = true;
            return 0;
        }
        let Ok(event) = serde_json::from_str::<Event<'_>>(data) else {
            return 0;
        };
        if event.error.is_some() {
            self.error = true;
        }
        if let Some(usage) = event.usage {
            self.usage(usage);
        }
        let has_text = event.choices.first().is_some_and(|c| {
            let delta = c.delta.as_ref().and_then(|d| d.content.as_deref());
            c.text.as_deref().or(delta).is_some_and(|t| !t.is_empty())
        });
        u64::from(has_text)
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
        r.feed(b"ge\":{\"prompt_tokens\":12,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n");
        r.feed(b"data: [DO");
        assert!(!r.done);
        r.feed(b"NE]\n\n");
        assert!(r.done && !r.error);
        assert_eq!(
            (
                r.content_chunks,
                r.prompt_tokens,
                r.completion_tokens,
                r.cached_tokens
            ),
            (2, Some(12), Some(2), Some(8))
        );
        let mut chat = SseReader::default();
        let role_only =
            b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        assert_eq!(chat.feed(role_only), 0, "a role-only event carries no text");
        assert_eq!(
            chat.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\\n\"}}]}\r\n\r\n"),
            1
        );
        let mut broken = SseReader::default();
        broken.feed(b"data: {\"error\":{\"reason\":\"upstream_broken\"}}\n\n");
        assert!(broken.error && !broken.done);
        let mut null_error = SseReader::default();
        null_error.feed(b"data: {\"error\":null,\"choices\":[]}\n\n");
        assert!(!null_error.error, "a null error is no error");
    }
}
