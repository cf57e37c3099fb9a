//! `worker --sim` over real HTTP: a reqwest client against [`SimWorker`]s on 127.0.0.1:0 and
//! an in-process bus, reading token-id prompts (the default reader). Completions, streaming
//! and not; announcements, KV events and load on the bus; prefix reuse; cancel on
//! disconnect; prefill staging, pull and stranding; bad bodies. Text and chat bodies, read
//! with the router frontend's tokenizer, are tested in router-node (`sim_worker_text.rs`).

use futures::StreamExt;
use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_actors::wire::{self, Subjects, WorkerAnnounce, WorkerLoad};
use router_core::hashing::local_block_hashes;
use router_core::index::KvEventData;
use router_core::{KvEvent, PoolRole, WorkerId};
use router_sim::{Role, SimConfig, SimWorker};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const CLUSTER: &str = "simtest";

fn config(id: u64, role: Role) -> SimConfig {
    SimConfig {
        worker_id: WorkerId(id),
        role,
        total_kv_blocks: 1024,
        speedup: 10.0,
        cluster: CLUSTER.to_owned(),
        heartbeat: Duration::from_millis(50),
        lease: Duration::from_millis(500),
        ..SimConfig::default()
    }
}

struct Sim {
    worker: SimWorker,
    url: String,
    http: reqwest::Client,
}

