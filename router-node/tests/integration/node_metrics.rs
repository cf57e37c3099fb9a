//! `/metrics` with a node attached: the node's state observed at scrape time (queues, booked
//! load per worker rank, admissions, peer sync, KV events, room signals, decode errors), the
//! queue-wait and route histograms of the frontend, and scrapes that keep answering when a
//! node actor is gone (counted in `switchyard_scrape_errors_total`).

use crate::support;
use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{Node, WorkerLink};
use router_core::{PoolRole, WorkerSpec};
use router_node::config::{BusKind, Config};
use router_node::frontend::Metrics;
use router_node::metrics::NodeSources;
use router_node::serve::{Listeners, serve_with_bus};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

fn test_config() -> Config {
    let mut config = Config::default();
    config.node.cluster = format!("metrics-test-{}", uuid::Uuid::new_v4().simple());
    config.bus.kind = BusKind::InProcess;
    config.http.listen = "127.0.0.1:0".to_owned();
    config.admin.listen = "127.0.0.1:0".to_owned();
    config.http.drain_timeout_ms = 2_000;
    config.http.models = vec!["stand-in".to_owned()];
    config.peer_sync.heartbeat_ms = 50;
    config.peer_sync.lease_ms = 300;
    config.peer_sync.snapshot_window_ms = 100;
    config.scheduler.recheck_ms = 50;
    config.validate().unwrap();
    config
}

