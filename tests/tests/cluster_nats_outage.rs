//! A NATS outage under load, as an operator would see it: three `serve` replicas and two
//! simulated workers on a real nats-server behind a real HAProxy; four clients send requests
//! through HAProxy without pause; the nats-server is killed for 10 s (longer than the peers'
//! lease and the workers' lease) and started again on its port. No request fails because of
//! the outage: replicas keep the workers and peers they knew, `/ready` stays 200 and says the
//! bus is disconnected; when NATS is back every replica says so again, their ledgers agree
//! again (the time it takes is printed), and every ledger ends idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use switchyard_system_tests::support::load::{clients, finish};
use switchyard_system_tests::support::observe::{get_json, router_snapshots};
use switchyard_system_tests::support::{ClusterBuilder, Role};
use tokio::time::Instant;

const CLIENTS: usize = 4;
const OUTAGE: Duration = Duration::from_secs(10);

/// How many bookings each replica's ledger holds (its own and its peers'), from each one's
/// admin listener at `urls`.
async fn booking_counts(http: &reqwest::Client, urls: &[String]) -> Vec<u64> {
    let mut out = Vec::new();
    for url in urls {
        let state = get_json(http, &format!("{url}/debug/state")).await.unwrap();
        out.push(
            router_snapshots(&state)
                .iter()
                .map(|r| r["scheduler"]["ledger"]["bookings"].as_u64().unwrap_or(0))
                .sum(),
        );
    }
    out
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
    let admin_urls: Vec<String> = cluster
        .replicas
        .iter()
        .map(|r| r.admin_url().to_owned())
        .collect();
    let http = reqwest::Client::new();

    let (stop, load) = clients(&url, CLIENTS, 4);
    tokio::time::sleep(Duration::from_secs(2)).await;

    cluster.nats.stop();
    let outage_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (status, body) in ready_bodies(&http, &replica_urls).await {
        assert_eq!(status, 200, "a replica without NATS stays ready: {body}");
        assert_eq!(body["bus"], "disconnected", "{body}");
    }
    // Cut off, each replica sees only its own new bookings (and keeps its peers' last ones).
    let apart = booking_counts(&http, &admin_urls).await;
    println!("bookings each replica's ledger holds, 3 s into the outage: {apart:?}");
    tokio::time::sleep(OUTAGE - Duration::from_secs(3)).await;
    cluster.nats.restart().await.unwrap();
    let outage_to = Instant::now();

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let bodies = ready_bodies(&http, &replica_urls).await;
        if bodies
            .iter()
            .all(|(s, b)| *s == 200 && b["bus"] == "connected")
        {
            break;
        }
        assert!(Instant::now() < deadline, "not reconnected: {bodies:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Resynchronised: every replica's ledger holds the same bookings (give or take the
    // requests whose deltas are in flight, at most one per client), sampled every 100 ms.
    let reconnected = Instant::now();
    let agreed = loop {
        let counts = booking_counts(&http, &admin_urls).await;
        let spread = counts.iter().max().unwrap() - counts.iter().min().unwrap();
        if spread <= CLIENTS as u64 {
            break reconnected.elapsed();
        }
        assert!(
            reconnected.elapsed() < Duration::from_secs(15),
            "views still apart: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!("ledgers agreed {agreed:?} after every replica said the bus was connected");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let run = finish(stop, load).await;
    let (ok, failed, during) = (
        run.ok_count(),
        run.failures.len(),
        run.ok_between(outage_from, outage_to),
    );
    let failures = &run.failures;
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
    cluster.stop_cleanly();
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
    // Each process is signalled in turn; none has a request in flight, so each drains at
    // once, and the goodbye waits at most 1 s for a bus that is gone.
    assert!(took < Duration::from_secs(20), "{took:?}");
}
