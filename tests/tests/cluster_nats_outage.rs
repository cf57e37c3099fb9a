//! A NATS outage under load, as an operator would see it: three `serve` replicas and two
//! simulated workers on a real nats-server behind a real HAProxy; four clients send requests
//! through HAProxy without pause; the nats-server is killed for 10 s (longer than the peers'
//! lease and the workers' lease) and started again on its port. No request fails because of
//! the outage: replicas keep the workers and peers they knew, `/ready` stays 200 and says the
//! bus is disconnected; when NATS is back every replica says so again, and every ledger ends
//! idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use switchyard_system_tests::support::{ClusterBuilder, Role};

const CLIENTS: usize = 4;
const OUTAGE: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    during_outage: AtomicU64,
}

/// One client: requests back to back until `stop`; each must answer 200 with text.
async fn client(
    url: String,
    id: usize,
    stop: Arc<AtomicBool>,
    outage: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let body =
            json!({"model": "sim", "prompt": format!("client {id} request {n}"), "max_tokens": 4});
        let answer = http
            .post(format!("{url}/v1/completions"))
            .json(&body)
            .timeout(Duration::from_secs(20))
            .send()
            .await;
        let ok = match answer {
            Ok(r) if r.status().as_u16() == 200 => r
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v["choices"][0]["text"].as_str().map(|t| !t.is_empty()))
                .unwrap_or(false),
            Ok(r) => {
                let status = r.status().as_u16();
                failures.push(format!("{status}: {}", r.text().await.unwrap_or_default()));
                false
            }
            Err(e) => {
                failures.push(e.to_string());
                false
            }
        };
        if ok {
            tally.ok.fetch_add(1, Ordering::Relaxed);
            if outage.load(Ordering::Relaxed) {
                tally.during_outage.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            tally.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    failures
}

async fn ready_bodies(http: &reqwest::Client, urls: &[String]) -> Vec<(u16, Value)> {
    let mut out = Vec::new();
    for url in urls {
        let r = http.get(format!("{url}/ready")).send().await.unwrap();
        out.push((r.status().as_u16(), r.json().await.unwrap_or(Value::Null)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_second_nats_outage_under_load_fails_no_request() {
    let mut cluster = ClusterBuilder::new()
        .replicas(3)
        .workers(Role::Agg, 2, 4096)
        .speedup(50.0)
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    let url = cluster.url();
    let replica_urls: Vec<String> = cluster
        .replicas
        .iter()
        .map(|r| r.url().to_owned())
        .collect();
    let http = reqwest::Client::new();

    let stop = Arc::new(AtomicBool::new(false));
    let outage = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            tokio::spawn(client(
                url.clone(),
                id,
                Arc::clone(&stop),
                Arc::clone(&outage),
                Arc::clone(&tally),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    cluster.nats.stop();
    outage.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (status, body) in ready_bodies(&http, &replica_urls).await {
        assert_eq!(status, 200, "a replica without NATS stays ready: {body}");
        assert_eq!(body["bus"], "disconnected", "{body}");
    }
    tokio::time::sleep(OUTAGE - Duration::from_secs(3)).await;
    cluster.nats.restart().await.unwrap();
    outage.store(false, Ordering::Relaxed);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let bodies = ready_bodies(&http, &replica_urls).await;
        if bodies
            .iter()
            .all(|(s, b)| *s == 200 && b["bus"] == "connected")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not reconnected: {bodies:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.unwrap());
    }
    let (ok, failed, during) = (
        tally.ok.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        tally.during_outage.load(Ordering::Relaxed),
    );
    println!(
        "NATS outage {OUTAGE:?}: {ok} requests ok ({during} during the outage), {failed} failed"
    );
    assert_eq!(
        failed,
        0,
        "no request fails because of the outage: {failures:?}\n{}",
        cluster.outputs()
    );
    assert!(
        during >= 20,
        "requests kept flowing during the outage: {during}"
    );
    cluster
        .wait_ledgers_idle(Duration::from_secs(15))
        .await
        .unwrap();
    for (name, stopped) in cluster.stop() {
        if name != "haproxy" {
            assert_eq!(stopped.code, Some(0), "{name}: {}", stopped.stderr);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_exits_cleanly_at_sigterm_while_nats_is_down() {
    let mut cluster = ClusterBuilder::new()
        .replicas(2)
        .workers(Role::Agg, 2, 4096)
        .speedup(50.0)
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.nats.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = std::time::Instant::now();
    let stopped = tokio::task::spawn_blocking(move || {
        let stopped = cluster.stop();
        (stopped, started.elapsed())
    })
    .await
    .unwrap();
    let (stopped, took) = stopped;
    println!("every process stopped {took:?} after the first SIGTERM, NATS down");
    for (name, exit) in stopped {
        if name != "haproxy" {
            assert_eq!(exit.code, Some(0), "{name}: {}", exit.stderr);
        }
    }
    // Each process is signalled in turn; each drains at most 2 s (its drain timeout) and
    // the goodbye waits at most 1 s for a bus that is gone.
    assert!(took < Duration::from_secs(20), "{took:?}");
}
