//! A rolling restart under load, as an operator would run one: three `serve` replicas and two
//! simulated workers behind a real HAProxy, four clients sending requests back to back; each
//! replica in turn gets SIGTERM (its `/ready` turns false, it keeps serving for
//! `http.shutdown_delay_ms` while HAProxy's checks notice, then it drains and says goodbye),
//! exits 0, and is started again on the same address; the next one goes once HAProxy sees it
//! up. Not one request fails, and every ledger ends idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use switchyard_system_tests::support::{ClusterBuilder, Role};
use tokio::time::Instant;

const CLIENTS: usize = 4;

/// One client: requests back to back until `stop`; returns (ok, failures).
async fn client(url: String, id: usize, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let http = reqwest::Client::new();
    let (mut ok, mut failures) = (0u64, Vec::new());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let body =
            json!({"model": "sim", "prompt": format!("client {id} request {n}"), "max_tokens": 16});
        let answer = http
            .post(format!("{url}/v1/completions"))
            .json(&body)
            .timeout(Duration::from_secs(20))
            .send()
            .await;
        match answer {
            Ok(r) if r.status().as_u16() == 200 => {
                let text = r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["choices"][0]["text"].as_str().map(|t| !t.is_empty()));
                if text == Some(true) {
                    ok += 1;
                } else {
                    failures.push("200 without a completion".to_owned());
                }
            }
            Ok(r) => {
                let status = r.status().as_u16();
                failures.push(format!("{status}: {}", r.text().await.unwrap_or_default()));
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    (ok, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_replica_under_load_fails_no_request() {
    let mut cluster = ClusterBuilder::new()
        .replicas(3)
        .workers(Role::Agg, 2, 4096)
        .speedup(10.0)
        // HAProxy marks a replica down after 2 failed checks 200 ms apart.
        .http_extra("shutdown_delay_ms = 1000")
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    let url = cluster.url();
    let http = reqwest::Client::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(url.clone(), id, Arc::clone(&stop))))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    for i in 0..cluster.replicas.len() {
        let replica = cluster.replicas.remove(i);
        let name = format!("replica {i} (restarted)");
        let (stopped, restarted) = tokio::task::spawn_blocking(move || replica.restart(&name))
            .await
            .unwrap();
        assert_eq!(stopped.code, Some(0), "replica {i}: {}", stopped.stderr);
        cluster.replicas.insert(i, restarted);
        let haproxy = cluster.haproxy.as_ref().expect("a load balancer");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let servers = haproxy.servers(&http).await.unwrap();
            if servers[i].checked_up() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {i} not back up: {servers:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failures) = (0, Vec::new());
    for c in clients {
        let (n, f) = c.await.unwrap();
        ok += n;
        failures.extend(f);
    }
    println!(
        "rolling restart of {} replicas: {ok} requests ok, {} failed",
        cluster.replicas.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}\n{}", cluster.outputs());
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
