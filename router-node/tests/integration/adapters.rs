//! LoRA adapters and cache salts through a served node: the fleet's models and adapters in
//! `GET /v1/models` (learned from the workers' announcements), an adapter's requests sent
//! only to the workers that serve it, and `cache_salt` scoping the prefix the router
//! predicts exactly as the engine scopes its cache.

use super::serve::{Served, start, test_config};
use crate::support;
use router_core::WorkerId;
use router_sim::SimWorker;
use serde_json::{Value, json};
use std::time::Duration;

/// A simulated worker on the node's bus, serving `loras` beside its base model `sim`.
async fn sim_worker(node: &Served, cluster: &str, id: u64, loras: &[&str]) -> SimWorker {
    node.sim_worker(router_sim::SimConfig {
        worker_id: WorkerId(id),
        cluster: cluster.to_owned(),
        loras: loras.iter().map(|l| (*l).to_owned()).collect(),
        ..support::sim_config()
    })
    .await
}

async fn models(node: &Served) -> Vec<Value> {
    let list: Value = node.get("/v1/models").await.json().await.unwrap();
    list["data"].as_array().cloned().unwrap_or_default()
}

async fn complete(node: &Served, body: Value) -> reqwest::Response {
    node.complete(body).await
}

/// The node's `switchyard_prefix_matched_blocks_total` for the aggregated pool.
async fn matched_blocks(node: &Served) -> u64 {
    let text = node.admin_text("/metrics").await;
    text.lines()
        .find(|l| l.starts_with("switchyard_prefix_matched_blocks_total{pool=\"aggregated\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

pub(crate) async fn requests_served(worker: &SimWorker) -> u64 {
    worker.engine().unwrap().load().await.unwrap().requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapters_requests_reach_only_the_workers_that_serve_it() {
    let config = test_config(5_000);
    let cluster = config.node.cluster.clone();
    let node = start(config).await;
    let with = sim_worker(&node, &cluster, 1, &["sql"]).await;
    let without = sim_worker(&node, &cluster, 2, &[]).await;
    node.wait_ready(200).await;

    // The model list: what the workers serve (the adapter with its base model as parent),
    // then the configured name no worker announced.
    let mut listed = Vec::new();
    for _ in 0..200 {
        listed = models(&node).await;
        if listed.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let entry = |id: &str| listed.iter().find(|m| m["id"] == id).cloned();
    assert_eq!(
        entry("sql").map(|m| m["parent"].clone()),
        Some(json!("sim")),
        "{listed:?}"
    );
    assert!(
        entry("sim").is_some_and(|m| m.get("parent").is_none()),
        "{listed:?}"
    );
    assert!(entry("stand-in").is_some(), "{listed:?}");

    // Different prompts, which load alone would spread over both workers.
    for i in 0..8 {
        let prompt = format!("query {i}: select the rows where the id is {i}");
        let response = complete(
            &node,
            json!({"model": "sql", "prompt": prompt, "max_tokens": 2}),
        )
        .await;
        assert_eq!(response.status(), 200);
    }
    assert_eq!(requests_served(&with).await, 8);
    assert_eq!(requests_served(&without).await, 0);

    // The adapter's worker leaves: the adapter is no longer listed, and its name is passed
    // on as a plain model name again.
    with.shutdown().await.unwrap();
    for _ in 0..300 {
        if models(&node).await.iter().all(|m| m["id"] != "sql") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(models(&node).await.iter().all(|m| m["id"] != "sql"));
    without.shutdown().await.unwrap();
    node.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_salt_scopes_the_prefix_the_router_predicts() {
    let config = test_config(5_000);
    let cluster = config.node.cluster.clone();
    let node = start(config).await;
    let worker = sim_worker(&node, &cluster, 1, &[]).await;
    node.wait_ready(200).await;

    let prompt = "the tenant's shared system prompt, long enough for several blocks ".repeat(8);
    let send = |salt: Option<&str>| {
        let mut body = json!({"model": "sim", "prompt": prompt, "max_tokens": 2});
        if let Some(salt) = salt {
            body["cache_salt"] = json!(salt);
        }
        complete(&node, body)
    };
    assert_eq!(send(Some("tenant-a")).await.status(), 200);
    // The worker's KV events reach the index: the same salt matches its blocks.
    let mut matched = 0;
    for _ in 0..100 {
        assert_eq!(send(Some("tenant-a")).await.status(), 200);
        matched = matched_blocks(&node).await;
        if matched > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matched > 0, "the salted prefix never matched");
    // Another tenant's salt, and no salt, match nothing of it (the engine would not either).
    let body: Value = send(Some("tenant-b")).await.json().await.unwrap();
    assert_eq!(
        body["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "{body}"
    );
    assert_eq!(send(None).await.status(), 200);
    assert_eq!(matched_blocks(&node).await, matched);

    // A salt that is not a string is the client's error, named.
    let response = complete(
        &node,
        json!({"model": "sim", "prompt": "hello", "cache_salt": 7}),
    )
    .await;
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert!(text.contains("cache_salt"), "{text}");

    worker.shutdown().await.unwrap();
    node.stop().await.unwrap();
}
