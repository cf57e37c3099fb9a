//! Switchyard in front of real vLLM engines (the CPU build, a tiny local model, prefix caching
//! and KV events on), in both shapes an operator runs:
//!
//! 1. one `router-node serve` linking both engines itself (`[[engines]]`, in-process bus);
//! 2. a `router-node link` sidecar per engine and two router replicas over a real nats-server.
//!
//! What a user checks: the router's index holds exactly the blocks the engines reported on
//! their own ZMQ streams (this test subscribes to them too); a request sharing a long prefix
//! with an earlier one goes to the engine holding it, as the engine's own `cached_tokens`
//! shows, for 20 pairs spread over both engines; the engines' load shows in `/debug/state` and
//! `/metrics`; a prefix-cache reset on an engine empties its entries in the router; an engine
//! killed with SIGKILL fails its in-flight streams with an error, leaves the fleet (bookings
//! and entries gone) while new requests go to the other, and is used again once restarted.
//!
//! `models.rs`: two models (two tokenizers, two block sizes) and a LoRA adapter behind one node.
//!
//! Ignored by default (engines take a minute or two to start): `scripts/test-real-engines.sh`
//! installs what it needs and runs it, after the fast suites of `scripts/test.sh`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Two models and a LoRA adapter behind one node.
#[path = "real_vllm/models.rs"]
mod models;

use router_engine::events::{EngineEvent, SeqCheck, SeqStep, decode_batch};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_system_tests::support::vllm::{require_vllm, tiny_model};
use switchyard_system_tests::support::{LinkSidecar, NatsServer, NodeBus, RouterNode, VllmEngine};
use zeromq::{Socket, SocketRecv, SubSocket};

