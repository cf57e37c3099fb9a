//! The simulated worker reading text and chat bodies with the routers' tokenizer (a
//! router-tokenizer `Prompter` as its reader): its token counts and KV block hashes are the
//! router's, and its chat answers have the OpenAI shapes. Token-id behaviour is tested in
//! `sim_worker.rs`.

use futures::StreamExt;
use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_actors::wire::{self, Subjects};
use router_core::hashing::local_block_hashes;
use router_core::index::KvEventData;
use router_core::{KvEvent, PoolRole};
use router_sim::{Role, SimConfig, SimWorker};
use router_tokenizer::{PromptInput, Prompter, render_chat};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const CLUSTER: &str = "simtext";

fn config(role: Role) -> SimConfig {
    SimConfig {
        role,
        total_kv_blocks: 1024,
        speedup: 10.0,
        cluster: CLUSTER.to_owned(),
        heartbeat: Duration::from_millis(50),
        prompts: Arc::new(Prompter::default()),
        ..SimConfig::default()
    }
}

async fn start(bus: Arc<dyn Bus>, cfg: SimConfig) -> SimWorker {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimWorker::start(listener, bus, cfg).await.unwrap()
}

async fn post(worker: &SimWorker, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", worker.endpoint()))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE body, `[DONE]` excluded.
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn a_text_prompt_counts_and_hashes_the_routers_tokens() {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let mut kv = bus
        .subscribe(Subjects::new(CLUSTER).kv_events(PoolRole::Aggregated))
        .await
        .unwrap();
    let sim = start(bus.clone(), config(Role::Agg)).await;
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    let tokens = Prompter::default()
        .tokenize(PromptInput::Text(vec![text.clone()]))
        .await;
    let expected = local_block_hashes(&tokens, 16, None);
    assert!(expected.len() >= 4, "{} tokens", tokens.len());
    let response = post(
        &sim,
        "/v1/completions",
        &json!({"model": "sim", "prompt": text, "stream": true, "max_tokens": 1}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let events = events(&response.text().await.unwrap());
    assert_eq!(
        events.last().unwrap()["usage"]["prompt_tokens"],
        tokens.len()
    );
    let mut stored = Vec::new();
    while stored.len() < expected.len() {
        let msg = tokio::time::timeout(Duration::from_secs(5), kv.next())
            .await
            .unwrap()
            .unwrap();
        for event in wire::decode::<Vec<KvEvent>>(&msg.payload, CLUSTER)
            .unwrap()
            .body
        {
            if let KvEventData::Stored { blocks, .. } = event.data {
                stored.extend(blocks.iter().map(|b| b.local));
            }
        }
    }
    assert_eq!(stored, expected);
}

#[tokio::test]
async fn chat_answers_as_one_json_and_as_chunks() {
    let sim = start(Arc::new(LocalBus::new()), config(Role::Agg)).await;
    let messages =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]);
    let body: Value = post(
        &sim,
        "/v1/chat/completions",
        &json!({"model": "sim", "messages": messages, "max_tokens": 2}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], "tok tok ");
    let rendered = render_chat(Some(&messages)).unwrap();
    let prompt = Prompter::default()
        .tokenize(PromptInput::Text(vec![rendered]))
        .await;
    assert_eq!(body["usage"]["prompt_tokens"], prompt.len());

    let response = post(
        &sim,
        "/v1/chat/completions",
        &json!({"model": "sim", "messages": messages, "max_tokens": 2, "stream": true}),
    )
    .await;
    let text = response.text().await.unwrap();
    let events = events(&text);
    assert_eq!(events.len(), 3, "{text}");
    assert_eq!(events[0]["object"], "chat.completion.chunk");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(events[0]["choices"][0]["delta"]["content"], "tok ");
    assert_eq!(events[1]["choices"][0]["delta"]["content"], "tok ");
    assert_eq!(events[2]["choices"][0]["finish_reason"], "length");
    assert!(text.trim_end().ends_with("data: [DONE]"));

    let bad = post(
        &sim,
        "/v1/chat/completions",
        &json!({"model": "sim", "messages": "hi"}),
    )
    .await;
    assert_eq!(bad.status(), 400);
    let err: Value = bad.json().await.unwrap();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("messages"),
        "{err}"
    );
}

#[tokio::test]
async fn a_streaming_chat_prefill_carries_the_params_in_its_first_event() {
    let prefill = start(Arc::new(LocalBus::new()), config(Role::Prefill)).await;
    let text = post(
        &prefill,
        "/v1/chat/completions",
        &json!({"model": "sim", "messages": [{"role": "user", "content": "hi"}],
                "stream": true, "kv_transfer_params": {"do_remote_decode": true}}),
    )
    .await
    .text()
    .await
    .unwrap();
    let events = events(&text);
    assert_eq!(events[0]["choices"][0]["delta"]["content"], "tok ");
    assert_eq!(events[0]["kv_transfer_params"]["do_remote_prefill"], true);
    assert!(events[0]["kv_transfer_params"]["request_id"].is_string());
}
