//! The OpenAI answers of the simulated worker: one JSON body once the engine finished the
//! request, or SSE events as its tokens arrive (one per token, a final one with `usage`,
//! then `[DONE]`); a staging prefill's `kv_transfer_params` ride along. A response dropped
//! before the end (the client left) cancels the sequence.

use super::super::engine_task::{Delivery, EngineHandle};
use super::{TOKEN_TEXT, engine_gone};
use axum::Json;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use router_core::Endpoint;
use router_core::RequestId;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use tokio::sync::mpsc;

/// Cancels the sequence when the response is dropped before the engine finished it.
pub(super) struct CancelGuard {
    pub(super) engine: EngineHandle,
    pub(super) id: RequestId,
    pub(super) armed: bool,
    /// The request's `worker.generate` span, closed with the answer.
    pub(super) _span: tracing::Span,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.engine.cancel(self.id);
        }
    }
}

/// Everything a response needs besides the tokens.
pub(super) struct Reply {
    pub(super) route: Endpoint,
    pub(super) completion_id: String,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) prompt_tokens: usize,
    /// Set for a staging prefill request.
    pub(super) transfer: Option<Value>,
}

impl Reply {
    fn object(&self, stream: bool) -> &'static str {
        match (self.route, stream) {
            (Endpoint::Completions, _) => "text_completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Chat, false) => "chat.completion",
        }
    }

    /// vLLM's usage, with `prompt_tokens_details.cached_tokens`: the prompt tokens the
    /// engine found in its prefix cache.
    fn usage(&self, completion: u64, cached: u32) -> Value {
        let prompt = self.prompt_tokens as u64;
        json!({"prompt_tokens": prompt, "completion_tokens": completion,
               "total_tokens": prompt + completion,
               "prompt_tokens_details": {"cached_tokens": cached}})
    }

    /// One SSE event: `choice`, then `usage` and the staged KV's parameters when given.
    /// Written from typed fields (an event per token: building a JSON tree for each cost
    /// more than the rest of the simulated engine).
    fn chunk(
        &self,
        choice: EventChoice,
        usage: Option<EventUsage>,
        kv_transfer_params: Option<&Value>,
    ) -> bytes::Bytes {
        let event = Event {
            id: &self.completion_id,
            object: self.object(true),
            created: self.created,
            model: &self.model,
            choices: [choice],
            usage,
            kv_transfer_params,
        };
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"data: ");
        if serde_json::to_writer(&mut out, &event).is_err() {
            return bytes::Bytes::from_static(
                b"data: {\"error\":{\"message\":\"the simulated worker could not write an event\"}}\n\n",
            );
        }
        out.extend_from_slice(b"\n\n");
        bytes::Bytes::from(out)
    }

    fn event_usage(&self, completion: u64, cached: u32) -> EventUsage {
        let prompt = self.prompt_tokens as u64;
        EventUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: CachedTokens {
                cached_tokens: cached,
            },
        }
    }

    fn token_choice(&self, first: bool) -> EventChoice {
        match self.route {
            Endpoint::Completions => EventChoice::text(TOKEN_TEXT, None),
            Endpoint::Chat => EventChoice::delta(
                Delta {
                    role: first.then_some("assistant"),
                    content: Some(TOKEN_TEXT),
                },
                None,
            ),
        }
    }

    fn final_choice(&self) -> EventChoice {
        match self.route {
            Endpoint::Completions => EventChoice::text("", Some("length")),
            Endpoint::Chat => EventChoice::delta(
                Delta {
                    role: None,
                    content: None,
                },
                Some("length"),
            ),
        }
    }

    fn full(&self, completion: u64, cached: u32) -> Value {
        let text = TOKEN_TEXT.repeat(usize::try_from(completion).unwrap_or(0));
        let choice = match self.route {
            Endpoint::Completions => {
                json!({"index": 0, "text": text, "finish_reason": "length", "logprobs": null})
            }
            Endpoint::Chat => json!({"index": 0,
                "message": {"role": "assistant", "content": text}, "finish_reason": "length"}),
        };
        let mut body = json!({
            "id": self.completion_id, "object": self.object(false), "created": self.created,
            "model": self.model, "choices": [choice], "usage": self.usage(completion, cached),
        });
        if let (Some(params), Value::Object(map)) = (&self.transfer, &mut body) {
            map.insert("kv_transfer_params".to_owned(), params.clone());
        }
        body
    }
}

