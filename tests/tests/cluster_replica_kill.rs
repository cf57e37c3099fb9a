//! A replica killed under load, as an operator would see it: three `serve` replicas and two
//! simulated workers behind a real HAProxy, four clients sending requests back to back; one
//! replica gets SIGKILL. Only requests in flight on it may fail (at most one per client); no
//! request sent after HAProxy saw it down fails (a refused connection is retried on another
//! replica); the survivors drop its bookings within its lease and end idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use switchyard_system_tests::support::load::{clients, finish};
use switchyard_system_tests::support::{ClusterBuilder, Role};
use tokio::time::Instant;

const CLIENTS: usize = 4;

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
    let (stop, load) = clients(&url, CLIENTS, 24);
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
    let run = finish(stop, load).await;
    let (ok, failures) = (run.ok_count(), run.failures);
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
    cluster.stop_cleanly();
}