/// The value of the series whose line starts with `series` (name and labels, exactly).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// The sum of every series of `family` (the name up to `{`; a histogram's `_count`, say).
fn sum(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|line| {
            line.starts_with(&format!("{family}{{")) || line.starts_with(&format!("{family} "))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn scrape(http: &reqwest::Client, url: &str) -> String {
    let response = http.get(format!("{url}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_node_behind_a_request() {
    let config = test_config();
    let cluster = config.node.cluster.clone();
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let listeners = Listeners::bind(&config).await.unwrap();
    let url = format!("http://{}", listeners.public.local_addr().unwrap());
    let admin = format!("http://{}", listeners.admin.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(serve_with_bus(config, listeners, bus.clone(), async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();

    // Five chunks 100 ms apart: the booking is live while the stream runs.
    let worker = support::spawn_worker(5, Duration::from_millis(100)).await;
    let link = WorkerLink::start(
        bus.clone(),
        &Subjects::new(cluster),
        WorkerAnnounce {
            spec: WorkerSpec::new(1, 1, 10_000, 8192),
            pool: PoolRole::Aggregated,
            endpoint: worker.url.clone(),
            heartbeat_ms: 50,
            lease_ms: 1_000,
            leaving: false,
        },
        Duration::from_millis(50),
    )
    .await
    .unwrap();
    let mut ready = false;
    for _ in 0..300 {
        let status = http
            .get(format!("{url}/ready"))
            .send()
            .await
            .unwrap()
            .status();
        if status == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ready, "the node never became ready");

    let mut response = http
        .post(format!("{url}/v1/completions"))
        .json(&serde_json::json!({"model": "m", "prompt": "hello there", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());

    // Mid-stream: the worker's rank holds the booking.
    let text = scrape(&http, &admin).await;
    let rank = r#"{pool="aggregated",worker="1",dp_rank="0"}"#;
    assert_eq!(
        value(&text, &format!("switchyard_worker_requests{rank}")),
        Some(1.0),
        "{text}"
    );
    let decode_blocks = value(&text, &format!("switchyard_booked_decode_blocks{rank}"));
    assert!(decode_blocks.is_some_and(|v| v >= 1.0), "{text}");
    for gauge in [
        "switchyard_booked_prefill_tokens",
        "switchyard_reserved_decode_blocks",
    ] {
        assert!(
            value(&text, &format!("{gauge}{rank}")).is_some(),
            "{gauge} missing:\n{text}"
        );
    }

    while response.chunk().await.unwrap().is_some() {}
    // The booking is released when the stream ends (asynchronously: give it a moment).
    let mut text = scrape(&http, &admin).await;
    for _ in 0..100 {
        if value(&text, &format!("switchyard_worker_requests{rank}")) == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        text = scrape(&http, &admin).await;
    }
    assert_eq!(
        value(&text, &format!("switchyard_worker_requests{rank}")),
        Some(0.0),
        "{text}"
    );

    // `/debug/state`: the router at the top level, every actor of the node under `node`.
    let state: serde_json::Value = http
        .get(format!("{admin}/debug/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(state["scheduler"]["ledger"].is_object(), "{state}");
    let node = &state["node"];
    for part in ["routers", "peer_sync", "kv_events"] {
        assert_eq!(node[part][0]["pool"], "aggregated", "{part}: {node}");
    }
    assert!(
        node["registry"]["workers"]
            .as_array()
            .is_some_and(|w| !w.is_empty()),
        "{node}"
    );
    assert_eq!(node["unavailable"], serde_json::json!([]), "{node}");

    // Counters from the actors, and the frontend's histograms.
    let admitted = value(
        &text,
        r#"switchyard_admissions_total{pool="aggregated",outcome="admitted"}"#,
    );
    assert!(admitted.is_some_and(|v| v >= 1.0), "{text}");
    for outcome in ["queued", "rejected", "admitted_upstream"] {
        let series =
            format!(r#"switchyard_admissions_total{{pool="aggregated",outcome="{outcome}"}}"#);
        assert!(value(&text, &series).is_some(), "{series} missing:\n{text}");
    }
    assert!(
        sum(&text, "switchyard_queue_wait_seconds_count") >= 1.0,
        "{text}"
    );
    assert!(
        sum(&text, "switchyard_route_seconds_count") >= 1.0,
        "{text}"
    );
    assert!(
        sum(&text, "switchyard_admission_latency_seconds_count") >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("switchyard_queue_depth{pool=\"aggregated\",class="),
        "{text}"
    );
    assert!(
        text.contains("switchyard_queue_tokens{pool=\"aggregated\",class="),
        "{text}"
    );
    for series in [
        r#"switchyard_registered_workers{pool="aggregated"}"#,
        r#"switchyard_room_queries_total{pool="aggregated"}"#,
        r#"switchyard_peer_sync_lag_seconds_count{pool="aggregated"}"#,
        r#"switchyard_peer_sync_lag_seconds_bucket{le="+Inf",pool="aggregated"}"#,
        r#"switchyard_peer_sync_gaps_total{pool="aggregated"}"#,
        r#"switchyard_peer_sync_snapshots_applied_total{pool="aggregated"}"#,
        r#"switchyard_peer_sync_expired_peers_total{pool="aggregated"}"#,
        r#"switchyard_kv_events_total{pool="aggregated",kind="stored"}"#,
        r#"switchyard_kv_events_total{pool="aggregated",kind="removed"}"#,
        r#"switchyard_kv_events_total{pool="aggregated",kind="cleared"}"#,
        r#"switchyard_wire_decode_errors_total{component="peer_sync",kind="malformed"}"#,
        r#"switchyard_wire_decode_errors_total{component="room",kind="foreign_cluster"}"#,
        "switchyard_room_changed_published_total",
        "switchyard_room_changed_received_total",
    ] {
        assert!(value(&text, series).is_some(), "{series} missing:\n{text}");
    }
    assert_eq!(
        value(&text, r#"switchyard_registered_workers{pool="aggregated"}"#),
        Some(1.0)
    );
    // Every actor answered every scrape.
    for component in ["router", "peer_sync", "kv_events", "registry"] {
        let series = format!(r#"switchyard_scrape_errors_total{{component="{component}"}}"#);
        assert_eq!(value(&text, &series), Some(0.0), "{series}:\n{text}");
    }
    // The peer-sync lag is a histogram (no gauge with a `quantile` label).
    assert!(
        text.contains("# TYPE switchyard_peer_sync_lag_seconds histogram"),
        "{text}"
    );
    assert!(!text.contains("quantile="), "{text}");
    // What a user would check after one streamed request: its TTFT and duration observed,
    // its output tokens counted (five chunks, no usage asked for), the worker's leg counted.
    let class = r#"{class="default"}"#;
    let ttft = format!("switchyard_time_to_first_token_seconds_count{class}");
    assert_eq!(value(&text, &ttft), Some(1.0), "{text}");
    let itl = format!("switchyard_inter_token_latency_seconds_count{class}");
    assert_eq!(value(&text, &itl), Some(4.0), "{text}");
    let ok = r#"switchyard_request_duration_seconds_count{class="default",outcome="ok"}"#;
    assert_eq!(value(&text, ok), Some(1.0), "{text}");
    let output = format!("switchyard_output_tokens_total{class}");
    assert_eq!(value(&text, &output), Some(5.0), "{text}");
    let leg = r#"switchyard_upstream_requests_total{pool="aggregated",worker="1"}"#;
    assert_eq!(value(&text, leg), Some(1.0), "{text}");
    // One exposition: a single EOF, at the end.
    assert_eq!(text.matches("# EOF").count(), 1);
    assert!(text.trim_end().ends_with("# EOF"));

    link.shutdown().await.unwrap();
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), done)
        .await
        .expect("serve returns after its shutdown")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_skips_and_counts_an_actor_that_is_gone() {
    let config = test_config();
    let profile = config.policy_profile().unwrap();
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let node = Node::start(config.node_config(profile), bus).await.unwrap();
    let metrics = Metrics::new()
        .with_node(NodeSources::from_node(&node).with_timeout(Duration::from_millis(200)));

    let text = metrics.scrape().await;
    let errors = r#"switchyard_scrape_errors_total{component="peer_sync"}"#;
    assert_eq!(value(&text, errors), Some(0.0), "{text}");
    assert!(
        value(
            &text,
            r#"switchyard_peer_sync_gaps_total{pool="aggregated"}"#
        )
        .is_some(),
        "{text}"
    );

    // The peer-sync actor stops: the next scrapes leave it out and count it.
    node.peer_sync(PoolRole::Aggregated).unwrap().stop();
    let mut text = metrics.scrape().await;
    for _ in 0..100 {
        if value(&text, errors).is_some_and(|v| v >= 1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        text = metrics.scrape().await;
    }
    assert!(value(&text, errors).is_some_and(|v| v >= 1.0), "{text}");
    assert!(
        value(
            &text,
            r#"switchyard_peer_sync_gaps_total{pool="aggregated"}"#
        )
        .is_none(),
        "a gone actor's series must not be rendered:\n{text}"
    );
    // The rest of the node is still there.
    assert!(
        value(
            &text,
            r#"switchyard_admissions_total{pool="aggregated",outcome="admitted"}"#
        )
        .is_some(),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));

    // A scrape with the whole node gone still answers, counting every component.
    let before = value(
        &text,
        r#"switchyard_scrape_errors_total{component="router"}"#,
    );
    assert_eq!(before, Some(0.0));
    node.shutdown().await;
    let started = tokio::time::Instant::now();
    let text = metrics.scrape().await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        value(
            &text,
            r#"switchyard_scrape_errors_total{component="router"}"#
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));
}