const WAIT: Duration = Duration::from_secs(30);
const BLOCK: usize = 32;

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The blocks one engine holds by its own ZMQ stream (stored minus removed, emptied by a
/// clear or a restart), as this test hears them.
#[derive(Clone, Default)]
struct Reported(Arc<Mutex<HashSet<u64>>>);

impl Reported {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// The engine died: its cache went with it.
    fn forget(&self) {
        self.0.lock().unwrap().clear();
    }

    /// Subscribes to `endpoint` for as long as the test runs.
    async fn watch(endpoint: String) -> Self {
        let reported = Self::default();
        let set = reported.0.clone();
        let mut socket = SubSocket::new();
        socket.subscribe("kv-events").await.unwrap();
        socket.connect(&endpoint).await.unwrap();
        tokio::spawn(async move {
            let mut seqs = SeqCheck::default();
            while let Ok(message) = socket.recv().await {
                let frames = message.into_vec();
                let seq = u64::from_be_bytes(frames[1].as_ref().try_into().unwrap());
                let mut set = set.lock().unwrap();
                match seqs.observe(seq) {
                    SeqStep::Restarted => set.clear(),
                    SeqStep::Gap { from, to } => panic!("the test lost batches {from}..={to}"),
                    SeqStep::InOrder | SeqStep::Duplicate => {}
                }
                for event in decode_batch(&frames[2]).unwrap().events {
                    match event {
                        EngineEvent::Stored { hashes, .. } => {
                            set.extend(hashes.iter().map(|h| h.0));
                        }
                        EngineEvent::Removed { hashes, .. } => {
                            for h in hashes {
                                set.remove(&h.0);
                            }
                        }
                        EngineEvent::Cleared => set.clear(),
                        EngineEvent::Unknown { tag } => panic!("unknown event {tag}"),
                    }
                }
            }
        });
        // A subscription only receives what is published after it has connected.
        tokio::time::sleep(Duration::from_millis(300)).await;
        reported
    }
}

/// A router replica's two listeners: the OpenAI API and the admin endpoints.
#[derive(Debug, Clone)]
struct Router {
    api: String,
    admin: String,
}

impl Router {
    fn of(node: &RouterNode) -> Self {
        Self {
            api: node.url().to_owned(),
            admin: node.admin_url().to_owned(),
        }
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn state(router: &Router) -> Value {
    http()
        .get(format!("{}/debug/state", router.admin))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The (rank, block) entries in a router's index.
async fn index_blocks(router: &Router) -> u64 {
    state(router).await["node"]["kv_events"][0]["state"]["index"]["rank_blocks"]
        .as_u64()
        .unwrap()
}

async fn workers(router: &Router) -> Vec<Value> {
    state(router).await["node"]["registry"]["workers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Deterministic token ids of the tiny model's vocabulary (4..1000: no special tokens).
fn tokens(seed: u64, n: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            4 + ((x >> 33) % 996) as u32
        })
        .collect()
}

async fn complete(url: &str, prompt: &[u32], max_tokens: u32) -> Value {
    let response = http()
        .post(format!("{url}/v1/completions"))
        .json(&json!({
            "model": tiny_model().to_string_lossy(),
            "prompt": prompt,
            "max_tokens": max_tokens,
        }))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {body}");
    body
}

fn cached(body: &Value) -> u64 {
    body["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cached_tokens in {body}"))
}

/// The index of every router in `routers` equals what the engines reported.
async fn indexes_match(routers: &[Router], reported: &[Reported]) {
    for router in routers {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let want: usize = reported.iter().map(Reported::len).sum();
            let have = index_blocks(router).await;
            if have == want as u64 {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                let s = state(router).await;
                panic!(
                    "{}: the index holds {have} blocks, the engines reported {:?}; kv events: {}; workers: {}",
                    router.api,
                    reported.iter().map(Reported::len).collect::<Vec<_>>(),
                    s["node"]["kv_events"][0]["state"],
                    s["node"]["registry"]["workers"]
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// 20 pairs of requests sharing an 8-block prefix: the second of each pair, sent to another
/// replica when there are two, is served from the engine's cache. Returns how many pairs
/// each engine served.
async fn prefix_pairs(routers: &[Router], reported: &[Reported], seed: u64) -> Vec<usize> {
    let mut served = vec![0; reported.len()];
    for pair in 0..20u64 {
        let prefix = tokens(seed + pair, 8 * BLOCK);
        let mut first = prefix.clone();
        first.extend(tokens(seed + 1000 + pair, 40));
        let mut second = prefix.clone();
        second.extend(tokens(seed + 2000 + pair, 40));
        let before: Vec<usize> = reported.iter().map(Reported::len).collect();
        let a = &routers[pair as usize % routers.len()].api;
        let b = &routers[(pair as usize + 1) % routers.len()].api;
        let body = complete(a, &first, 1).await;
        assert_eq!(body["usage"]["prompt_tokens"], first.len());
        // The engine publishes its events after it answered: wait for them, then for the
        // routers to hold them.
        eventually("an engine reported the stored blocks", || async {
            (0..reported.len()).any(|i| reported[i].len() > before[i])
        })
        .await;
        indexes_match(routers, reported).await;
        let grew: Vec<usize> = (0..reported.len())
            .filter(|&i| reported[i].len() > before[i])
            .collect();
        assert_eq!(
            grew.len(),
            1,
            "one engine stored the first request's blocks"
        );
        let holder = grew[0];
        served[holder] += 1;
        let held = reported[holder].len();
        let body = complete(b, &second, 1).await;
        assert!(
            cached(&body) >= (8 * BLOCK) as u64,
            "pair {pair}: the second request missed the engine holding its prefix: {body}"
        );
        // Its one new block (the 9th) lands on the same engine; let it settle before the
        // next pair is measured.
        eventually(
            "the holder stored the second request's new block",
            || async { reported[holder].len() > held },
        )
        .await;
        indexes_match(routers, reported).await;
    }
    served
}

async fn metrics(router: &Router) -> String {
    http()
        .get(format!("{}/metrics", router.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Both engines' own load shows in `/debug/state` and `/metrics`.
async fn load_shows(router: &Router) {
    eventually("each worker carries its engine's load", || async {
        let w = workers(router).await;
        w.len() == 2
            && w.iter()
                .all(|w| w["load"].as_array().is_some_and(|l| !l.is_empty()))
    })
    .await;
    let text = metrics(router).await;
    let totals = text
        .lines()
        .filter(|l| l.starts_with("switchyard_engine_kv_total_blocks{"))
        .count();
    assert_eq!(totals, 2, "{text}");
    assert!(
        text.contains("switchyard_engine_requests_running{"),
        "{text}"
    );
}

fn engines_toml(engines: &[VllmEngine]) -> String {
    engines
        .iter()
        .map(|e| {
            format!(
                "[[engines]]\nkind = \"vllm\"\nurl = \"{}\"\nkv_events = \"{}\"\nreplay = \"{}\"\npoll_ms = 200\nlease_ms = 10000\n\n",
                e.url(),
                e.kv_events(),
                e.replay()
            )
        })
        .collect()
}

fn tokenizer_toml() -> String {
    format!(
        "[tokenizer]\nmodel_dir = \"{}\"\n\n",
        tiny_model().to_string_lossy()
    )
}

/// The router counts and hashes exactly the tokens the engine sees: for text completions and
/// chats, the prompter the node builds from its `[tokenizer]` gives as many tokens as the
/// engine reports in `usage.prompt_tokens` for the same request sent through the router.
async fn token_counts_match(url: &str) {
    let dir = std::env::temp_dir().join(format!("sy-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config_path = dir.join("node.toml");
    std::fs::write(&config_path, tokenizer_toml()).unwrap();
    let prompter = router_node::config::Config::load(Some(&config_path))
        .and_then(|c| c.prompter())
        .unwrap();
    let model = tiny_model().to_string_lossy().into_owned();
    let text = "The router must count exactly what the engine sees. <s> Special strings too, \
                and unicode: naïve café, 東京, emoji 🚀, tabs\tand\nnewlines.";
    let requests = [
        (
            router_tokenizer::Endpoint::Completions,
            "completions",
            json!({"model": model, "prompt": text, "max_tokens": 1}),
        ),
        (
            router_tokenizer::Endpoint::Chat,
            "chat/completions",
            json!({"model": model, "max_tokens": 1, "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": text},
            ]}),
        ),
    ];
    for (endpoint, path, body) in requests {
        let parsed = prompter
            .parse(endpoint, body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let ours = prompter.tokenize_for(endpoint, parsed.prompt).await.len();
        let answer: Value = http()
            .post(format!("{url}/v1/{path}"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            answer["usage"]["prompt_tokens"], ours,
            "{path}: the engine saw another number of tokens than the router counted: {answer}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs real vLLM engines (minutes): scripts/test-real-engines.sh"]
async fn real_vllm_engines_behind_switchyard() {
    require_vllm();
    let engines = tokio::task::block_in_place(|| {
        VllmEngine::start_all(&[("vllm-a", None), ("vllm-b", None)])
    });
    let mut reported = vec![
        Reported::watch(engines[0].kv_events()).await,
        Reported::watch(engines[1].kv_events()).await,
    ];

    // Shape 1: one router linking both engines itself, nothing else installed.
    let node = RouterNode::start_with_node(
        "router",
        "real-one",
        &NodeBus::InProcess,
        "block_size = 32",
        &format!("{}{}", tokenizer_toml(), engines_toml(&engines)),
    );
    let router = Router::of(&node);
    let one = std::slice::from_ref(&router);
    eventually("both engines joined", || async {
        workers(&router).await.len() == 2
    })
    .await;
    token_counts_match(&router.api).await;
    // Their blocks are published after the answers: let them land before pairs are measured.
    tokio::time::sleep(Duration::from_secs(1)).await;
    indexes_match(one, &reported).await;
    let served = prefix_pairs(one, &reported, 0).await;
    assert!(
        served.iter().all(|&n| n >= 3),
        "first requests spread over both engines: {served:?}"
    );
    load_shows(&router).await;
    let up = metrics(&router)
        .await
        .lines()
        .filter(|l| l.starts_with("switchyard_engine_link_up{") && l.ends_with(" 1"))
        .count();
    assert_eq!(up, 2);

    // A prefix-cache reset on engine A empties its entries in the router. vLLM publishes the
    // clear with its next step: a request sent to A directly makes one.
    let reset = http()
        .post(format!("{}/reset_prefix_cache", engines[0].url()))
        .send()
        .await
        .unwrap();
    assert!(reset.status().is_success());
    complete(&engines[0].url(), &tokens(99, 5), 1).await;
    eventually("engine A's entries are gone", || async {
        reported[0].len() == 0 && index_blocks(&router).await == reported[1].len() as u64
    })
    .await;
    assert_eq!(node.stop().code, Some(0));

    // Disaggregated, vLLM convention: the prefill leg as the router sends it is accepted by a
    // real vLLM. These CPU engines have no KV connector, so vLLM answers it without transfer
    // parameters and the router says so instead of running the prefill twice.
    let disagg = RouterNode::start_with_node(
        "router-disagg",
        "real-disagg",
        &NodeBus::InProcess,
        "block_size = 32\ntopology = \"disaggregated\"",
        &format!(
            "{}{}",
            tokenizer_toml(),
            engines_toml(&engines)
                .replacen("[[engines]]", "[[engines]]\nrole = \"prefill\"", 1)
                .replacen(
                    "lease_ms = 10000\n\n[[engines]]",
                    "lease_ms = 10000\n\n[[engines]]\nrole = \"decode\"",
                    1
                )
        ),
    );
    let drouter = Router::of(&disagg);
    eventually("a prefill and a decode engine joined", || async {
        workers(&drouter).await.len() == 2
    })
    .await;
    let response = http()
        .post(format!("{}/v1/completions", drouter.api))
        .json(&json!({
            "model": tiny_model().to_string_lossy(),
            "prompt": tokens(42, 80),
            "max_tokens": 4,
        }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("no `kv_transfer_params`") && body.contains("KV connector"),
        "the prefill engine accepted the leg and answered without transfer parameters: {body}"
    );
    assert!(
        engines[0].log().contains("kv_transfer_params"),
        "vLLM saw the transfer parameters"
    );
    assert_eq!(disagg.stop().code, Some(0));

    // Shape 2: a link sidecar per engine, two router replicas over NATS.
    let nats = NatsServer::start().await.unwrap();
    let bus = NodeBus::Nats(nats.url().to_owned());
    let sidecars: Vec<LinkSidecar> = engines
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let (url, events, replay) = (e.url(), e.kv_events(), e.replay());
            LinkSidecar::start(
                &format!("link-{i}"),
                &[
                    "--engine",
                    "vllm",
                    "--url",
                    &url,
                    "--kv-events",
                    &events,
                    "--replay",
                    &replay,
                    "--nats",
                    nats.url(),
                    "--cluster",
                    "real-two",
                    "--poll-ms",
                    "200",
                    "--lease-ms",
                    "10000",
                ],
            )
        })
        .collect();
    let extra = format!("{}[peer_sync]\nheartbeat_ms = 200\n", tokenizer_toml());
    let replicas = [
        RouterNode::start_with_node("replica-1", "real-two", &bus, "block_size = 32", &extra),
        RouterNode::start_with_node("replica-2", "real-two", &bus, "block_size = 32", &extra),
    ];
    let routers: Vec<Router> = replicas.iter().map(Router::of).collect();
    for router in &routers {
        eventually("both engines joined every replica", || async {
            workers(router).await.len() == 2
        })
        .await;
    }
    // The replicas were not listening when the engines stored what they hold now: the links
    // relay only what comes after. Start from empty caches.
    for engine in &engines {
        http()
            .post(format!("{}/reset_prefix_cache", engine.url()))
            .send()
            .await
            .unwrap();
        complete(&engine.url(), &tokens(98, 5), 1).await;
    }
    eventually("the engines' caches are empty", || async {
        reported.iter().all(|r| r.len() == 0)
    })
    .await;
    indexes_match(&routers, &reported).await;
    let served = prefix_pairs(&routers, &reported, 100).await;
    assert!(
        served.iter().all(|&n| n >= 3),
        "first requests spread over both engines: {served:?}"
    );
    load_shows(&routers[0]).await;

    // SIGKILL engine A while streams run on both engines (twenty-four: three times what an
    // engine runs at once, so about half of them still wait on each engine when it dies,
    // however fast it generates on an idle machine; twelve were once all done in time).
    let streams: Vec<_> = (0..24u64)
        .map(|i| {
            let router = routers[i as usize % 2].api.clone();
            tokio::spawn(async move {
                let response = http()
                    .post(format!("{router}/v1/completions"))
                    .json(&json!({
                        "model": tiny_model().to_string_lossy(),
                        "prompt": tokens(500 + i, 64),
                        "max_tokens": 1900,
                        "ignore_eos": true,
                        "stream": true,
                    }))
                    .send()
                    .await
                    .unwrap();
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                // A stream dispatched to the engine as it died (refused: `upstream_connect`
                // once no other worker could take it; sent on a connection that broke:
                // `upstream_send`), or cut before its first token, is a 502 naming the
                // worker. Anything else must be a stream.
                assert!(
                    status.is_success()
                        || (status == 502
                            && (text.contains("upstream_connect")
                                || text.contains("upstream_send")
                                || text.contains("upstream_stream"))),
                    "{status}: {text}"
                );
                text
            })
        })
        .collect();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = state(&routers[0]).await;
        let booked = s["scheduler"]["ledger"]["ranks"]
            .as_array()
            .is_some_and(|ranks| {
                ranks.len() == 2 && ranks.iter().all(|r| r["requests"].as_u64() >= Some(1))
            });
        if booked {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "streams are not booked on both engines: {}",
            s["scheduler"]["ledger"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    engines[0].kill();
    let mut failed = 0;
    for stream in streams {
        let text = stream.await.unwrap();
        if text.contains("\"error\"") {
            failed += 1;
        } else {
            assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        }
    }
    assert!(
        failed >= 1,
        "the streams on the killed engine end with an error"
    );
    reported[0].forget();
    for (i, replica) in replicas.iter().enumerate() {
        for line in replica
            .output()
            .lines()
            .filter(|l| l.contains("expired") || l.contains("worker left"))
        {
            eprintln!("replica-{i}: {line}");
        }
    }
    // What the links said (joins, leaves, warnings), for the record of a failed run.
    for (i, sidecar) in sidecars.iter().enumerate() {
        for line in sidecar
            .output()
            .lines()
            .filter(|l| !l.contains("INFO") || l.contains("fleet"))
        {
            eprintln!("link-{i}: {line}");
        }
    }
    for router in &routers {
        eventually("the killed engine left every replica", || async {
            let w = workers(router).await;
            w.len() == 1 && w[0]["endpoint"] == engines[1].url()
        })
        .await;
        eventually("its bookings are gone", || async {
            state(router).await["scheduler"]["ledger"]["bookings"] == 0
        })
        .await;
        indexes_match(std::slice::from_ref(router), &reported).await;
    }
    for i in 0..4u64 {
        complete(&routers[i as usize % 2].api, &tokens(700 + i, 50), 2).await;
    }

    // Restarted, it joins again and is used again.
    tokio::task::block_in_place(|| engines[0].restart());
    for router in &routers {
        eventually("the restarted engine joined every replica", || async {
            workers(router).await.len() == 2
        })
        .await;
    }
    // A fresh subscription to the restarted engine (it starts empty), before any request.
    reported[0] = Reported::watch(engines[0].kv_events()).await;
    let mut used = false;
    for i in 0..20u64 {
        complete(
            &routers[i as usize % 2].api,
            &tokens(800 + i, 3 * BLOCK + 5),
            1,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if reported[0].len() > 0 {
            used = true;
            break;
        }
    }
    assert!(used, "requests reach the restarted engine again");
    indexes_match(&routers, &reported).await;

    for sidecar in sidecars {
        assert_eq!(sidecar.stop().code, Some(0));
    }
    for router in &routers {
        eventually("the engines left when their links stopped", || async {
            workers(router).await.is_empty()
        })
        .await;
    }
    for replica in replicas {
        assert_eq!(replica.stop().code, Some(0));
    }
    drop(engines);
}
