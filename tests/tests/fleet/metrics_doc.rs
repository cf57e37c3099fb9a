//! `docs/metrics.md` against live nodes, and the operator metrics moving as a user checks
//! them. Two `serve` replicas of a disaggregated fleet (one prefill and one decode simulated
//! worker, over a real nats-server) serve requests; then:
//!
//! - every family each replica's `/metrics` exports is a row of the table with the same type
//!   (a counter's row is its `_total` name), and every row marked `always` is exported;
//! - one streamed request that asks for `usage` moves the metrics as a user would read them:
//!   one more time-to-first-token and `ok` duration observation, inter-token gaps, prompt,
//!   cached and output token counters up by exactly the usage the client read, one more leg
//!   counted on each worker;
//! - the same prompt sent again is found cached on the prefill pool (the prefix-hit
//!   counters move), the peer-sync lag histogram counts the other replica's deltas, and
//!   `build_info` names this build.

use router_node::sse::SseReader;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use switchyard_system_tests::support::observe::get_text;
use switchyard_system_tests::support::{Cluster, ClusterBuilder, Role, workspace_root};

/// The table rows: metric name → (type, shown).
fn documented() -> BTreeMap<String, (String, String)> {
    let path = workspace_root().join("docs/metrics.md");
    let text = std::fs::read_to_string(&path).expect("docs/metrics.md");
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            if !name.starts_with("switchyard_") {
                return None;
            }
            let (kind, shown) = ((*cells.get(2)?).to_owned(), (*cells.get(4)?).to_owned());
            Some((name.to_owned(), (kind, shown)))
        })
        .collect()
}

/// The families of an exposition as a user queries them (a counter by its `_total` name),
/// with their type.
fn exported(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("# TYPE ")?.split_whitespace();
            let (name, kind) = (words.next()?, words.next()?);
            let name = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_owned(),
            };
            Some((name, kind.to_owned()))
        })
        .collect()
}

/// The sum of the samples whose line starts with `prefix` (a name, or a name and the
/// beginning of its labels).
fn sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(['{', '}', ' ', ',']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn scrape(cluster: &Cluster, replica: usize) -> String {
    let url = format!("{}/metrics", cluster.replicas[replica].admin_url());
    get_text(&reqwest::Client::new(), &url).await.unwrap()
}

/// Sends one streamed completion with `usage` asked for; returns what the client read.
async fn streamed(http: &reqwest::Client, url: &str, prompt: &str) -> SseReader {
    let response = http
        .post(format!("{url}/v1/completions"))
        .json(&json!({
            "model": "sim", "prompt": prompt, "max_tokens": 12, "stream": true,
            "stream_options": {"include_usage": true},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.unwrap();
    let mut reader = SseReader::default();
    reader.feed(&body);
    assert!(
        reader.done && !reader.error,
        "{}",
        String::from_utf8_lossy(&body)
    );
    reader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exported_family_is_documented_and_the_operator_metrics_move() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let cluster = ClusterBuilder::new()
        .replicas(2)
        .workers(Role::Prefill, 1, 4096)
        .workers(Role::Decode, 1, 4096)
        .speedup(20.0)
        .without_haproxy()
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(30)).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let urls: Vec<String> = cluster
        .replicas
        .iter()
        .map(|r| r.url().to_owned())
        .collect();

    // Traffic on both replicas: a streamed completion, a chat, a refused request.
    for url in &urls {
        streamed(&http, url, "a warm-up prompt for this replica").await;
        let chat = http
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
            .send()
            .await
            .unwrap();
        assert_eq!(chat.status(), 200);
        let bad = http
            .post(format!("{url}/v1/completions"))
            .json(&json!({"prompt": "no model"}))
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400);
    }

    // One streamed request with usage: the metrics move by what the client read.
    let before = scrape(&cluster, 0).await;
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(30);
    let read = streamed(&http, &urls[0], &prompt).await;
    let after = scrape(&cluster, 0).await;
    let delta = |prefix: &str| sum(&after, prefix) - sum(&before, prefix);
    let class = "{class=\"default\"";
    assert_eq!(
        delta(&format!(
            "switchyard_time_to_first_token_seconds_count{class}"
        )),
        1.0
    );
    let ok = "switchyard_request_duration_seconds_count{class=\"default\",outcome=\"ok\"";
    assert_eq!(delta(ok), 1.0, "{after}");
    assert_eq!(
        delta(&format!(
            "switchyard_inter_token_latency_seconds_count{class}"
        )),
        read.content_chunks as f64 - 1.0,
        "one gap between each two content chunks"
    );
    let usage = |v: Option<u64>, what: &str| v.unwrap_or_else(|| panic!("no usage.{what}")) as f64;
    assert_eq!(
        delta(&format!("switchyard_prompt_tokens_total{class}")),
        usage(read.prompt_tokens, "prompt_tokens")
    );
    assert_eq!(
        delta(&format!("switchyard_output_tokens_total{class}")),
        usage(read.completion_tokens, "completion_tokens")
    );
    assert_eq!(
        delta(&format!("switchyard_cached_tokens_total{class}")),
        read.cached_tokens.unwrap_or(0) as f64
    );
    for (pool, worker) in [("prefill", 1), ("decode", 101)] {
        let leg =
            format!("switchyard_upstream_requests_total{{pool=\"{pool}\",worker=\"{worker}\"");
        assert_eq!(delta(&leg), 1.0, "{leg}:\n{after}");
    }
    assert!(delta("switchyard_prefix_prompt_blocks_total{pool=\"prefill\"") >= 8.0);

    // The same prompt again: the prefill worker's KV events reach the index and the
    // admission finds the prefix cached (retried while the events are in flight).
    let matched = "switchyard_prefix_matched_blocks_total{pool=\"prefill\"";
    let mut hits = 0.0;
    for _ in 0..20 {
        let before = sum(&scrape(&cluster, 0).await, matched);
        streamed(&http, &urls[0], &prompt).await;
        hits = sum(&scrape(&cluster, 0).await, matched) - before;
        if hits > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        hits >= 8.0,
        "the repeated prompt's blocks were not found cached: {hits}"
    );

    // Every exported family is documented with its type; every `always` row is exported.
    let documented = documented();
    assert!(documented.len() >= 50, "{documented:?}");
    let mut seen = BTreeSet::new();
    for replica in 0..urls.len() {
        let text = scrape(&cluster, replica).await;
        for (name, kind) in exported(&text) {
            match documented.get(&name) {
                Some((doc_kind, _)) => assert_eq!(
                    doc_kind, &kind,
                    "{name} is a {kind}, docs/metrics.md says {doc_kind}"
                ),
                None => panic!("{name} ({kind}) is exported but not in docs/metrics.md"),
            }
            seen.insert(name);
        }
        // Peer sync: this replica applied the other's deltas, and measured their lag.
        assert!(
            sum(&text, "switchyard_peer_sync_lag_seconds_count") >= 1.0,
            "replica {replica}:\n{text}"
        );
        let info = text
            .lines()
            .find(|l| l.starts_with("switchyard_build_info{"))
            .expect("build_info");
        let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(info.contains(&version), "{info}");
        assert!(
            info.contains("git_sha=\"") && info.contains("rustc=\"rustc "),
            "{info}"
        );
        assert!(info.ends_with(" 1"), "{info}");
    }
    let missing: Vec<_> = documented
        .iter()
        .filter(|(name, (_, shown))| shown == "always" && !seen.contains(*name))
        .map(|(name, _)| name)
        .collect();
    assert!(
        missing.is_empty(),
        "documented as always shown, not exported: {missing:?}"
    );

    cluster.stop_cleanly();
}
