//! The body of a non-streaming answer, built from the worker's streamed events: every choice
//! by its `index` (`n > 1`, and a completion's batch of prompts, whose choices the engine
//! numbers across the prompts), each with its text (or chat content), its reasoning text, its
//! tool calls (fragments joined by call index: `id`, `type` and the function's `name` from
//! the first fragment that has them, `arguments` concatenated), its log-probabilities
//! (a completion's four parallel arrays, a chat choice's `content` list, concatenated in
//! order) and its last `finish_reason`. `id`, `model`, `created` and `system_fingerprint` are
//! the first event's that had them, `usage` the last one's. Pure: `assemble.rs` feeds it.
//!
//! An answer with no event at all, or no choice in any event, is not an answer: the client
//! gets a 502 (`upstream_empty`), never an empty 200. What it holds is bounded: text,
//! arguments and log-probabilities together by the body limit, choices and tool calls by
//! [`MAX_CHOICES`] and [`MAX_TOOL_CALLS`] (more is `upstream_too_large`).

use super::error::{ApiError, Stage};
use crate::sse::{Chunk, ChunkChoice};
use router_core::{Endpoint, WorkerId};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// Most choices one answer may carry (`n` × batch prompts).
pub(super) const MAX_CHOICES: usize = 1024;
/// Most tool calls one choice may carry.
pub(super) const MAX_TOOL_CALLS: usize = 256;

/// What the events said so far.
#[derive(Debug, Default)]
pub(super) struct Assembled {
    id: Option<Box<RawValue>>,
    model: Option<Box<RawValue>>,
    created: Option<Box<RawValue>>,
    system_fingerprint: Option<Box<RawValue>>,
    usage: Option<Box<RawValue>>,
    choices: BTreeMap<u32, ChoiceAcc>,
    /// Events read (a JSON object each).
    events: u64,
    /// Bytes of text, arguments and log-probabilities held.
    bytes: usize,
}

#[derive(Debug, Default)]
struct ChoiceAcc {
    text: String,
    reasoning: String,
    finish_reason: Option<Box<RawValue>>,
    tool_calls: BTreeMap<u32, ToolCallAcc>,
    logprobs: Logprobs,
}

#[derive(Debug, Default)]
struct ToolCallAcc {
    id: Option<Box<RawValue>>,
    kind: Option<Box<RawValue>>,
    name: Option<Box<RawValue>>,
    arguments: String,
}

/// Log-probabilities as streamed: a completion's parallel arrays, or a chat choice's list.
#[derive(Debug, Default)]
struct Logprobs {
    seen: bool,
    tokens: Vec<Box<RawValue>>,
    token_logprobs: Vec<Box<RawValue>>,
    top_logprobs: Vec<Box<RawValue>>,
    text_offset: Vec<Box<RawValue>>,
    content: Vec<Box<RawValue>>,
}

/// A streamed `logprobs` object, as far as either shape goes.
#[derive(Deserialize)]
struct LogprobsEvent<'a> {
    #[serde(default, borrow)]
    tokens: Vec<&'a RawValue>,
    #[serde(default, borrow)]
    token_logprobs: Vec<&'a RawValue>,
    #[serde(default, borrow)]
    top_logprobs: Vec<&'a RawValue>,
    #[serde(default, borrow)]
    text_offset: Vec<&'a RawValue>,
    #[serde(default, borrow)]
    content: Option<Vec<&'a RawValue>>,
}

/// One streamed tool-call fragment.
#[derive(Deserialize)]
struct ToolCallEvent<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(rename = "type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    function: Option<FunctionEvent<'a>>,
}

#[derive(Deserialize)]
struct FunctionEvent<'a> {
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<std::borrow::Cow<'a, str>>,
}

/// Keeps the first value a field had.
fn keep_first(kept: &mut Option<Box<RawValue>>, read: Option<&RawValue>) {
    if kept.is_none() {
        *kept = read.map(RawValue::to_owned);
    }
}

fn owned(items: Vec<&RawValue>) -> impl Iterator<Item = Box<RawValue>> + '_ {
    items.into_iter().map(RawValue::to_owned)
}

impl Assembled {
    /// Takes one event (already checked for an `error`); `limit` bounds what is held.
    pub(super) fn event(
        &mut self,
        endpoint: Endpoint,
        event: Chunk<'_>,
        limit: usize,
        worker: WorkerId,
    ) -> Result<(), ApiError> {
        self.events += 1;
        keep_first(&mut self.id, event.id);
        keep_first(&mut self.model, event.model);
        keep_first(&mut self.created, event.created);
        keep_first(&mut self.system_fingerprint, event.system_fingerprint);
        if let Some(usage) = event.usage {
            self.usage = Some(usage.to_owned());
        }
        for (position, choice) in event.choices.into_iter().enumerate() {
            let index = choice.index.unwrap_or(position as u32);
            if !self.choices.contains_key(&index) && self.choices.len() >= MAX_CHOICES {
                return Err(too_many(worker, "choices", MAX_CHOICES));
            }
            let acc = self.choices.entry(index).or_default();
            self.bytes += acc.add(endpoint, choice, worker)?;
        }
        if self.bytes > limit {
            return Err(super::assemble::too_large(worker, limit));
        }
        Ok(())
    }

