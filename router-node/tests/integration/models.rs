//! Several models behind one node: a pool per `[[models]]` entry (its own block size, its
//! own subjects), requests routed by `model`, an unknown model a 404, `/v1/models`,
//! `/metrics` and `/debug/state` showing each pool.

use super::serve::{Served, start, test_config};
use crate::support;
use router_core::WorkerId;
use router_node::config::{Config, ModelSection};
use router_sim::SimWorker;
use serde_json::{Value, json};
use std::time::Duration;

/// A simulated worker of `model` in that model's pool, storing blocks of `block_size`.
async fn worker_of(
    node: &Served,
    cluster: &str,
    id: u64,
    model: &str,
    block_size: usize,
) -> SimWorker {
    node.sim_worker(router_sim::SimConfig {
        worker_id: WorkerId(id),
        cluster: router_actors::wire::pool_cluster(cluster, model),
        model: model.to_owned(),
        block_size,
        ..support::sim_config()
    })
    .await
}

fn two_models() -> Config {
    let mut config = test_config(5_000);
    config.http.models = Vec::new();
    for (name, block_size) in [("alpha", 16), ("beta", 32)] {
        config.models.push(ModelSection {
            name: name.to_owned(),
            model_dir: None,
            block_size: Some(block_size),
            topology: None,
            local_prefill_below_tokens: None,
            local_prefill_when_prefill_waits: None,
        });
    }
    config.validate().unwrap();
    config
}

async fn complete(node: &Served, model: &str, prompt: &str) -> reqwest::Response {
    node.complete(json!({"model": model, "prompt": prompt, "max_tokens": 2}))
        .await
}

use super::adapters::requests_served;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_model_has_its_pool_and_an_unknown_model_is_a_404() {
    let config = two_models();
    let cluster = config.node.cluster.clone();
    let node = start(config).await;
    let alpha = worker_of(&node, &cluster, 1, "alpha", 16).await;
    let beta = worker_of(&node, &cluster, 2, "beta", 32).await;
    node.wait_ready(200).await;

    // Each model's workers join its own pool (a worker announced in the other's would be
    // refused there for its block size; here each knows only its own).
    let mut listed = Vec::new();
    for _ in 0..300 {
        let list: Value = node.get("/v1/models").await.json().await.unwrap();
        listed = list["data"].as_array().cloned().unwrap_or_default();
        let workers = |id: &str| {
            listed
                .iter()
                .find(|m| m["id"] == id)
                .map(|m| m["id"].clone())
        };
        if workers("alpha").is_some() && workers("beta").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ids: Vec<&str> = listed.iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, vec!["alpha", "beta"], "{listed:?}");

    for i in 0..4 {
        let prompt = format!("question {i}: which track does the morning freight take?");
        for model in ["alpha", "beta"] {
            let response = complete(&node, model, &prompt).await;
            assert_eq!(response.status(), 200, "{model}");
        }
    }
    // Every request reached a worker of its own model (each sim answers for one model).
    assert_eq!(requests_served(&alpha).await, 4);
    assert_eq!(requests_served(&beta).await, 4);

    // A model no pool serves: OpenAI's 404, naming it.
    let response = complete(&node, "gamma", "hello").await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["reason"], "model_not_found", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("gamma"),
        "{body}"
    );
    // A chat request is rendered by its model's pool and routed there too.
    let chat = node
        .http
        .post(format!("{}/v1/chat/completions", node.url))
        .json(&json!({"model": "beta", "max_tokens": 2,
                      "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    assert_eq!(requests_served(&beta).await, 5);

    // Each pool is seen on its own: its series labelled with its model, its actors' state.
    let metrics = node.admin_text("/metrics").await;
    for model in ["alpha", "beta"] {
        let series = format!("switchyard_registered_workers{{model=\"{model}\"");
        assert!(metrics.contains(&series), "no {series} in:\n{metrics}");
    }
    let state: Value = serde_json::from_str(&node.admin_text("/debug/state").await).unwrap();
    for model in ["alpha", "beta"] {
        let workers = &state["pools"][model]["registry"]["workers"];
        assert_eq!(
            workers.as_array().map(Vec::len),
            Some(1),
            "{model}: {state}"
        );
    }

    alpha.shutdown().await.unwrap();
    beta.shutdown().await.unwrap();
    node.stop().await.unwrap();
}
