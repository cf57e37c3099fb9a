//! A non-streaming client's answer: the worker's SSE stream read into one OpenAI response
//! body. The stream is framed and its events read by the node's one SSE reader
//! (`crate::sse`: [`SseFrames`], [`Chunk`], borrowing from the line) in [`SseAssembler`] (pure,
//! bounded, fuzzed in `router-node/src/fuzz_tests.rs`); the body is built by `assembled.rs`
//! (every choice by index, tool calls, log-probabilities; an answer without a choice is a
//! 502). The same one reading of each event tells the request's `RequestObserver` its
//! content chunks and usage (`RequestObserver::parsed`).

use super::assembled::{Assembled, AssembledBody};
use super::error::{ApiError, Stage};
use super::proxy::{Upstream, broken};
use crate::metrics::RequestObserver;
use crate::sse::{Chunk, Data, Flow, SseFrames};
use axum::body::Bytes;
use futures::stream::StreamExt;
use router_core::Endpoint;
use router_core::WorkerId;

/// Collects the worker's SSE stream (`first` chunk already read) into one OpenAI response
/// body, telling `observer` of each event as it is read.
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
        if reader.feed_observed(&chunk, Some(observer))? {
            break;
        }
    }
    reader.finish()
}

/// The worker's SSE bytes, fed as they arrive, framed by the node's one SSE reader
/// (`crate::sse`) and read into one body. Pure: the fuzz tests feed it arbitrary bytes cut
/// anywhere. A line longer than `limit` (without its end yet) or assembled text longer than
/// `limit` is `upstream_too_large`, so what it holds stays under `limit` plus one chunk.
pub(crate) struct SseAssembler {
    endpoint: Endpoint,
    limit: usize,
    worker: WorkerId,
    frames: SseFrames,
    acc: Assembled,
    done: bool,
}

impl SseAssembler {
    pub(crate) fn new(endpoint: Endpoint, limit: usize, worker: WorkerId) -> Self {
        Self {
            endpoint,
            limit,
            worker,
            frames: SseFrames::new(limit),
            acc: Assembled::default(),
            done: false,
        }
    }

    /// Reads `chunk`; true once `data: [DONE]` was read (later bytes are not read).
    #[cfg(test)]
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<bool, ApiError> {
        self.feed_observed(chunk, None)
    }

    /// [`Self::feed`], telling `observer` of every event read.
    fn feed_observed(
        &mut self,
        chunk: &[u8],
        mut observer: Option<&mut RequestObserver>,
    ) -> Result<bool, ApiError> {
        if self.done {
            return Ok(true);
        }
        let Self {
            endpoint,
            limit,
            worker,
            frames,
            acc,
            ..
        } = self;
        let flow = frames.feed(chunk, |d| {
            data(acc, *endpoint, d, *limit, *worker, observer.as_deref_mut())
        })?;
        self.done = flow == Flow::Stop;
        Ok(self.done)
    }

    /// The assembled body (a last line without its end is read too).
    pub(crate) fn finish(mut self) -> Result<AssembledBody, ApiError> {
        if !self.done {
            let Self {
                endpoint,
                limit,
                worker,
                frames,
                acc,
                ..
            } = &mut self;
            frames.finish(|d| data(acc, *endpoint, d, *limit, *worker, None))?;
        }
        self.acc.finish(self.endpoint, self.worker)
    }
}

/// Takes one payload into `acc`; [`Flow::Stop`] at `data: [DONE]`.
fn data(
    acc: &mut Assembled,
    endpoint: Endpoint,
    data: Data<'_>,
    limit: usize,
    worker: WorkerId,
    observer: Option<&mut RequestObserver>,
) -> Result<Flow, ApiError> {
    let json = match data {
        Data::Done => return Ok(Flow::Stop),
        Data::Overflow => return Err(too_large(worker, limit)),
        Data::Json(json) => json,
    };
    // Typed: only the fields the assembled body needs are read; the rest is skipped.
    let Some(event) = Chunk::parse(&json) else {
        return Ok(Flow::Continue);
    };
    if let Some(error) = event.error {
        return Err(ApiError::upstream(
            Stage::Upstream,
            "upstream_error_event",
            format!("{worker}: {error}"),
        ));
    }
    if let Some(observer) = observer {
        observer.parsed(&event);
    }
    acc.event(endpoint, event, limit, worker)?;
    Ok(Flow::Continue)
}

pub(super) fn too_large(worker: WorkerId, limit: usize) -> ApiError {
    ApiError::upstream(
        Stage::Upstream,
        "upstream_too_large",
        format!("{worker}: the answer is larger than {limit} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::Value;

    fn assemble(endpoint: Endpoint, lines: &[&str]) -> Result<Value, ApiError> {
        let mut reader = SseAssembler::new(endpoint, 1 << 20, WorkerId(1));
        for line in lines {
            if reader.feed(format!("{line}\n").as_bytes())? {
                break;
            }
        }
        Ok(serde_json::to_value(reader.finish()?).expect("a JSON body"))
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
