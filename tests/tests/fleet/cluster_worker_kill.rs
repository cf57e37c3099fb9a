//! A worker killed under load, as an operator would see it (`faults::Scenario::WorkerKill`,
//! the same run as `cluster-faults --scenario worker-kill`): three `serve` replicas and three
//! simulated workers behind a real HAProxy, `router-tools bench` sending 40 requests/s through
//! it; one worker gets SIGKILL. Only requests in flight on it at the kill fail (their streams
//! end with an error event); a request placed on it afterwards, before the replicas drop it,
//! is refused and placed again on another worker, so none sent after the kill fails; every
//! replica drops the worker; every ledger ends idle; every process exits 0.

use switchyard_system_tests::faults::{FaultOptions, Scenario, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_fails_only_its_in_flight_requests() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let report = run(Scenario::WorkerKill, &FaultOptions::ci()).await;
    println!("{}", report.render());
    assert!(
        report.broken().is_empty(),
        "{}\n{}",
        report.render(),
        report.outputs.as_deref().unwrap_or_default()
    );
    // Requests went on through the whole run, the fault included.
    let [_, during, after] = report.phases();
    assert!(during.1.ok > 0 && after.1.ok > 0, "{}", report.render());
}
