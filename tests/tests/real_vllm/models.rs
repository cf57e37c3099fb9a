//! Two models and a LoRA adapter behind one node, configured the simplest way: `[[engines]]`
//! entries naming their model directory, no `[tokenizer]`, no `node.block_size`. Engine M1
//! serves the tiny model (blocks of 32); engine M2 serves a second tiny model with another
//! tokenizer (blocks of 64) and the adapter `sql`, and publishes its KV events to a concrete
//! address, which vLLM connects to (the link binds it).
//!
//! What a user checks: `/v1/models` lists both models and the adapter with its parent; every
//! request reaches an engine that serves its model (an engine answers a model it does not
//! serve with a 404, so any misrouting fails the request); at least 18 of 20 pairs of text
//! prompts sharing a long prefix are served from the engine's cache, per model and for the
//! adapter; each pool's index fills from its engine's events (M2's through the bound
//! socket). Then a second node links M2 the wrong way round (connecting to an address
//! nobody binds) and reports the engine silent once it prefills.

use super::{Router, eventually, http, metrics, state};
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_system_tests::support::vllm::{
    EngineOptions, require_vllm, tiny_lora_b, tiny_model, tiny_model_b,
};
use switchyard_system_tests::support::{NodeBus, RouterNode, VllmEngine};

/// Words the tiny tokenizers know pieces of; prompts are made of them.
const WORDS: [&str; 24] = [
    "freight", "yard", "signal", "track", "engine", "router", "wagon", "points", "shunting",
    "morning", "request", "prefix", "cache", "worker", "queue", "river", "mountain", "library",
    "kitchen", "weather", "number", "question", "answer", "planet",
];

