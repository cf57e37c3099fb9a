//! Reading an OpenAI SSE stream as it arrives, across chunk borders: the one reader of the
//! node and the load tools.
//!
//! - [`SseFrames`]: the framing. Bytes in, each `data:` payload out (`[DONE]` as
//!   [`Data::Done`]), every byte scanned for a line end once, a line longer than the
//!   framer's limit reported once as [`Data::Overflow`] and skipped (an endpoint cannot make
//!   a reader hold unbounded bytes).
//! - [`Chunk`]: one streamed event, typed, borrowing from its line: the fields anyone reads
//!   (`id`, `model`, `created`, `system_fingerprint`, `usage`, `error`, the first choices'
//!   `text`, `delta.content` and `finish_reason`).
//! - [`SseReader`]: counts as it goes, for the load generators (router-tools' `loadgen`:
//!   TTFT and inter-token gaps as a client sees them) and the frontend's request metrics
//!   (`crate::metrics::RequestObserver`: the same figures as the router relays the worker's
//!   stream): *content chunks* (events whose first choice carries output: non-empty `text` of
//!   a completion, `delta.content` or `delta.reasoning_content` of a chat chunk, or a tool
//!   call; a chat stream's role-only first event is not one), the final `usage` (with vLLM's `usage.prompt_tokens_details.cached_tokens`),
//!   `[DONE]` and error events.
//!
//! The non-streaming assembler (`frontend/assemble.rs`) frames and reads with the same two.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Longest SSE line a reader keeps while waiting for its end; a longer one marks the stream
/// as an error and is dropped (an endpoint cannot make a reader hold unbounded bytes).
pub const MAX_SSE_LINE: usize = 16 << 20;

/// One `data:` payload of an SSE stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data<'a> {
    /// `data: [DONE]`.
    Done,
    /// Any other payload (an event's JSON, normally), trimmed. Valid UTF-8 is borrowed; a
    /// broken line is repaired.
    Json(Cow<'a, str>),
    /// A line grew past the framer's limit before its end arrived: it is skipped.
    Overflow,
}

/// What the caller of [`SseFrames::feed`] wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Read no further (later bytes of this feed are not framed).
    Stop,
}

/// SSE framing across chunk borders, bounded by `limit` bytes per line.
#[derive(Debug)]
pub struct SseFrames {
    limit: usize,
    /// The start of a line whose end has not arrived yet.
    partial: Vec<u8>,
    /// Inside a line longer than `limit`: skip to its end.
    skipping: bool,
}

impl SseFrames {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            partial: Vec::new(),
            skipping: false,
        }
    }

    /// Frames `bytes`, giving `on` each payload completed in them; stops early when `on`
    /// says [`Flow::Stop`] or fails.
    pub fn feed<E>(
        &mut self,
        bytes: &[u8],
        mut on: impl FnMut(Data<'_>) -> Result<Flow, E>,
    ) -> Result<Flow, E> {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = &after[1..];
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            let flow = if self.partial.is_empty() {
                payload(line).map_or(Ok(Flow::Continue), &mut on)?
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                let flow = payload(&whole).map_or(Ok(Flow::Continue), &mut on)?;
                // Keep the allocation for the next partial line.
                whole.clear();
                self.partial = whole;
                flow
            };
            if flow == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > self.limit {
                self.partial = Vec::new();
                self.skipping = true;
                return on(Data::Overflow);
            }
        }
        Ok(Flow::Continue)
    }

    /// The end of the stream: a last line without its end is framed too.
    pub fn finish<E>(&mut self, on: impl FnMut(Data<'_>) -> Result<Flow, E>) -> Result<Flow, E> {
        let line = std::mem::take(&mut self.partial);
        if self.skipping || line.is_empty() {
            return Ok(Flow::Continue);
        }
        payload(&line).map_or(Ok(Flow::Continue), on)
    }
}

/// The `data:` payload of one line (without its `\n`), if it has one.
fn payload(line: &[u8]) -> Option<Data<'_>> {
    let line = match std::str::from_utf8(line) {
        Ok(line) => Cow::Borrowed(line),
        Err(_) => String::from_utf8_lossy(line),
    };
    let data = match line {
        Cow::Borrowed(line) => Cow::Borrowed(line.trim_end().strip_prefix("data:")?.trim()),
        Cow::Owned(line) => Cow::Owned(line.trim_end().strip_prefix("data:")?.trim().to_owned()),
    };
    Some(if data == "[DONE]" {
        Data::Done
    } else {
        Data::Json(data)
    })
}

/// One streamed event, as much of it as anyone reads (`null` reads as absent), borrowed
/// from its line.
#[derive(Debug, Deserialize)]
pub struct Chunk<'a> {
    #[serde(borrow)]
    pub error: Option<&'a RawValue>,
    #[serde(borrow)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub model: Option<&'a RawValue>,
    #[serde(borrow)]
    pub created: Option<&'a RawValue>,
    #[serde(borrow)]
    pub system_fingerprint: Option<&'a RawValue>,
    #[serde(borrow)]
    pub usage: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub choices: Vec<ChunkChoice<'a>>,
}

