//! `[tokenizer]`: a HuggingFace tokenizer.json built here (a WordLevel model, saved to a temp
//! dir) and a Jinja chat template, loaded through a config file; the ids they give, what the
//! frontend books for a chat request, what the simulated worker counts; and config errors
//! naming their key.

use crate::support;
use crate::support::{error_of, spawn_node_with, spawn_worker};
use router_actors::bus::local::LocalBus;
use router_node::config::{Config, ConfigError};
use router_node::frontend::Limits;
use router_sim::{SimConfig, SimWorker};
use router_tokenizer::{PromptInput, Prompter};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
use tokenizers::{AddedToken, Tokenizer};
use tokio::net::TcpListener;

/// Words and their ids; anything else is `[UNK]` (0).
const VOCAB: &[(&str, u32)] = &[
    ("[UNK]", 0),
    ("BOS", 1),
    ("user", 2),
    (":", 3),
    ("hello", 4),
    ("world", 5),
    ("assistant", 6),
    ("EOS", 7),
    ("system", 8),
    ("be", 9),
    ("brief", 10),
];

/// A HuggingFace-style template: BOS, `role : content EOS` per message, then the generation
/// prompt; an unknown role fails the rendering.
const TEMPLATE: &str = r#"{{- bos_token }}
{%- for message in messages %}
{%- if message['role'] not in ['system', 'user', 'assistant'] %}
{{- raise_exception('unknown role ' + message['role']) }}
{%- endif %}
{{- ' ' + message['role'] + ' : ' + message['content'].strip() + ' ' + eos_token }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- ' assistant :' }}
{%- endif %}
"#;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-tok-{tag}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds the WordLevel tokenizer (whitespace-split words; `[SPECIAL]` added as a special
/// token) and saves it as `dir/tokenizer.json`.
fn save_word_level(dir: &Path) -> PathBuf {
    let model = WordLevel::builder()
        .vocab(VOCAB.iter().map(|(w, id)| ((*w).to_owned(), *id)).collect())
        .unk_token("[UNK]".to_owned())
        .build()
        .unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(WhitespaceSplit));
    tokenizer.add_special_tokens(&[AddedToken::from("[SPECIAL]", true)]);
    let path = dir.join("tokenizer.json");
    tokenizer.save(&path, true).unwrap();
    path
}

fn load(dir: &Path, toml: &str) -> Result<Prompter, ConfigError> {
    let path = dir.join("node.toml");
    std::fs::write(&path, toml).unwrap();
    Config::load_with_env(Some(&path), std::iter::empty::<(String, String)>())?.prompter()
}

/// A config dir with the tokenizer and the template, and the prompter loaded from it
/// through relative paths.
fn word_level_prompter() -> (PathBuf, Prompter) {
    let dir = temp_dir("wl");
    save_word_level(&dir);
    std::fs::write(dir.join("chat.jinja"), TEMPLATE).unwrap();
    let prompter = load(
        &dir,
        r#"
[tokenizer]
kind = "huggingface"
path = "tokenizer.json"
chat_template = "chat.jinja"
bos_token = "BOS"
eos_token = "EOS"
"#,
    )
    .unwrap();
    (dir, prompter)
}

fn chat() -> Value {
    json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "  hello world "},
    ])
}

const RENDERED: &str = "BOS system : be brief EOS user : hello world EOS assistant :";
const RENDERED_IDS: &[u32] = &[1, 8, 3, 9, 10, 7, 2, 3, 4, 5, 7, 6, 3];