impl Sim {
    async fn start(bus: Arc<dyn Bus>, cfg: SimConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let worker = SimWorker::start(listener, bus, cfg).await.unwrap();
        let url = worker.endpoint().to_owned();
        Self {
            worker,
            url,
            http: reqwest::Client::new(),
        }
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn load(&self) -> Value {
        self.http
            .get(format!("{}/load", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Polls `/load` until `pred` holds (at most 5 s).
    async fn wait_load(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..500 {
            let load = self.load().await;
            if pred(&load) {
                return load;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}: {}", self.load().await);
    }
}

fn local_bus() -> Arc<dyn Bus> {
    Arc::new(LocalBus::new())
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
async fn streaming_completion_emits_one_event_per_token_then_done() {
    let sim = Sim::start(local_bus(), config(1, Role::Agg)).await;
    let response = sim
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": [1, 2, 3, 4, 5, 6, 7], "stream": true, "max_tokens": 3}),
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let events = events(&text);
    assert_eq!(events.len(), 4, "{text}");
    for e in &events[..3] {
        assert_eq!(e["object"], "text_completion");
        assert_eq!(e["choices"][0]["text"], "tok ");
    }
    assert_eq!(events[3]["choices"][0]["finish_reason"], "length");
    assert_eq!(events[3]["usage"]["completion_tokens"], 3);
    assert_eq!(events[3]["usage"]["prompt_tokens"], 7);
    let load = sim.wait_load("idle", |l| l["running"] == 0).await;
    assert_eq!(load["finished"], 1);
    assert_eq!(load["output_tokens"], 3);
    assert_eq!(load["kv_used_blocks"], 0);
}

#[tokio::test]
async fn non_streaming_completion_models_and_health() {
    let sim = Sim::start(local_bus(), config(1, Role::Agg)).await;
    let body: Value = sim
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": [1, 2, 3, 4, 5], "max_tokens": 4}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], "tok tok tok tok ");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );

    let models: Value = sim
        .http
        .get(format!("{}/v1/models", sim.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "sim");
    let health = sim
        .http
        .get(format!("{}/health", sim.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn announcement_kv_events_and_load_arrive_on_the_bus() {
    let bus = local_bus();
    let subjects = Subjects::new(CLUSTER);
    let mut announces = bus
        .subscribe(subjects.announce(PoolRole::Aggregated))
        .await
        .unwrap();
    let mut kv = bus
        .subscribe(subjects.kv_events(PoolRole::Aggregated))
        .await
        .unwrap();
    let mut loads = bus
        .subscribe(subjects.load(PoolRole::Aggregated))
        .await
        .unwrap();
    let sim = Sim::start(bus.clone(), config(7, Role::Agg)).await;

    let msg = tokio::time::timeout(Duration::from_secs(5), announces.next())
        .await
        .unwrap()
        .unwrap();
    let announce = wire::decode::<WorkerAnnounce>(&msg.payload, CLUSTER).unwrap();
    assert_eq!(announce.body.spec.id, WorkerId(7));
    assert_eq!(announce.body.spec.block_size, 16);
    assert_eq!(announce.body.spec.total_kv_blocks, Some(1024));
    assert_eq!(announce.body.pool, PoolRole::Aggregated);
    assert_eq!(announce.body.endpoint, sim.url);
    assert_eq!(announce.body.heartbeat_ms, 50);
    assert_eq!(announce.body.lease_ms, 500);
    // ... and again as the heartbeat.
    let again = tokio::time::timeout(Duration::from_secs(5), announces.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        wire::decode::<WorkerAnnounce>(&again.payload, CLUSTER)
            .unwrap()
            .seq
            > announce.seq
    );

    // The stored blocks hash the prompt's tokens exactly as the router does.
    let tokens: Vec<u32> = (100..170).collect();
    let expected = local_block_hashes(&tokens, 16, None);
    assert_eq!(expected.len(), 4);
    let response = sim
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": tokens, "max_tokens": 1}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut stored = Vec::new();
    while stored.len() < expected.len() {
        let msg = tokio::time::timeout(Duration::from_secs(5), kv.next())
            .await
            .unwrap()
            .unwrap();
        let batch = wire::decode::<Vec<KvEvent>>(&msg.payload, CLUSTER).unwrap();
        for event in batch.body {
            assert_eq!(event.worker, WorkerId(7));
            if let KvEventData::Stored { blocks, .. } = event.data {
                stored.extend(blocks.iter().map(|b| b.local));
            }
        }
    }
    assert_eq!(stored, expected);

    let msg = tokio::time::timeout(Duration::from_secs(5), loads.next())
        .await
        .unwrap()
        .unwrap();
    let load = wire::decode::<WorkerLoad>(&msg.payload, CLUSTER).unwrap();
    assert_eq!(load.body.worker, WorkerId(7));
    assert_eq!(load.sender, announce.sender);
}

#[tokio::test]
async fn a_repeated_prompt_reuses_its_prefix() {
    // Unscaled timing, so the saved prefill (~65 ms) dwarfs HTTP noise; the exact timing is
    // checked in paused time by the engine task's unit tests.
    let mut cfg = config(1, Role::Agg);
    cfg.speedup = 1.0;
    let sim = Sim::start(local_bus(), cfg).await;
    let prompt: Vec<u32> = (0..4000).collect();
    let body = json!({"model": "sim", "prompt": prompt, "max_tokens": 2});
    let started = tokio::time::Instant::now();
    assert_eq!(sim.post("/v1/completions", &body).await.status(), 200);
    let first = started.elapsed();
    let after_first = sim.load().await["prefill_tokens"].as_u64().unwrap();
    assert_eq!(after_first, 4000);
    let started = tokio::time::Instant::now();
    assert_eq!(sim.post("/v1/completions", &body).await.status(), 200);
    let second = started.elapsed();
    let after_second = sim.load().await["prefill_tokens"].as_u64().unwrap();
    // All 250 full blocks are reused; the last block is recomputed (a full-prompt hit still
    // computes at least one token, as vLLM does).
    let recomputed = after_second - after_first;
    assert!(recomputed <= 16, "{recomputed} tokens computed again");
    assert!(
        second < first,
        "the second prefill should be faster: {second:?} vs {first:?}"
    );
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_its_sequence() {
    let mut cfg = config(1, Role::Agg);
    cfg.speedup = 1.0;
    let sim = Sim::start(local_bus(), cfg).await;
    let mut response = sim
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": vec![5; 200], "max_tokens": 10000, "stream": true}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("tok "));
    let load = sim.load().await;
    assert_eq!(load["running"], 1);
    assert!(load["kv_used_blocks"].as_u64().unwrap() > 0);
    drop(response);
    let load = sim
        .wait_load("the cancel", |l| l["running"] == 0 && l["cancelled"] == 1)
        .await;
    assert_eq!(load["kv_used_blocks"], 0);
    assert_eq!(load["waiting"], 0);
    assert_eq!(load["finished"], 0);
}

#[tokio::test]
async fn a_prefill_worker_stages_kv_and_a_decode_worker_pulls_it() {
    let bus = local_bus();
    let prefill = Sim::start(bus.clone(), config(1, Role::Prefill)).await;
    let decode = Sim::start(bus.clone(), config(2, Role::Decode)).await;
    let prompt: Vec<u32> = (0..100).collect();
    let response: Value = prefill
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": prompt, "max_tokens": 1,
                    "kv_transfer_params": {"do_remote_decode": true}}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(response["choices"][0]["text"], "tok ");
    let params = response["kv_transfer_params"].clone();
    assert_eq!(params["do_remote_prefill"], true);
    assert_eq!(params["do_remote_decode"], false);
    assert_eq!(params["remote_engine_id"], "worker-1");
    assert_eq!(params["remote_host"], "127.0.0.1");
    assert_eq!(params["remote_port"], prefill.worker.addr().port());
    assert_eq!(params["remote_block_ids"].as_array().unwrap().len(), 6);
    let staged = prefill.load().await;
    assert_eq!(staged["staged"], 1);
    assert!(staged["kv_used_blocks"].as_u64().unwrap() > 0);

    let response: Value = decode
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": prompt, "max_tokens": 5,
                    "kv_transfer_params": params}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(response["usage"]["completion_tokens"], 5, "{response}");
    let p = prefill.load().await;
    assert_eq!(p["staged"], 0);
    assert_eq!(p["pulled"], 1);
    assert_eq!(p["stranded"], 0);
    assert_eq!(p["kv_used_blocks"], 0);
    let d = decode.load().await;
    assert_eq!(d["pull_failures"], 0);
    assert_eq!(d["prefill_tokens"], 0, "the prompt arrived staged: {d}");

    // A second pull of the same request is refused.
    let again = prefill
        .post(
            &format!("/v1/kv/pull/{}", params["request_id"].as_str().unwrap()),
            &json!({}),
        )
        .await;
    assert_eq!(again.status(), 404);
}

#[tokio::test]
async fn a_streaming_prefill_carries_the_params_in_its_first_event() {
    let prefill = Sim::start(local_bus(), config(1, Role::Prefill)).await;
    let text = prefill
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": [1, 2, 3],
                    "stream": true, "kv_transfer_params": {"do_remote_decode": true}}),
        )
        .await
        .text()
        .await
        .unwrap();
    let events = events(&text);
    assert_eq!(events[0]["choices"][0]["text"], "tok ");
    assert_eq!(events[0]["kv_transfer_params"]["do_remote_prefill"], true);
    assert!(events[0]["kv_transfer_params"]["request_id"].is_string());
    assert_eq!(prefill.load().await["staged"], 1);
}

#[tokio::test]
async fn staged_kv_nobody_pulls_is_freed_after_the_timeout_and_counted_stranded() {
    let bus = local_bus();
    let mut cfg = config(1, Role::Prefill);
    cfg.staging_timeout = Duration::from_millis(150);
    let prefill = Sim::start(bus.clone(), cfg).await;
    let response: Value = prefill
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": vec![1; 64],
                    "kv_transfer_params": {"do_remote_decode": true}}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(prefill.load().await["staged"], 1);
    let load = prefill
        .wait_load("the staging timeout", |l| l["stranded"] == 1)
        .await;
    assert_eq!(load["staged"], 0);
    assert_eq!(load["kv_used_blocks"], 0);

    // A decode worker arriving too late recomputes the prompt.
    let decode = Sim::start(bus, config(2, Role::Decode)).await;
    let late: Value = decode
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": vec![1; 64], "max_tokens": 2,
                    "kv_transfer_params": response["kv_transfer_params"]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(late["usage"]["completion_tokens"], 2);
    let d = decode.load().await;
    assert_eq!(d["pull_failures"], 1);
    assert_eq!(d["prefill_tokens"], 64);
}

#[tokio::test]
async fn a_prefill_worker_without_remote_decode_frees_at_once() {
    let prefill = Sim::start(local_bus(), config(1, Role::Prefill)).await;
    let response = prefill
        .post(
            "/v1/completions",
            &json!({"model": "sim", "prompt": vec![1; 64]}),
        )
        .await;
    let body: Value = response.json().await.unwrap();
    assert!(body.get("kv_transfer_params").is_none());
    let load = prefill.load().await;
    assert_eq!(load["staged"], 0);
    assert_eq!(load["kv_used_blocks"], 0);
}

#[tokio::test]
async fn bad_bodies_are_400s_naming_the_field() {
    let sim = Sim::start(local_bus(), config(1, Role::Agg)).await;
    let cases = [
        (json!({"prompt": [1]}), "model"),
        (json!({"model": "sim", "prompt": "text"}), "prompt"),
        (json!({"model": "sim"}), "prompt"),
        (json!({"model": "sim", "prompt": {"a": 1}}), "prompt"),
        (json!({"model": "sim", "prompt": []}), "prompt"),
        (
            json!({"model": "sim", "prompt": [1], "max_tokens": -1}),
            "max_tokens",
        ),
        (
            json!({"model": "sim", "prompt": [1], "max_tokens": 0}),
            "max_tokens",
        ),
        (
            json!({"model": "sim", "prompt": [1], "max_tokens": 10_000_000_000u64}),
            "max_tokens",
        ),
        (
            json!({"model": "sim", "prompt": [1], "max_tokens": 1_000_000}),
            "prompt",
        ),
        (
            json!({"model": "sim", "prompt": [1], "stream": "yes"}),
            "stream",
        ),
        (
            json!({"model": "sim", "prompt": [1], "cache_salt": 3}),
            "cache_salt",
        ),
        (
            json!({"model": "sim", "prompt": [1], "kv_transfer_params": 1}),
            "kv_transfer_params",
        ),
        (
            json!({"model": "sim", "prompt": [1], "kv_transfer_params": {"do_remote_prefill": true}}),
            "kv_transfer_params.remote_host",
        ),
        (
            json!({"model": "sim", "prompt": [1], "kv_transfer_params":
                {"do_remote_prefill": true, "remote_host": "h", "remote_port": 70000}}),
            "kv_transfer_params.remote_port",
        ),
    ];
    for (body, field) in cases {
        let response = sim.post("/v1/completions", &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let err: Value = response.json().await.unwrap();
        let message = err["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{body}: {err}");
    }
    let response = sim
        .post(
            "/v1/chat/completions",
            &json!({"model": "sim", "messages": "hi"}),
        )
        .await;
    assert_eq!(response.status(), 400);
    let response = sim
        .http
        .post(format!("{}/v1/completions", sim.url))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let response = sim.post("/v1/kv/pull/not-a-uuid", &json!({})).await;
    assert_eq!(response.status(), 400);
    // Nothing leaked.
    let load = sim.load().await;
    assert_eq!(load["requests"], 0);
    assert_eq!(load["kv_used_blocks"], 0);
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let sim = Sim::start(local_bus(), config(1, Role::Agg)).await;
    let url = sim.url.clone();
    sim.worker.shutdown().await.unwrap();
    assert!(
        reqwest::Client::new()
            .get(format!("{url}/health"))
            .send()
            .await
            .is_err()
    );
}
