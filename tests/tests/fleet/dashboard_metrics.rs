//! The Grafana dashboard (`deploy/grafana/switchyard.json`) against a live node: a nats-server,
//! two simulated workers and a `serve` node whose policy has a classifier. After a few
//! requests, a malformed one, and a worker killed so that a request is placed again on the
//! other, every metric name in every query of the dashboard (panels and template variables)
//! must be a series the node's `/metrics` serves; a `_bucket` name must belong to a histogram
//! family. A dashboard naming a metric the node does not export fails here.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use switchyard_system_tests::support::{
    NatsServer, NodeBus, RouterNode, SimWorker, TempDir, workspace_root,
};

const WAIT: Duration = Duration::from_secs(30);

const POLICY: &str = r#"
default_class = "interactive"

[[classes]]
name = "interactive"
slo_ms = 10000
quantum = 512

[[classifiers]]
name = "everyone"
class = "interactive"
"#;

/// Every `switchyard_*` name in a PromQL text.
fn metric_names(query: &str, into: &mut BTreeSet<String>) {
    let mut rest = query;
    while let Some(start) = rest.find("switchyard_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        into.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
}

/// Every query string of the dashboard: panels' `expr`, template variables' `query` and
/// `definition`, wherever they are nested.
fn queries(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query" | "definition", Value::String(text)) => {
                        into.push(text.clone())
                    }
                    _ => queries(v, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| queries(v, into)),
        _ => {}
    }
}

/// The sample names of a Prometheus text exposition, and each family's type.
fn exposition(text: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut samples = BTreeSet::new();
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                types.insert(name.to_owned(), kind.to_owned());
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            samples.insert(line[..end].to_owned());
        }
    }
    (samples, types)
}

async fn scrape(http: &reqwest::Client, node: &RouterNode) -> String {
    let response = http
        .get(format!("{}/metrics", node.admin_url()))
        .send()
        .await;
    match response {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn complete(http: &reqwest::Client, node: &RouterNode, body: Value) -> u16 {
    http.post(format!("{}/v1/completions", node.url()))
        .json(&body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// Scrapes until `holds` says yes; panics with the last scrape after [`WAIT`].
async fn scrape_until(
    http: &reqwest::Client,
    node: &RouterNode,
    what: &str,
    mut holds: impl FnMut(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = scrape(http, node).await;
        if holds(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {WAIT:?}\n{text}\n{}",
            node.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_dashboard_is_served_by_a_live_node() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let dashboard_path = workspace_root().join("deploy/grafana/switchyard.json");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(&dashboard_path).expect("deploy/grafana/switchyard.json"),
    )
    .expect("the dashboard is JSON");
    let mut texts = Vec::new();
    queries(&dashboard, &mut texts);
    let mut names = BTreeSet::new();
    for text in &texts {
        metric_names(text, &mut names);
    }
    assert!(
        names.len() >= 20,
        "the dashboard names only {names:?} (its queries: {texts:?})"
    );

    let nats = NatsServer::start().await.expect("a nats-server");
    let cluster = format!("dash{}", uuid::Uuid::new_v4().simple());
    let worker = |id: &str| {
        SimWorker::start(
            &format!("worker {id}"),
            &[
                "--nats",
                nats.url(),
                "--cluster",
                &cluster,
                "--worker-id",
                id,
                "--speedup",
                "50",
                "--heartbeat-ms",
                "200",
            ],
        )
    };
    let (one, two) = (worker("1"), worker("2"));
    let dir = TempDir::new("dashboard");
    let policy = dir.write("policy.toml", POLICY);
    let node = RouterNode::start(
        "node",
        &cluster,
        &NodeBus::Nats(nats.url().to_owned()),
        &format!(
            "[policy]\npath = \"{}\"\n[peer_sync]\nheartbeat_ms = 200\n",
            policy.display()
        ),
    );
    let http = reqwest::Client::new();
    scrape_until(&http, &node, "both workers registered", |t| {
        t.contains("switchyard_registered_workers{pool=\"aggregated\"} 2")
    })
    .await;

    for i in 0..6 {
        let prompt = format!(
            "request {i}: {}",
            "a shared prefix of some length ".repeat(8)
        );
        let status = complete(
            &http,
            &node,
            serde_json::json!({"model": "sim", "prompt": prompt, "max_tokens": 4}),
        )
        .await;
        assert_eq!(status, 200, "{}", node.output());
    }
    // Malformed: a rejection with its reason.
    let status = complete(&http, &node, serde_json::json!({"model": "sim"})).await;
    assert_eq!(status, 400);
    // A worker gone without a goodbye: a request placed on it is placed again on the other.
    let _ = two.kill();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !scrape(&http, &node)
        .await
        .contains("switchyard_http_retries_total")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no request was retried after worker 2 died\n{}",
            node.output()
        );
        let body = serde_json::json!({"model": "sim", "prompt": "after the kill", "max_tokens": 2});
        complete(&http, &node, body).await;
    }

    let text = scrape(&http, &node).await;
    let (samples, types) = exposition(&text);
    let missing: Vec<&String> = names.iter().filter(|n| !samples.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the node does not serve: {missing:?}\n{text}"
    );
    for name in &names {
        if let Some(base) = name.strip_suffix("_bucket") {
            assert_eq!(
                types.get(base).map(String::as_str),
                Some("histogram"),
                "{name}: not a histogram's buckets"
            );
        }
    }

    let stopped = node.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    let stopped = one.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
}