#[tokio::test]
async fn a_huggingface_tokenizer_json_loads_through_the_config_and_gives_its_ids() {
    let (dir, prompter) = word_level_prompter();
    assert!(prompter.tokenizer().describe().ends_with("tokenizer.json"));
    assert_eq!(prompter.encode("hello world"), vec![4, 5]);
    assert_eq!(prompter.encode("user : goodbye"), vec![2, 3, 0]);
    // Special tokens are plain text: `[SPECIAL]` is an unknown word, not its added id.
    assert_eq!(prompter.encode("[SPECIAL] hello"), vec![0, 4]);
    // Batches are tokenized part by part; ids in the body are used as they are.
    let batch = PromptInput::Text(vec!["hello".into(), "world".into()]);
    assert_eq!(prompter.tokenize(batch).await, vec![4, 5]);
    let ids = PromptInput::Tokens(vec![99, 100]);
    assert_eq!(prompter.tokenize(ids).await, vec![99, 100]);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn tiktoken_encodings_are_chosen_by_name_and_the_default_is_unchanged() {
    let dir = temp_dir("tt");
    let r50k = load(&dir, "[tokenizer]\nencoding = \"r50k_base\"\n").unwrap();
    // GPT-2's ids.
    assert_eq!(r50k.encode("hello world"), vec![31373, 995]);
    let default = load(&dir, "").unwrap();
    let text = PromptInput::Text(vec!["hello world <|endoftext|>".into()]);
    assert_eq!(
        default.tokenize(text.clone()).await,
        Prompter::default().tokenize(text).await
    );
    let messages = chat();
    assert_eq!(
        default.render_chat(Some(&messages)).unwrap(),
        router_tokenizer::render_chat(Some(&messages)).unwrap()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_chat_template_renders_the_messages() {
    let (dir, prompter) = word_level_prompter();
    let messages = chat();
    let rendered = prompter.render_chat(Some(&messages)).unwrap();
    assert_eq!(rendered, RENDERED);
    assert_eq!(prompter.encode(&rendered), RENDERED_IDS);
    // Rendered plainly, `role:` words would be unknown.
    let plain = router_tokenizer::render_chat(Some(&messages)).unwrap();
    assert_eq!(prompter.encode(&plain), vec![0, 9, 10, 0, 4, 5, 0]);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_frontend_books_the_templated_prompt_and_a_render_error_is_a_400_naming_messages() {
    let (dir, prompter) = word_level_prompter();
    let worker = spawn_worker(1, Duration::from_millis(400)).await;
    let node = spawn_node_with(&[worker.url.as_str()], Limits::default(), prompter).await;
    let call = node
        .post("/v1/chat/completions")
        .json(&json!({"model": "m", "messages": chat(), "max_tokens": 4}));
    let pending = tokio::spawn(async move { call.send().await.unwrap().status().as_u16() });
    node.wait_bookings(1).await;
    let snapshot = node.router.observe().await.unwrap();
    let booked: u64 = snapshot
        .scheduler
        .ledger
        .ranks
        .iter()
        .map(|r| r.prefill_tokens)
        .sum();
    assert_eq!(booked, RENDERED_IDS.len() as u64);
    assert_eq!(pending.await.unwrap(), 200);
    // The worker got the client's messages, not the rendering.
    let seen = worker.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body["messages"], chat());

    let response = node
        .call(
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}),
        )
        .await;
    assert_eq!(response.status().as_u16(), 400);
    let error = error_of(response).await;
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("field `messages`"), "{error}");
    assert!(message.contains("unknown role robot"), "{error}");
    node.assert_idle().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_simulated_worker_counts_with_the_same_prompter() {
    let (dir, prompter) = word_level_prompter();
    let cfg = SimConfig {
        speedup: 100.0,
        heartbeat: Duration::from_millis(50),
        prompts: Arc::new(prompter),
        ..support::sim_config()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let worker = SimWorker::start(listener, Arc::new(LocalBus::new()), cfg)
        .await
        .unwrap();
    let response: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", worker.endpoint()))
        .json(&json!({"model": "sim", "messages": chat(), "max_tokens": 2}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        response["usage"]["prompt_tokens"],
        RENDERED_IDS.len(),
        "{response}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_tokenizer_settings_are_config_errors_naming_the_key() {
    let dir = temp_dir("bad");
    std::fs::write(dir.join("garbage.json"), "{ not a tokenizer").unwrap();
    std::fs::write(
        dir.join("broken.jinja"),
        "{% for m in messages %}{{ m.role }",
    )
    .unwrap();
    std::fs::write(dir.join("ok.jinja"), "{{ messages[0].content }}").unwrap();
    let cases = [
        (
            "[tokenizer]\nkind = \"huggingface\"\npath = \"missing.json\"\n",
            "tokenizer.path",
            "missing.json",
        ),
        (
            "[tokenizer]\nkind = \"huggingface\"\npath = \"garbage.json\"\n",
            "tokenizer.path",
            "garbage.json",
        ),
        (
            "[tokenizer]\nchat_template = \"nowhere.jinja\"\n",
            "tokenizer.chat_template",
            "nowhere.jinja",
        ),
        (
            "[tokenizer]\nchat_template = \"broken.jinja\"\n",
            "tokenizer.chat_template",
            "broken.jinja",
        ),
        (
            "[tokenizer]\nkind = \"huggingface\"\n",
            "tokenizer.path",
            "is required",
        ),
        (
            "[tokenizer]\npath = \"tokenizer.json\"\n",
            "tokenizer.path",
            "huggingface",
        ),
        (
            "[tokenizer]\nbos_token = \"<s>\"\n",
            "tokenizer.bos_token",
            "chat_template",
        ),
    ];
    for (toml, key, mentions) in cases {
        let err = load(&dir, toml).unwrap_err();
        let text = err.to_string();
        assert_eq!(err.key(), Some(key), "{toml}: {text}");
        assert!(text.starts_with(key), "{toml}: {text}");
        assert!(text.contains(mentions), "{toml}: {text}");
    }
    // Unknown encodings and kinds are parse errors naming the value.
    let err = load(&dir, "[tokenizer]\nencoding = \"o300k\"\n").unwrap_err();
    assert!(err.to_string().contains("o300k"), "{err}");
    let err = load(&dir, "[tokenizer]\nkind = \"sentencepiece\"\n").unwrap_err();
    assert!(err.to_string().contains("sentencepiece"), "{err}");
    // A good template with the default tokenizer loads.
    let ok = load(&dir, "[tokenizer]\nchat_template = \"ok.jinja\"\n").unwrap();
    assert_eq!(ok.render_chat(Some(&chat())).unwrap(), "be brief");
    let _ = std::fs::remove_dir_all(dir);
}
