//! A non-streaming client's answer: the worker's SSE chunks assembled into one OpenAI
//! response body (the text deltas of all chunks concatenated into one choice; `id`, `model`,
//! `created`, `system_fingerprint` of the first chunk that had them, the last `finish_reason`
//! and `usage` kept as the worker wrote them). Chunks are read into a typed view of only the
//! fields kept, borrowing from the line (a kept field is copied once), by [`SseAssembler`]
//! (pure, bounded, fuzzed in `router-node/src/fuzz_tests.rs`); the body is written from a
//! typed [`AssembledBody`]. The same one reading of each event tells the request's
//! `RequestObserver` its content chunks and usage (`RequestObserver::parsed`).

use super::error::{ApiError, Stage};
use super::proxy::{Upstream, broken};
use crate::metrics::RequestObserver;
use axum::body::Bytes;
use futures::stream::StreamExt;
use router_core::Endpoint;
use router_core::WorkerId;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Collects the worker's SSE stream (`first` chunk already read) into one OpenAI response
/// body, telling `observer` of each chunk's content as it is read.
pub(super) async fn assemble(
    endpoint: Endpoint,
    mut upstream: Upstream,
    first: Option<Bytes>,
    limit: usize,
    worker: WorkerId,
    observer: &mut RequestObserver,
) -> Result<AssembledBody, ApiError> {
    let mut reader = SseAssembler::new(endpoint, limit, worker);
    let mut next = first;
    loop {
        let chunk = match next.take() {
            Some(chunk) => chunk,
            None => match upstream.next().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => return Err(broken(worker, &e)),
                None => break,
            },
        };
        let content = reader.acc.content_chunks;
        let done = reader.feed(&chunk);
        let fresh = std::mem::take(&mut reader.acc.fresh_usage);
        let usage = reader.acc.usage.as_deref().filter(|_| fresh);
        observer.parsed(
            reader.acc.content_chunks - content,
            usage.map(RawValue::get),
        );
        if done? {
            break;
        }
    }
    reader.finish()
}

/// The worker's SSE bytes, fed as they arrive, read line by line into one body. Pure: the
/// fuzz tests feed it arbitrary bytes cut anywhere. Each byte is scanned for a line end once;
/// a line longer than `limit` (without its end yet) or assembled text longer than `limit` is
/// `upstream_too_large`, so what it holds stays under `limit` plus one chunk.
pub(crate) struct SseAssembler {
    endpoint: Endpoint,
    limit: usize,
    worker: WorkerId,
    acc: Assembled,
    /// The start of a line whose end has not arrived yet.
    pending: Vec<u8>,
    done: bool,
}

impl SseAssembler {
    pub(crate) fn new(endpoint: Endpoint, limit: usize, worker: WorkerId) -> Self {
        Self {
            endpoint,
            limit,
            worker,
            acc: Assembled::default(),
            pending: Vec::new(),
            done: false,
        }
    }

    /// Reads `chunk`; true once `data: [DONE]` was read (later bytes are not read).
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<bool, ApiError> {
        if self.done {
            return Ok(true);
        }
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(end + 1);
            rest = after;
            let done = if self.pending.is_empty() {
                self.acc.line(self.endpoint, line, self.worker)?
            } else {
                self.pending.extend_from_slice(line);
                let line = std::mem::take(&mut self.pending);
                self.acc.line(self.endpoint, &line, self.worker)?
            };
            if done {
                self.done = true;
                return Ok(true);
            }
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > self.limit || self.acc.text.len() > self.limit {
            return Err(ApiError::upstream(
                Stage::Upstream,
                "upstream_too_large",
                format!(
                    "{}: the answer is larger than {} bytes",
                    self.worker, self.limit
                ),
            ));
        }
        Ok(false)
    }

    /// The assembled body (a last line without its end is read too).
    pub(crate) fn finish(mut self) -> Result<AssembledBody, ApiError> {
        if !self.done && !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.acc.line(self.endpoint, &line, self.worker)?;
        }
        Ok(self.acc.finish(self.endpoint))
    }
}

/// One streamed chunk, as much of it as the assembled body uses (`null` reads as absent),
/// borrowed from its line.
#[derive(Deserialize)]
struct ChunkEvent<'a> {
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    created: Option<&'a RawValue>,
    #[serde(borrow)]
    system_fingerprint: Option<&'a RawValue>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    /// `/v1/completions`.
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    /// `/v1/chat/completions`.
    #[serde(borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChunkDelta<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
}