pub(super) async fn collect_response(
    reply: Reply,
    mut deliveries: mpsc::Receiver<Delivery>,
    mut guard: CancelGuard,
) -> Response {
    let mut completion = 0u64;
    loop {
        match deliveries.recv().await {
            Some(d) => {
                completion += u64::from(d.tokens);
                if d.finished {
                    guard.armed = false;
                    return Json(reply.full(completion, d.cached_tokens)).into_response();
                }
            }
            None => return engine_gone(),
        }
    }
}

struct StreamState {
    reply: Reply,
    deliveries: mpsc::Receiver<Delivery>,
    guard: CancelGuard,
    out: VecDeque<bytes::Bytes>,
    sent_tokens: u64,
    done: bool,
}

pub(super) fn stream_response(
    reply: Reply,
    deliveries: mpsc::Receiver<Delivery>,
    guard: CancelGuard,
) -> Response {
    let state = StreamState {
        reply,
        deliveries,
        guard,
        out: VecDeque::new(),
        sent_tokens: 0,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(chunk) = st.out.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(chunk), st));
            }
            if st.done {
                return None;
            }
            match st.deliveries.recv().await {
                Some(d) => st.push(d),
                None => {
                    st.done = true;
                    st.out.push_back(bytes::Bytes::from_static(
                        b"data: {\"error\":{\"message\":\"the simulated engine has stopped\",\"type\":\"engine_stopped\"}}\n\n",
                    ));
                }
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| engine_gone())
}

impl StreamState {
    fn push(&mut self, d: Delivery) {
        for i in 0..d.tokens {
            let first = self.sent_tokens == 0;
            // The staged KV's parameters ride on the first event of the finishing delivery.
            let params = (d.finished && i == 0)
                .then_some(self.reply.transfer.as_ref())
                .flatten();
            let chunk = self
                .reply
                .chunk(self.reply.token_choice(first), None, params);
            self.out.push_back(chunk);
            self.sent_tokens += 1;
        }
        if d.finished {
            self.guard.armed = false;
            self.done = true;
            let usage = self.reply.event_usage(self.sent_tokens, d.cached_tokens);
            // A delivery without tokens carries the staged KV's parameters on this event.
            let params = (d.tokens == 0)
                .then_some(self.reply.transfer.as_ref())
                .flatten();
            let chunk = self
                .reply
                .chunk(self.reply.final_choice(), Some(usage), params);
            self.out.push_back(chunk);
            self.out
                .push_back(bytes::Bytes::from_static(b"data: [DONE]\n\n"));
        }
    }
}

/// One streamed event as the simulated worker writes it (vLLM's field names).
#[derive(Serialize)]
struct Event<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [EventChoice; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<EventUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_transfer_params: Option<&'a Value>,
}

/// A choice of a completion (`text`) or chat (`delta`) event.
#[derive(Serialize)]
struct EventChoice {
    index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delta: Option<Delta>,
    finish_reason: Option<&'static str>,
}

impl EventChoice {
    fn text(text: &'static str, finish_reason: Option<&'static str>) -> Self {
        Self {
            index: 0,
            text: Some(text),
            delta: None,
            finish_reason,
        }
    }

    fn delta(delta: Delta, finish_reason: Option<&'static str>) -> Self {
        Self {
            index: 0,
            text: None,
            delta: Some(delta),
            finish_reason,
        }
    }
}

#[derive(Serialize)]
struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'static str>,
}

/// vLLM's usage, with `prompt_tokens_details.cached_tokens`.
#[derive(Serialize)]
struct EventUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: CachedTokens,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u32,
}
