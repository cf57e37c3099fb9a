//! `[tokenizer] model_dir`: the model directory fixture (`router-tokenizer/tests/fixtures/tiny-llama`, a
//! Llama-3-shaped byte-level BPE written by `examples/tokenizer_fixture.rs`) loaded through a
//! config file; vLLM's special-token rule (a completion's prompt gets the BOS, a rendered
//! chat prompt carries its own and gets none); both forms of `chat_template` and
//! `bos_token`; `add_bos_token`; errors naming the key and the file; and
//! `forward_token_ids` against a simulated worker that reads token ids only.

use crate::support::{PROFILE, spawn_node_tuned};
use router_core::Endpoint;
use router_node::config::{Config, ConfigError};
use router_node::frontend::Limits;
use router_tokenizer::{PromptInput, Prompter};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The fixture's special tokens.
const BOS: u32 = 0;
const START_HEADER: u32 = 2;
const END_HEADER: u32 = 3;
const EOT: u32 = 4;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../router-tokenizer/tests/fixtures/tiny-llama")
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-md-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn load(dir: &Path, toml: &str) -> Result<Prompter, ConfigError> {
    let path = dir.join("node.toml");
    std::fs::write(&path, toml).unwrap();
    Config::load_with_env(Some(&path), std::iter::empty::<(String, String)>())?.prompter()
}

