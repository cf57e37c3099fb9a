//! A replica killed under load, as an operator would see it: three `serve` replicas and two
//! simulated workers behind a real HAProxy, four clients sending requests back to back; one
//! replica gets SIGKILL. Only requests in flight on it may fail (at most one per client); no
//! request sent after HAProxy saw it down fails (a refused connection is retried on another
//! replica); the survivors drop its bookings within its lease and end idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_system_tests::support::{ClusterBuilder, Role};
use tokio::time::Instant;

const CLIENTS: usize = 4;

/// One client: requests back to back until `stop`; returns (ok, failures with their send time).
async fn client(url: String, id: usize, stop: Arc<AtomicBool>) -> (u64, Vec<(Instant, String)>) {
    let http = reqwest::Client::new();
    let (mut ok, mut failures) = (0u64, Vec::new());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let sent = Instant::now();
        let body =
            json!({"model": "sim", "prompt": format!("client {id} request {n}"), "max_tokens": 24});
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
                    failures.push((sent, "200 without a completion".to_owned()));
                }
            }
            Ok(r) => {
                let status = r.status().as_u16();
                failures.push((
                    sent,
                    format!("{status}: {}", r.text().await.unwrap_or_default()),
                ));
            }
            Err(e) => failures.push((sent, e.to_string())),
        }
    }
    (ok, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_fails_only_its_in_flight_requests() {
    let mut cluster = ClusterBuilder::new()
        .replicas(3)
        .workers(Role::Agg, 2, 4096)
        .speedup(10.0)
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    let url = cluster.url();
    let http = reqwest::Client::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(url.clone(), id, Arc::clone(&stop))))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let killed_at = Instant::now();
    let killed = cluster.replicas.remove(1).kill();
    assert_eq!(killed.code, None, "killed by a signal");
    let down_at = {
        let haproxy = cluster.haproxy.as_ref().expect("a load balancer");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let servers = haproxy.servers(&http).await.unwrap();
            if servers[1].status == "DOWN" {
                break Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "HAProxy still sees it: {servers:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    // Load after HAProxy took it out.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let failures = Arc::new(Mutex::new(Vec::new()));
    let mut ok = 0;
    for c in clients {
        let (n, f) = c.await.unwrap();
        ok += n;
        failures.lock().unwrap().extend(f);
    }
    let failures = failures.lock().unwrap().clone();
    let after_down: Vec<&(Instant, String)> = failures
        .iter()
        .filter(|(sent, _)| *sent >= down_at)
        .collect();
    println!(
        "replica killed: {ok} requests ok, {} failed (all sent before HAProxy saw it down {} ms \
         after the kill): {:?}",
        failures.len(),
        down_at.duration_since(killed_at).as_millis(),
        failures.iter().map(|(_, e)| e).collect::<Vec<_>>()
    );
    assert!(
        after_down.is_empty(),
        "requests sent after HAProxy saw it down failed: {after_down:?}"
    );
    assert!(
        failures.len() <= CLIENTS,
        "only requests in flight on the killed replica fail (one per client at most): {failures:?}"
    );
    // The survivors expire its bookings within its lease (3 s) and end idle.
    cluster
        .wait_ledgers_idle(Duration::from_secs(10))
        .await
        .unwrap();
    for (name, stopped) in cluster.stop() {
        if name != "haproxy" {
            assert_eq!(stopped.code, Some(0), "{name}: {}", stopped.stderr);
        }
    }
}
