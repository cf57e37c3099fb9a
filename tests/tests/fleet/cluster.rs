//! A replicated fleet from real processes: a nats-server, one simulated worker and two router
//! nodes on it, each a separate `router-node` process. Both nodes become ready once the
//! worker has announced itself, find each other through peer sync, route a request each to
//! the worker, and end with idle ledgers; SIGTERM stops every process with exit code 0.

use serde_json::{Value, json};
use std::future::Future;
use std::time::Duration;
use switchyard_system_tests::support::observe::ledger_idle;
use switchyard_system_tests::support::{NatsServer, NodeBus, RouterNode, SimWorker};

/// Quicker heartbeats than the defaults, so peers and idle ledgers show up fast.
const NODE_EXTRA: &str = "[peer_sync]\nheartbeat_ms = 200\n";

const WAIT: Duration = Duration::from_secs(20);

/// Polls `check` every 50 ms until it holds; panics naming `what` after [`WAIT`].
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn get(http: &reqwest::Client, url: String) -> (u16, Value) {
    match http.get(url).send().await {
        Ok(r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
        Err(_) => (0, Value::Null),
    }
}

/// The peers (router ids) a node's peer sync sees, and its own id, from `/debug/state`.
fn peers(state: &Value) -> (Vec<String>, Option<String>) {
    let sync = &state["node"]["peer_sync"][0]["state"];
    let ids = sync["peers"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|v| v["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (ids, sync["me"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_and_a_worker_on_one_nats_act_as_one_fleet() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let nats = NatsServer::start().await.expect("a nats-server");
    let cluster = format!("sys{}", uuid::Uuid::new_v4().simple());
    let worker = SimWorker::start(
        "worker",
        &[
            "--nats",
            nats.url(),
            "--cluster",
            &cluster,
            "--worker-id",
            "1",
            "--speedup",
            "50",
            "--heartbeat-ms",
            "200",
        ],
    );
    let bus = NodeBus::Nats(nats.url().to_owned());
    let nodes = [
        RouterNode::start("node a", &cluster, &bus, NODE_EXTRA),
        RouterNode::start("node b", &cluster, &bus, NODE_EXTRA),
    ];
    let http = reqwest::Client::new();

    for node in &nodes {
        let url = format!("{}/ready", node.url());
        eventually(
            "a node is ready once the worker announced itself",
            || async { get(&http, url.clone()).await.0 == 200 },
        )
        .await;
    }
    for node in &nodes {
        let response = http
            .post(format!("{}/v1/completions", node.url()))
            .json(&json!({"model": "sim", "prompt": "hello there", "max_tokens": 4}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 200, "{body}\n{}", node.output());
        let text = body["choices"][0]["text"].as_str().unwrap_or_default();
        assert!(!text.is_empty(), "{body}");
    }
    // Each node's peer sync knows the other; both ledgers drain to nothing.
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for node in &nodes {
            let (_, state) = get(&http, format!("{}/debug/state", node.admin_url())).await;
            ids.push(
                peers(&state)
                    .1
                    .expect("/debug/state names the node's router id"),
            );
        }
        ids
    };
    for (i, node) in nodes.iter().enumerate() {
        let other = ids[1 - i].clone();
        let url = format!("{}/debug/state", node.admin_url());
        eventually("each node sees the other as a peer", || async {
            peers(&get(&http, url.clone()).await.1).0.contains(&other)
        })
        .await;
        eventually("every ledger idle after the requests", || async {
            ledger_idle(&get(&http, url.clone()).await.1)
        })
        .await;
    }

    let [a, b] = nodes;
    for stopped in [a.stop(), b.stop(), worker.stop()] {
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    }
}

/// Without `http.max_prompt_tokens` the prompt limit is the context length the engines
/// announce: a worker serving 300 tokens makes a longer prompt a 400 at the router that
/// names 300, while one that fits is served; an explicit limit still wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_limit_follows_the_engines_context_length() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let nats = NatsServer::start().await.expect("a nats-server");
    let cluster = format!("sys{}", uuid::Uuid::new_v4().simple());
    let worker = SimWorker::start(
        "worker",
        &[
            "--nats",
            nats.url(),
            "--cluster",
            &cluster,
            "--speedup",
            "50",
            "--heartbeat-ms",
            "200",
            "--max-model-len",
            "300",
        ],
    );
    let bus = NodeBus::Nats(nats.url().to_owned());
    let node = RouterNode::start("node", &cluster, &bus, NODE_EXTRA);
    let fixed = RouterNode::start_with_http(
        "fixed",
        &cluster,
        &bus,
        "",
        "max_prompt_tokens = 100\n",
        NODE_EXTRA,
    );
    let http = reqwest::Client::new();
    for n in [&node, &fixed] {
        let url = format!("{}/ready", n.url());
        eventually("ready once the worker announced itself", || async {
            get(&http, url.clone()).await.0 == 200
        })
        .await;
    }
    let call = |n: &RouterNode, ids: usize| {
        let url = format!("{}/v1/completions", n.url());
        let body = json!({"model": "sim", "prompt": vec![7u32; ids], "max_tokens": 2});
        let http = http.clone();
        async move {
            let r = http.post(url).json(&body).send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, body) = call(&node, 301).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["reason"], "prompt_too_long", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("300"), "{message}");
    let (status, body) = call(&node, 250).await;
    assert_eq!(status, 200, "{body}");
    // Configured, the node's own limit counts, not the engine's.
    let (status, body) = call(&fixed, 150).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("100")
    );
    for n in [&node, &fixed] {
        let url = format!("{}/debug/state", n.admin_url());
        eventually("ledger idle", || async {
            ledger_idle(&get(&http, url.clone()).await.1)
        })
        .await;
    }
    for stopped in [node.stop(), fixed.stop(), worker.stop()] {
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    }
}
