//! A non-streaming client's answer: the worker's SSE chunks assembled into one OpenAI
//! response body (the text deltas of all chunks concatenated into one choice; `id`, `model`,
//! `created`, the last `finish_reason` and `usage` kept when the worker sent them). Chunks
//! are read into a typed view of only the fields kept, by [`SseAssembler`] (pure, bounded,
//! fuzzed in `router-node/src/fuzz_tests.rs`). Each chunk also goes to the request's
//! `RequestObserver` (the first one did already, in `proxy.rs`).

use super::error::{ApiError, Stage};
use super::openai::Endpoint;
use super::proxy::{Upstream, broken};
use crate::metrics::RequestObserver;
use axum::body::Bytes;
use futures::stream::StreamExt;
use router_core::WorkerId;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::borrow::Cow;

/// Collects the worker's SSE stream into one OpenAI response body.
pub(super) async fn assemble(
    endpoint: Endpoint,
    mut upstream: Upstream,
    first: Option<Bytes>,
    limit: usize,
    worker: WorkerId,
    observer: &mut RequestObserver,
) -> Result<Value, ApiError> {
    let mut reader = SseAssembler::new(endpoint, limit, worker);
    let mut next = first;
    loop {
        let chunk = match next.take() {
            Some(chunk) => chunk,
            None => match upstream.next().await {
                Some(Ok(chunk)) => {
                    observer.chunk(&chunk);
                    chunk
                }
                Some(Err(e)) => return Err(broken(worker, &e)),
                None => break,
            },
        };
        if reader.feed(&chunk)? {
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
    pub(crate) fn finish(mut self) -> Result<Value, ApiError> {
        if !self.done && !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.acc.line(self.endpoint, &line, self.worker)?;
        }
        Ok(self.acc.finish(self.endpoint))
    }
}

/// One streamed chunk, as much of it as the assembled body uses (`null` reads as absent).
#[derive(Deserialize)]
struct ChunkEvent<'a> {
    error: Option<Value>,
    id: Option<Value>,
    model: Option<Value>,
    created: Option<Value>,
    system_fingerprint: Option<Value>,
    usage: Option<Value>,
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
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkDelta<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
}

#[derive(Default)]
struct Assembled {
    text: String,
    head: Map<String, Value>,
    finish_reason: Value,
    usage: Option<Value>,
}

impl Assembled {
    /// Takes one SSE line; true at `data: [DONE]`.
    fn line(
        &mut self,
        endpoint: Endpoint,
        line: &[u8],
        worker: WorkerId,
    ) -> Result<bool, ApiError> {
        let line = String::from_utf8_lossy(line);
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            return Ok(false);
        };
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        // Typed: only the fields the assembled body needs are built; the rest is skipped.
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
        for (key, v) in [
            ("id", event.id),
            ("model", event.model),
            ("created", event.created),
            ("system_fingerprint", event.system_fingerprint),
        ] {
            if let Some(v) = v {
                self.head.entry(key).or_insert(v);
            }
        }
        if let Some(usage) = event.usage {
            self.usage = Some(usage);
        }
        if let Some(choice) = event.choices.into_iter().next() {
            let delta = match endpoint {
                Endpoint::Completions => choice.text,
                Endpoint::Chat => choice.delta.and_then(|d| d.content),
            };
            if let Some(s) = delta {
                self.text.push_str(&s);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = reason;
            }
        }
        Ok(false)
    }

    fn finish(self, endpoint: Endpoint) -> Value {
        let choice = match endpoint {
            Endpoint::Completions => json!({
                "index": 0, "text": self.text, "finish_reason": self.finish_reason,
            }),
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": self.text},
                "finish_reason": self.finish_reason,
            }),
        };
        let object = match endpoint {
            Endpoint::Completions => "text_completion",
            Endpoint::Chat => "chat.completion",
        };
        let mut body = self.head;
        body.insert("object".to_owned(), json!(object));
        body.insert("choices".to_owned(), json!([choice]));
        if let Some(usage) = self.usage {
            body.insert("usage".to_owned(), usage);
        }
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(endpoint: Endpoint, lines: &[&str]) -> Result<Value, ApiError> {
        let mut acc = Assembled::default();
        for line in lines {
            if acc.line(endpoint, line.as_bytes(), WorkerId(1))? {
                break;
            }
        }
        Ok(acc.finish(endpoint))
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
