//! A worker killed under load, as an operator would see it: three `serve` replicas and three
//! simulated workers behind a real HAProxy, four clients sending requests back to back; one
//! worker gets SIGKILL. Only requests in flight on it may fail (at most one per client, their
//! streams cut); a request placed on it afterwards, before the replicas drop it, is refused
//! and placed again on another worker, so none sent after the kill fails; every ledger ends
//! idle (the cut requests' bookings are released).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use switchyard_system_tests::support::load::{clients, finish};
use switchyard_system_tests::support::{ClusterBuilder, Role};
use tokio::time::Instant;

const CLIENTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_fails_only_its_in_flight_requests() {
    let mut cluster = ClusterBuilder::new()
        .replicas(3)
        .workers(Role::Agg, 3, 4096)
        .speedup(10.0)
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    let url = cluster.url();
    let (stop, load) = clients(&url, CLIENTS, 24);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let killed_at = Instant::now();
    let killed = cluster.workers.remove(0).proc.kill();
    assert_eq!(killed.code, None, "killed by a signal");
    // Its streams break; requests placed on it before the replicas drop it are refused and
    // placed again on another worker.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let run = finish(stop, load).await;
    let (ok, failures) = (run.ok_count(), run.failures);
    let late: Vec<&(Instant, String)> = failures
        .iter()
        .filter(|(sent, _)| sent.duration_since(killed_at) > Duration::from_millis(100))
        .collect();
    println!(
        "worker killed: {ok} requests ok, {} failed: {:?}",
        failures.len(),
        failures.iter().map(|(_, e)| e).collect::<Vec<_>>()
    );
    assert!(
        late.is_empty(),
        "requests sent after the kill failed: {late:?}"
    );
    assert!(
        failures.len() <= CLIENTS,
        "only requests in flight on the killed worker fail (one per client at most): {failures:?}"
    );
    cluster
        .wait_ledgers_idle(Duration::from_secs(15))
        .await
        .unwrap();
    cluster.stop_cleanly();
}