/// A deterministic text of `words` words.
fn text(seed: u64, words: usize) -> String {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(7);
    (0..words)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            WORDS[((x >> 33) % WORDS.len() as u64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn complete(router: &Router, model: &str, prompt: &str) -> Value {
    let response = http()
        .post(format!("{}/v1/completions", router.api))
        .json(&json!({"model": model, "prompt": prompt, "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{model}: {status}: {body}");
    body
}

/// 20 pairs of prompts sharing a prefix of `words` words (at least 8 blocks); how many
/// seconds were served from the engine's cache (at least 4 blocks of it).
async fn pairs_from_cache(
    router: &Router,
    model: &str,
    block: u64,
    seed: u64,
    words: usize,
) -> usize {
    let mut hits = 0;
    for pair in 0..20u64 {
        let prefix = text(seed + pair, words);
        let first = format!("{prefix} {}", text(seed + 1000 + pair, 30));
        let second = format!("{prefix} {}", text(seed + 2000 + pair, 30));
        let body = complete(router, model, &first).await;
        let prompt_tokens = body["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        assert!(
            prompt_tokens >= 9 * block,
            "{model}: a prefix of 8 blocks needs a longer text ({prompt_tokens} tokens)"
        );
        // The engine publishes the stored blocks after answering; the router needs them.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let body = complete(router, model, &second).await;
        let cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        if cached >= 4 * block {
            hits += 1;
        }
    }
    hits
}

fn engines_toml(m1: &VllmEngine, m2: &VllmEngine, m2_bound: bool) -> String {
    let m2_events = if m2_bound {
        format!(
            "kv_events = \"tcp://127.0.0.1:{}\"\nkv_events_bind = true\n",
            m2.kv_port
        )
    } else {
        format!(
            "kv_events = \"tcp://127.0.0.1:{}\"\nsilent_after_ms = 2000\n",
            m2.kv_port
        )
    };
    format!(
        "[[engines]]\nkind = \"vllm\"\nurl = \"{}\"\nkv_events = \"{}\"\nreplay = \"{}\"\n\
         model_dir = \"{}\"\npoll_ms = 200\nlease_ms = 10000\n\n\
         [[engines]]\nkind = \"vllm\"\nurl = \"{}\"\n{m2_events}model_dir = \"{}\"\npoll_ms = 200\n\
         lease_ms = 10000\n",
        m1.url(),
        m1.kv_events(),
        m1.replay(),
        tiny_model().display(),
        m2.url(),
        tiny_model_b().display(),
    )
}

/// The listed models: id and parent.
async fn listed(router: &Router) -> Vec<(String, Option<String>)> {
    let list: Value = http()
        .get(format!("{}/v1/models", router.api))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap_or_default().to_owned(),
                m["parent"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs real vLLM engines (minutes): scripts/test-real-engines.sh"]
async fn two_models_and_an_adapter_behind_one_node() {
    require_vllm();
    assert!(
        tiny_model_b().join("tokenizer.json").exists() && tiny_lora_b().exists(),
        "run scripts/test-real-engines.sh: it makes the second tiny model and its adapter"
    );
    let m2_options = EngineOptions {
        model: Some(tiny_model_b()),
        kv_connect: true,
        extra: [
            "--block-size",
            "64",
            "--enable-lora",
            "--max-lora-rank",
            "8",
            "--lora-modules",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([format!("sql={}", tiny_lora_b().display())])
        .collect(),
        ..EngineOptions::default()
    };
    let engines = tokio::task::block_in_place(|| {
        VllmEngine::start_all_with(&[
            ("vllm-m1", EngineOptions::default()),
            ("vllm-m2", m2_options),
        ])
    });
    let (m1, m2) = (&engines[0], &engines[1]);
    let (model_1, model_2) = (
        tiny_model().display().to_string(),
        tiny_model_b().display().to_string(),
    );

    let node = RouterNode::start_with_node(
        "router-models",
        "real-models",
        &NodeBus::InProcess,
        "",
        &engines_toml(m1, m2, true),
    );
    let router = Router::of(&node);
    eventually("both models and the adapter are listed", || async {
        let models = listed(&router).await;
        models.contains(&(model_1.clone(), None))
            && models.contains(&(model_2.clone(), None))
            && models.contains(&("sql".to_owned(), Some(model_2.clone())))
    })
    .await;

    // The second model's smaller vocabulary takes about three tokens a word (the context is
    // 2,048 tokens).
    let m1_hits = pairs_from_cache(&router, &model_1, 32, 0, 500).await;
    let m2_hits = pairs_from_cache(&router, &model_2, 64, 100, 250).await;
    let sql_hits = pairs_from_cache(&router, "sql", 64, 200, 250).await;
    assert!(
        m1_hits >= 18 && m2_hits >= 18 && sql_hits >= 18,
        "pairs from cache: {model_1}: {m1_hits}, {model_2}: {m2_hits}, sql: {sql_hits} (of 20)"
    );

    // Each pool learned its engine's block size and indexed its events (M2's through the
    // socket the link bound); both engines are heard.
    let s = state(&router).await;
    for (model, block) in [(&model_1, 32), (&model_2, 64)] {
        let pool = &s["pools"][model.as_str()];
        let blocks = pool["kv_events"][0]["state"]["index"]["rank_blocks"]
            .as_u64()
            .unwrap_or(0);
        assert!(blocks > 0, "{model}: an empty index: {pool}");
        let engine = &pool["engines"][0];
        assert_eq!(engine["capacity"]["block_size"], block, "{engine}");
        assert_eq!(engine["kv_events_heard"]["state"], "heard", "{engine}");
    }
    assert_eq!(node.stop().code, Some(0));

    // Linked the wrong way round: M2 connects to an address nobody binds. It serves, and
    // the link says it hears nothing.
    let node = RouterNode::start_with_node(
        "router-silent",
        "real-silent",
        &NodeBus::InProcess,
        "",
        &engines_toml(m1, m2, false),
    );
    let router = Router::of(&node);
    eventually("M2 joined", || async {
        state(&router).await["pools"][model_2.as_str()]["registry"]["workers"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
    })
    .await;
    for i in 0..3 {
        complete(&router, &model_2, &text(300 + i, 250)).await;
    }
    eventually("M2 is reported silent", || async {
        let s = state(&router).await;
        s["pools"][model_2.as_str()]["engines"][0]["kv_events_heard"]["state"] == "silent"
    })
    .await;
    let text = metrics(&router).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("switchyard_engine_kv_events_silent{")
                && l.contains(&m2.url())
                && l.ends_with(" 1")),
        "{text}"
    );
    eventually("the warning is logged, naming the engine", || async {
        let output = node.output();
        output
            .lines()
            .any(|l| l.contains("no KV event reaches the link") && l.contains(&m2.url()))
    })
    .await;
    assert_eq!(node.stop().code, Some(0));
    drop(engines);
}