    /// The body; an answer that carried no choice is a 502.
    pub(super) fn finish(
        self,
        endpoint: Endpoint,
        worker: WorkerId,
    ) -> Result<AssembledBody, ApiError> {
        if self.choices.is_empty() {
            let what = if self.events == 0 {
                "no event"
            } else {
                "events without a choice"
            };
            return Err(ApiError::upstream(
                Stage::Upstream,
                "upstream_empty",
                format!("{worker}: the answer had {what}"),
            ));
        }
        let object = match endpoint {
            Endpoint::Completions => "text_completion",
            Endpoint::Chat => "chat.completion",
        };
        let choices = self
            .choices
            .into_iter()
            .map(|(index, acc)| acc.finish(endpoint, index))
            .collect();
        Ok(AssembledBody {
            id: self.id,
            object,
            created: self.created,
            model: self.model,
            system_fingerprint: self.system_fingerprint,
            choices,
            usage: self.usage,
        })
    }
}

fn too_many(worker: WorkerId, what: &str, limit: usize) -> ApiError {
    ApiError::upstream(
        Stage::Upstream,
        "upstream_too_large",
        format!("{worker}: the answer has more than {limit} {what}"),
    )
}

impl ChoiceAcc {
    /// Adds one event's part of this choice; returns the bytes it added.
    fn add(
        &mut self,
        endpoint: Endpoint,
        choice: ChunkChoice<'_>,
        worker: WorkerId,
    ) -> Result<usize, ApiError> {
        let mut added = 0;
        let text = match endpoint {
            Endpoint::Completions => choice.text.as_deref(),
            Endpoint::Chat => choice.delta.as_ref().and_then(|d| d.content.as_deref()),
        };
        if let Some(text) = text {
            self.text.push_str(text);
            added += text.len();
        }
        if let Some(reasoning) = choice
            .delta
            .as_ref()
            .and_then(|d| d.reasoning_content.as_deref())
        {
            self.reasoning.push_str(reasoning);
            added += reasoning.len();
        }
        if let Some(calls) = choice.delta.as_ref().and_then(|d| d.tool_calls) {
            added += calls.get().len();
            for call in
                serde_json::from_str::<Vec<ToolCallEvent<'_>>>(calls.get()).unwrap_or_default()
            {
                if !self.tool_calls.contains_key(&call.index)
                    && self.tool_calls.len() >= MAX_TOOL_CALLS
                {
                    return Err(too_many(worker, "tool calls", MAX_TOOL_CALLS));
                }
                let acc = self.tool_calls.entry(call.index).or_default();
                keep_first(&mut acc.id, call.id);
                keep_first(&mut acc.kind, call.kind);
                if let Some(function) = call.function {
                    keep_first(&mut acc.name, function.name);
                    if let Some(arguments) = function.arguments {
                        acc.arguments.push_str(&arguments);
                    }
                }
            }
        }
        if let Some(logprobs) = choice.logprobs {
            added += logprobs.get().len();
            if let Ok(event) = serde_json::from_str::<LogprobsEvent<'_>>(logprobs.get()) {
                let l = &mut self.logprobs;
                l.seen = true;
                l.tokens.extend(owned(event.tokens));
                l.token_logprobs.extend(owned(event.token_logprobs));
                l.top_logprobs.extend(owned(event.top_logprobs));
                l.text_offset.extend(owned(event.text_offset));
                l.content.extend(owned(event.content.unwrap_or_default()));
            }
        }
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(added)
    }

    fn finish(self, endpoint: Endpoint, index: u32) -> AssembledChoice {
        let logprobs = self.logprobs.seen.then_some(match endpoint {
            Endpoint::Completions => AssembledLogprobs::Completion {
                tokens: self.logprobs.tokens,
                token_logprobs: self.logprobs.token_logprobs,
                top_logprobs: self.logprobs.top_logprobs,
                text_offset: self.logprobs.text_offset,
            },
            Endpoint::Chat => AssembledLogprobs::Chat {
                content: self.logprobs.content,
            },
        });
        match endpoint {
            Endpoint::Completions => AssembledChoice::Completion {
                index,
                text: self.text,
                logprobs,
                finish_reason: self.finish_reason,
            },
            Endpoint::Chat => {
                let tool_calls: Vec<ToolCall> = self
                    .tool_calls
                    .into_values()
                    .map(|call| ToolCall {
                        id: call.id,
                        kind: call.kind,
                        function: Function {
                            name: call.name,
                            arguments: call.arguments,
                        },
                    })
                    .collect();
                // As OpenAI answers: a message that only calls tools has no content.
                let content = (!self.text.is_empty() || tool_calls.is_empty()).then_some(self.text);
                AssembledChoice::Chat {
                    index,
                    message: Message {
                        role: "assistant",
                        content,
                        reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
                        tool_calls,
                    },
                    logprobs,
                    finish_reason: self.finish_reason,
                }
            }
        }
    }
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
    choices: Vec<AssembledChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Box<RawValue>>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum AssembledChoice {
    Completion {
        index: u32,
        text: String,
        logprobs: Option<AssembledLogprobs>,
        finish_reason: Option<Box<RawValue>>,
    },
    Chat {
        index: u32,
        message: Message,
        logprobs: Option<AssembledLogprobs>,
        finish_reason: Option<Box<RawValue>>,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum AssembledLogprobs {
    Completion {
        tokens: Vec<Box<RawValue>>,
        token_logprobs: Vec<Box<RawValue>>,
        top_logprobs: Vec<Box<RawValue>>,
        text_offset: Vec<Box<RawValue>>,
    },
    Chat {
        content: Vec<Box<RawValue>>,
    },
}

#[derive(Debug, Serialize)]
struct Message {
    role: &'static str,
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall>,
}

#[derive(Debug, Serialize)]
struct ToolCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<Box<RawValue>>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<Box<RawValue>>,
    function: Function,
}

#[derive(Debug, Serialize)]
struct Function {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Box<RawValue>>,
    arguments: String,
}

#[cfg(test)]
#[path = "assembled_tests.rs"]
mod tests;
