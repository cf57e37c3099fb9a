//! The assembled body of answers that are more than one text: several choices, a batch of
//! prompts, tool calls, log-probabilities, and answers that are no answer at all.

use super::super::assemble::SseAssembler;
use super::super::error::ApiError;
use router_core::{Endpoint, WorkerId};
use serde_json::{Value, json};

fn assemble(endpoint: Endpoint, events: &[Value]) -> Result<Value, ApiError> {
    let mut reader = SseAssembler::new(endpoint, 1 << 20, WorkerId(7));
    for event in events {
        if reader.feed(format!("data: {event}\n\n").as_bytes())? {
            break;
        }
    }
    reader.feed(b"data: [DONE]\n\n")?;
    Ok(serde_json::to_value(reader.finish()?).expect("a JSON body"))
}

#[test]
fn interleaved_choices_of_n_2_stay_apart_in_index_order() {
    let body = assemble(
        Endpoint::Chat,
        &[
            json!({"id": "c", "choices": [{"index": 1, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "hel"}}]}),
            json!({"choices": [{"index": 1, "delta": {"content": "wor"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}),
            json!({"choices": [{"index": 1, "delta": {"content": "ld"}, "finish_reason": "length"}]}),
        ],
    )
    .expect("an answer");
    let choices = body["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2, "{body}");
    assert_eq!(choices[0]["index"], 0);
    assert_eq!(choices[0]["message"]["content"], "hello");
    assert_eq!(choices[0]["finish_reason"], "stop");
    assert_eq!(choices[1]["index"], 1);
    assert_eq!(choices[1]["message"]["content"], "world");
    assert_eq!(choices[1]["finish_reason"], "length");
}

#[test]
fn a_batch_of_prompts_keeps_one_choice_per_prompt_with_its_logprobs() {
    let body = assemble(
        Endpoint::Completions,
        &[
            json!({"choices": [{"index": 0, "text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [-0.5], "top_logprobs": [{"a": -0.5}], "text_offset": [0]}}]}),
            json!({"choices": [{"index": 1, "text": "x", "logprobs": {"tokens": ["x"], "token_logprobs": [-1.0], "top_logprobs": [null], "text_offset": [0]}}]}),
            json!({"choices": [{"index": 0, "text": "b", "logprobs": {"tokens": ["b"], "token_logprobs": [-0.25], "top_logprobs": [{"b": -0.25}], "text_offset": [1]}, "finish_reason": "length"}]}),
        ],
    )
    .expect("an answer");
    let choices = body["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[0]["text"], "ab");
    assert_eq!(choices[0]["logprobs"]["tokens"], json!(["a", "b"]));
    assert_eq!(
        choices[0]["logprobs"]["token_logprobs"],
        json!([-0.5, -0.25])
    );
    assert_eq!(choices[0]["logprobs"]["text_offset"], json!([0, 1]));
    assert_eq!(choices[1]["text"], "x");
    assert_eq!(choices[1]["logprobs"]["top_logprobs"], json!([null]));
    assert_eq!(choices[1]["finish_reason"], Value::Null);
}

#[test]
fn tool_call_fragments_become_whole_calls_and_chat_logprobs_are_joined() {
    let call = |index: u32, extra: Value| {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "function": {"arguments": extra}}
        ]}}]})
    };
    let body = assemble(
        Endpoint::Chat,
        &[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
            ]}, "logprobs": {"content": [{"token": "{", "logprob": -0.1}]}}]}),
            call(0, json!("{\"city\": ")),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
            ]}, "logprobs": {"content": [{"token": "}", "logprob": -0.2}]}}]}),
            call(0, json!("\"Paris\"}")),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ],
    )
    .expect("an answer");
    let message = &body["choices"][0]["message"];
    assert_eq!(
        message["content"],
        Value::Null,
        "a message of tool calls only"
    );
    let calls = message["tool_calls"].as_array().expect("tool calls");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["id"], "call_a");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], "{\"city\": \"Paris\"}");
    assert_eq!(calls[1]["function"]["name"], "get_time");
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    let logprobs = &body["choices"][0]["logprobs"]["content"];
    assert_eq!(logprobs.as_array().map(Vec::len), Some(2));
}

#[test]
fn reasoning_is_kept_beside_the_content() {
    let body = assemble(
        Endpoint::Chat,
        &[
            json!({"choices": [{"delta": {"reasoning_content": "think"}}]}),
            json!({"choices": [{"delta": {"content": "answer"}, "finish_reason": "stop"}]}),
        ],
    )
    .expect("an answer");
    assert_eq!(body["choices"][0]["index"], 0, "no index: its position");
    assert_eq!(body["choices"][0]["message"]["reasoning_content"], "think");
    assert_eq!(body["choices"][0]["message"]["content"], "answer");
}

#[test]
fn an_answer_without_a_choice_is_a_502_not_an_empty_200() {
    for events in [
        vec![],
        vec![json!({"usage": {"prompt_tokens": 3, "completion_tokens": 0}})],
        vec![json!({"choices": []})],
    ] {
        let err = assemble(Endpoint::Completions, &events).expect_err("no answer");
        assert_eq!(err.status.as_u16(), 502, "{events:?}");
        assert_eq!(err.reason, "upstream_empty");
    }
    let mut reader = SseAssembler::new(Endpoint::Chat, 1 << 20, WorkerId(7));
    reader.feed(b"data: not json\n\n").expect("skipped");
    let err = reader.finish().expect_err("malformed only");
    assert_eq!(err.reason, "upstream_empty");
}

#[test]
fn more_choices_than_the_bound_is_too_large() {
    let events: Vec<Value> = (0..=super::MAX_CHOICES as u32)
        .map(|i| json!({"choices": [{"index": i, "text": "t"}]}))
        .collect();
    let err = assemble(Endpoint::Completions, &events).expect_err("too many");
    assert_eq!(err.reason, "upstream_too_large");
}
