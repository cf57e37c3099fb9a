//! A NATS outage under load, as an operator would see it (`faults::Scenario::NatsOutage`, the
//! same run as `cluster-faults --scenario nats-outage`): three `serve` replicas and three
//! simulated workers on a real nats-server behind a real HAProxy; `router-tools bench` sends
//! 40 requests/s through HAProxy; the nats-server is killed for 10 s (longer than the peers'
//! lease and the workers' lease) and started again on its port. No request fails because of
//! the outage: replicas keep the workers and peers they knew, `/ready` stays 200 and says the
//! bus is disconnected; when NATS is back every replica says so again and their ledgers agree
//! within a second; every ledger ends idle. And: SIGTERM to every process while NATS is down
//! stops each with exit 0.

use std::time::Duration;
use switchyard_system_tests::faults::{FaultOptions, Scenario, run};
use switchyard_system_tests::support::{ClusterBuilder, Role};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_second_nats_outage_under_load_fails_no_request() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let report = run(Scenario::NatsOutage, &FaultOptions::ci()).await;
    println!("{}", report.render());
    assert!(
        report.broken().is_empty(),
        "{}\n{}",
        report.render(),
        report.outputs.as_deref().unwrap_or_default()
    );
    let [_, during, _] = report.phases();
    assert!(
        during.1.ok >= 100,
        "requests kept flowing during the outage: {}",
        report.render()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_exits_cleanly_at_sigterm_while_nats_is_down() {
    let _fleet = crate::one_fleet_at_a_time().await;
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