/// One choice of a [`Chunk`].
#[derive(Debug, Deserialize)]
pub struct ChunkChoice<'a> {
    /// Which choice (`n > 1`, a batch of prompts); absent: its position.
    pub index: Option<u32>,
    /// `/v1/completions`.
    #[serde(borrow)]
    pub text: Option<Cow<'a, str>>,
    /// `/v1/chat/completions`.
    #[serde(borrow)]
    pub delta: Option<ChunkDelta<'a>>,
    #[serde(borrow)]
    pub finish_reason: Option<&'a RawValue>,
    /// A completion's parallel arrays, or a chat choice's `content` list.
    #[serde(borrow)]
    pub logprobs: Option<&'a RawValue>,
}

/// A chat chunk's `delta`.
#[derive(Debug, Deserialize)]
pub struct ChunkDelta<'a> {
    #[serde(borrow)]
    pub content: Option<Cow<'a, str>>,
    /// A reasoning model's thinking (vLLM's reasoning parsers).
    #[serde(borrow)]
    pub reasoning_content: Option<Cow<'a, str>>,
    /// Tool-call fragments (`[{index, id, type, function: {name, arguments}}]`).
    #[serde(borrow)]
    pub tool_calls: Option<&'a RawValue>,
}

impl<'a> Chunk<'a> {
    /// The event in `data`, if it is one.
    pub fn parse(data: &'a str) -> Option<Self> {
        serde_json::from_str(data).ok()
    }

    /// Whether its first choice carries text: a *content chunk*.
    pub fn has_text(&self) -> bool {
        self.choices.first().is_some_and(ChunkChoice::has_text)
    }
}

impl ChunkChoice<'_> {
    /// The completion's `text`, else the chat `delta.content`.
    pub fn content(&self) -> Option<&str> {
        let delta = self.delta.as_ref().and_then(|d| d.content.as_deref());
        self.text.as_deref().or(delta)
    }

    /// Generated output of any kind: text, reasoning or a tool call.
    fn has_text(&self) -> bool {
        let reasoning = self
            .delta
            .as_ref()
            .and_then(|d| d.reasoning_content.as_deref());
        let calls = self.delta.as_ref().and_then(|d| d.tool_calls);
        self.content().is_some_and(|t| !t.is_empty())
            || reasoning.is_some_and(|t| !t.is_empty())
            || calls.is_some_and(|c| c.get() != "[]" && c.get() != "null")
    }
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

/// Reads SSE events as they arrive, across chunk borders, and counts what they carry.
#[derive(Debug)]
pub struct SseReader {
    frames: SseFrames,
    /// `data: [DONE]` was read.
    pub done: bool,
    /// An event with a non-null `error` was read (or a line past [`MAX_SSE_LINE`]).
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

impl Default for SseReader {
    fn default() -> Self {
        Self {
            frames: SseFrames::new(MAX_SSE_LINE),
            done: false,
            error: false,
            content_chunks: 0,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
        }
    }
}

impl SseReader {
    /// Feeds bytes; returns how many content chunks completed in them.
    pub fn feed(&mut self, bytes: &[u8]) -> u64 {
        let Self { frames, .. } = self;
        let mut seen = Seen::default();
        let _ = frames.feed(bytes, |data| {
            seen.data(data);
            Ok::<_, std::convert::Infallible>(Flow::Continue)
        });
        self.apply(seen)
    }

    /// One event read by someone else (the non-streaming assembler reads each event once for
    /// both).
    pub fn chunk(&mut self, chunk: &Chunk<'_>) {
        let mut seen = Seen::default();
        seen.chunk(chunk);
        self.apply(seen);
    }

    fn apply(&mut self, seen: Seen) -> u64 {
        self.done |= seen.done;
        self.error |= seen.error;
        self.content_chunks += seen.content;
        for usage in seen.usage {
            self.prompt_tokens = usage.prompt_tokens.or(self.prompt_tokens);
            self.completion_tokens = usage.completion_tokens.or(self.completion_tokens);
            if let Some(n) = usage.prompt_tokens_details.and_then(|d| d.cached_tokens) {
                self.cached_tokens = Some(n);
            }
        }
        seen.content
    }
}

/// What one feed read.
#[derive(Debug, Default)]
struct Seen {
    done: bool,
    error: bool,
    content: u64,
    usage: Vec<Usage>,
}

impl Seen {
    fn data(&mut self, data: Data<'_>) {
        match data {
            Data::Done => self.done = true,
            Data::Overflow => self.error = true,
            Data::Json(json) => {
                if let Some(chunk) = Chunk::parse(&json) {
                    self.chunk(&chunk);
                }
            }
        }
    }

    fn chunk(&mut self, chunk: &Chunk<'_>) {
        if chunk.error.is_some() {
            self.error = true;
        }
        if let Some(usage) = chunk.usage.and_then(|u| serde_json::from_str(u.get()).ok()) {
            self.usage.push(usage);
        }
        self.content += u64::from(chunk.has_text());
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