/// The response body of a non-streaming client.
#[derive(Debug, Serialize)]
pub(crate) struct AssembledBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<Box<RawValue>>,
    object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_fingerprint: Option<Box<RawValue>>,
    choices: [AssembledChoice; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Box<RawValue>>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum AssembledChoice {
    Completion {
        index: u32,
        text: String,
        finish_reason: Option<Box<RawValue>>,
    },
    Chat {
        index: u32,
        message: Message,
        finish_reason: Option<Box<RawValue>>,
    },
}

#[derive(Debug, Serialize)]
struct Message {
    role: &'static str,
    content: String,
}

#[derive(Default)]
struct Assembled {
    text: String,
    id: Option<Box<RawValue>>,
    model: Option<Box<RawValue>>,
    created: Option<Box<RawValue>>,
    system_fingerprint: Option<Box<RawValue>>,
    finish_reason: Option<Box<RawValue>>,
    usage: Option<Box<RawValue>>,
    /// `usage` was read since the observer was last told.
    fresh_usage: bool,
    /// Events whose first choice carried text (what `crate::sse::SseReader` counts).
    content_chunks: u64,
}

/// Keeps the first value a field had.
fn keep_first(kept: &mut Option<Box<RawValue>>, read: Option<&RawValue>) {
    if kept.is_none() {
        *kept = read.map(RawValue::to_owned);
    }
}

impl Assembled {
    /// Takes one SSE line; true at `data: [DONE]`.
    fn line(
        &mut self,
        endpoint: Endpoint,
        line: &[u8],
        worker: WorkerId,
    ) -> Result<bool, ApiError> {
        // Valid UTF-8 (every engine's) is borrowed as it is; only a broken line is repaired.
        let line = match std::str::from_utf8(line) {
            Ok(line) => Cow::Borrowed(line),
            Err(_) => String::from_utf8_lossy(line),
        };
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            return Ok(false);
        };
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        // Typed: only the fields the assembled body needs are read; the rest is skipped.
        let Ok(event) = serde_json::from_str::<ChunkEvent<'_>>(data) else {
            return Ok(false);
        };
        if let Some(error) = event.error {
            return Err(ApiError::upstream(
                Stage::Upstream,
                "upstream_error_event",
                format!("{worker}: {error}"),
            ));
        }
        keep_first(&mut self.id, event.id);
        keep_first(&mut self.model, event.model);
        keep_first(&mut self.created, event.created);
        keep_first(&mut self.system_fingerprint, event.system_fingerprint);
        if let Some(usage) = event.usage {
            self.usage = Some(usage.to_owned());
            self.fresh_usage = true;
        }
        if let Some(choice) = event.choices.into_iter().next() {
            let text = choice.text.as_deref();
            let content = choice.delta.as_ref().and_then(|d| d.content.as_deref());
            if text.or(content).is_some_and(|t| !t.is_empty()) {
                self.content_chunks += 1;
            }
            let delta = match endpoint {
                Endpoint::Completions => text,
                Endpoint::Chat => content,
            };
            if let Some(s) = delta {
                self.text.push_str(s);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        Ok(false)
    }

    fn finish(self, endpoint: Endpoint) -> AssembledBody {
        let (object, choice) = match endpoint {
            Endpoint::Completions => (
                "text_completion",
                AssembledChoice::Completion {
                    index: 0,
                    text: self.text,
                    finish_reason: self.finish_reason,
                },
            ),
            Endpoint::Chat => (
                "chat.completion",
                AssembledChoice::Chat {
                    index: 0,
                    message: Message {
                        role: "assistant",
                        content: self.text,
                    },
                    finish_reason: self.finish_reason,
                },
            ),
        };
        AssembledBody {
            id: self.id,
            object,
            created: self.created,
            model: self.model,
            system_fingerprint: self.system_fingerprint,
            choices: [choice],
            usage: self.usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::Value;

    fn assemble(endpoint: Endpoint, lines: &[&str]) -> Result<Value, ApiError> {
        let mut acc = Assembled::default();
        for line in lines {
            if acc.line(endpoint, line.as_bytes(), WorkerId(1))? {
                break;
            }
        }
        Ok(serde_json::to_value(acc.finish(endpoint)).expect("a JSON body"))
    }

    #[test]
    fn chat_chunks_become_one_message_with_the_first_head_and_the_last_reason() {
        let body = assemble(
            Endpoint::Chat,
            &[
                r#"data: {"id":"c1","model":"m","created":7,"choices":[{"delta":{"role":"assistant"},"finish_reason":null}]}"#,
                r#"data: {"id":"c2","choices":[{"delta":{"content":"a \"quoted\"\n"},"finish_reason":null}],"extra":{"x":[1,2]}}"#,
                ": a comment line",
                r#"data: {"choices":[{"delta":{"content":"end"},"finish_reason":"stop"}],"usage":null}"#,
                r#"data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
                "data: [DONE]",
                r#"data: {"choices":[{"delta":{"content":"after done"}}]}"#,
            ],
        )
        .expect("no error event");
        assert_eq!(body["id"], "c1");
        assert_eq!(body["model"], "m");
        assert_eq!(body["created"], 7);
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "a \"quoted\"\nend"
        );
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["completion_tokens"], 2);
    }

    #[test]
    fn completion_chunks_join_their_text_and_skip_what_is_not_a_chunk() {
        let body = assemble(
            Endpoint::Completions,
            &[
                r#"data: {"id":"x","choices":[{"text":"he"}]}"#,
                "data: not json",
                "data: [1,2]",
                r#"data: {"choices":[{"text":"llo","finish_reason":"length"}]}"#,
                "data: [DONE]",
            ],
        )
        .expect("no error event");
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["choices"][0]["text"], "hello");
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        assert!(body.get("usage").is_none(), "{body}");
    }

    #[test]
    fn an_error_event_fails_the_request() {
        let err = assemble(
            Endpoint::Completions,
            &[
                r#"data: {"choices":[{"text":"he"}]}"#,
                r#"data: {"error":{"message":"engine died"}}"#,
            ],
        )
        .expect_err("an error event");
        assert_eq!(err.reason, "upstream_error_event");
    }
}
