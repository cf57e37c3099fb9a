//! A rolling restart under load, as an operator would run one: three `serve` replicas and two
//! simulated workers behind a real HAProxy, four clients sending requests back to back; each
//! replica in turn gets SIGTERM (its `/ready` turns false, it keeps serving for
//! `http.shutdown_delay_ms` while HAProxy's checks notice, then it drains and says goodbye),
//! exits 0, and is started again on the same address; the next one goes once HAProxy sees it
//! up. Not one request fails, and every ledger ends idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use switchyard_system_tests::support::load::{clients, finish};
use switchyard_system_tests::support::{ClusterBuilder, Role};
use tokio::time::Instant;

const CLIENTS: usize = 4;

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
    let (stop, load) = clients(&url, CLIENTS, 16);
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
    let run = finish(stop, load).await;
    let (ok, failures) = (run.ok_count(), run.failures);
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
    cluster.stop_cleanly();
}