/// A config dir holding a copy of the fixture's tokenizer.json in `model/` with
/// `tokenizer_config` as its tokenizer_config.json.
fn model_copy(tag: &str, tokenizer_config: &Value) -> PathBuf {
    let dir = temp_dir(tag);
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::copy(
        fixture().join("tokenizer.json"),
        model.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(
        model.join("tokenizer_config.json"),
        serde_json::to_string(tokenizer_config).unwrap(),
    )
    .unwrap();
    dir
}

fn text(s: &str) -> PromptInput {
    PromptInput::Text(vec![s.to_owned()])
}

fn user(content: &str) -> Value {
    json!([{"role": "user", "content": content}])
}

#[tokio::test]
async fn a_model_dir_tokenizes_completions_with_the_bos_and_chat_with_the_template_s_own() {
    let dir = temp_dir("llama");
    let toml = format!("[tokenizer]\nmodel_dir = {:?}\n", fixture());
    let prompter = load(&dir, &toml).unwrap();
    assert!(prompter.tokenizer().describe().contains("model_dir"));
    assert!(prompter.tokenizer().splits_long_text());

    let plain = prompter.encode("hello world");
    assert!(!plain.contains(&BOS), "{plain:?}");
    let completion = prompter
        .tokenize_for(Endpoint::Completions, text("hello world"))
        .await;
    assert_eq!(completion[0], BOS);
    assert_eq!(&completion[1..], plain.as_slice());
    // Special-token strings in the text are their tokens, as in the engine.
    assert_eq!(prompter.encode("<|eot_id|>"), vec![EOT]);

    let rendered = prompter.render_chat(Some(&user(" hello world "))).unwrap();
    assert_eq!(
        rendered,
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello world<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    let chat = prompter.tokenize_for(Endpoint::Chat, text(&rendered)).await;
    // One BOS (the template's), not two.
    assert_eq!(chat[..2], [BOS, START_HEADER]);
    assert_eq!(chat.iter().filter(|&&id| id == BOS).count(), 1, "{chat:?}");
    assert_eq!(chat.iter().filter(|&&id| id == EOT).count(), 1, "{chat:?}");
    assert_eq!(chat.iter().filter(|&&id| id == END_HEADER).count(), 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_same_tokenizer_json_as_kind_huggingface_stays_plain() {
    let dir = temp_dir("plain");
    let toml = format!(
        "[tokenizer]\nkind = \"huggingface\"\npath = {:?}\n",
        fixture().join("tokenizer.json")
    );
    let prompter = load(&dir, &toml).unwrap();
    assert_ne!(prompter.encode("<|eot_id|>"), vec![EOT]);
    let completion = prompter
        .tokenize_for(Endpoint::Completions, text("hello world"))
        .await;
    assert_eq!(completion, prompter.encode("hello world"));
    assert_ne!(completion[0], BOS);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_template_list_an_added_token_object_and_add_bos_token_false_are_read() {
    let dir = model_copy(
        "list",
        &json!({
            "chat_template": [
                {"name": "tool_use", "template": "tools"},
                {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}|{{ eos_token }}"},
            ],
            "bos_token": {"content": "<|begin_of_text|>", "lstrip": false, "special": true},
            "eos_token": "<|eot_id|>",
            "add_bos_token": false,
        }),
    );
    // A relative model_dir is relative to the config file.
    let prompter = load(&dir, "[tokenizer]\nmodel_dir = \"model\"\n").unwrap();
    let rendered = prompter.render_chat(Some(&user("hi"))).unwrap();
    assert_eq!(rendered, "<|begin_of_text|>hi|<|eot_id|>");
    let completion = prompter
        .tokenize_for(Endpoint::Completions, text("hello"))
        .await;
    assert_eq!(completion, prompter.encode("hello"), "no BOS added");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_chat_template_jinja_file_is_used_when_the_config_has_none() {
    let dir = model_copy("jinja", &json!({"bos_token": "<|begin_of_text|>"}));
    std::fs::write(
        dir.join("model/chat_template.jinja"),
        "{{ bos_token }}[{{ messages | length }}]",
    )
    .unwrap();
    let prompter = load(&dir, "[tokenizer]\nmodel_dir = \"model\"\n").unwrap();
    assert_eq!(
        prompter.render_chat(Some(&user("hi"))).unwrap(),
        "<|begin_of_text|>[1]"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_model_dir_settings_are_errors_naming_the_key_and_the_file() {
    let dir = model_copy(
        "bad",
        &json!({"chat_template": [{"name": "rag", "template": "x"}]}),
    );
    let other = |name: &str, config: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("tokenizer.json"), "{ not a tokenizer").unwrap();
        std::fs::write(d.join("tokenizer_config.json"), config).unwrap();
    };
    other("garbage", "{}");
    other("badjson", "[1, 2");
    other("badbos", r#"{"bos_token": 7}"#);
    let cases = [
        (
            "model_dir = \"nowhere\"",
            "tokenizer.model_dir",
            "nowhere/tokenizer_config.json",
        ),
        (
            "model_dir = \"model\"",
            "tokenizer.model_dir",
            "no template named \"default\"",
        ),
        (
            "model_dir = \"garbage\"",
            "tokenizer.model_dir",
            "garbage/tokenizer.json",
        ),
        (
            "model_dir = \"badjson\"",
            "tokenizer.model_dir",
            "badjson/tokenizer_config.json",
        ),
        ("model_dir = \"badbos\"", "tokenizer.model_dir", "bos_token"),
        (
            "model_dir = \"model\"\npath = \"t.json\"",
            "tokenizer.path",
            "tokenizer.model_dir",
        ),
        (
            "model_dir = \"model\"\nchat_template = \"c.jinja\"",
            "tokenizer.chat_template",
            "tokenizer.model_dir",
        ),
        (
            "model_dir = \"model\"\nbos_token = \"<s>\"",
            "tokenizer.bos_token",
            "tokenizer.model_dir",
        ),
    ];
    for (lines, key, mentions) in cases {
        let toml = format!("[tokenizer]\n{lines}\n");
        let err = load(&dir, &toml).unwrap_err();
        let text = err.to_string();
        assert_eq!(err.key(), Some(key), "{toml}: {text}");
        assert!(text.starts_with(key), "{toml}: {text}");
        assert!(text.contains(mentions), "{toml}: {text}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A simulated worker without a tokenizer reads token-id prompts only: with
/// `forward_token_ids` the router's ids reach it (and it counts exactly them); without, the
/// text prompt is refused.
#[tokio::test]
async fn forward_token_ids_sends_the_router_s_ids_to_the_worker() {
    let worker = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = router_sim::SimConfig {
        speedup: 100.0,
        heartbeat: std::time::Duration::from_millis(50),
        ..router_sim::SimConfig::default()
    };
    let bus = std::sync::Arc::new(router_actors::bus::local::LocalBus::new());
    let worker = router_sim::SimWorker::start(worker, bus, cfg)
        .await
        .unwrap();
    let prompter = Prompter::from_model_dir(&fixture()).unwrap();
    let prompt = "The router counts every token, then the engine does it again.";
    let ids = prompter
        .tokenize_for(Endpoint::Completions, text(prompt))
        .await;
    let body = json!({"model": "sim", "prompt": prompt, "max_tokens": 2});

    let on = spawn_node_tuned(
        &[worker.endpoint()],
        Limits::default(),
        prompter.clone(),
        PROFILE,
        |state| state.with_forward_token_ids(true),
    )
    .await;
    let response = on.call("/v1/completions", body.clone()).await;
    assert_eq!(response.status().as_u16(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["usage"]["prompt_tokens"], ids.len(), "{answer}");
    on.assert_idle().await;

    let off = spawn_node_tuned(
        &[worker.endpoint()],
        Limits::default(),
        prompter,
        PROFILE,
        |s| s,
    )
    .await;
    let response = off.call("/v1/completions", body).await;
    assert_ne!(response.status().as_u16(), 200);
    off.assert_idle().await;
}
