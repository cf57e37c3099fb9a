//! A replica killed under load, as an operator would see it (`faults::Scenario::ReplicaKill`,
//! the same run as `cluster-faults --scenario replica-kill`): three `serve` replicas and three
//! simulated workers behind a real HAProxy, `router-tools bench` sending 40 requests/s through
//! it; one replica gets SIGKILL. Only requests in flight at the kill may fail (their
//! connections cut); none sent after HAProxy saw it down fails (a refused connection is
//! retried on another replica); the survivors drop it and its bookings within its 3 s lease
//! and end idle.

use switchyard_system_tests::faults::{FaultOptions, Scenario, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_fails_only_its_in_flight_requests() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let report = run(Scenario::ReplicaKill, &FaultOptions::ci()).await;
    println!("{}", report.render());
    assert!(
        report.broken().is_empty(),
        "{}\n{}",
        report.render(),
        report.outputs.as_deref().unwrap_or_default()
    );
    assert_eq!(report.replicas.len(), 2, "the two survivors were read");
    let [_, _, after] = report.phases();
    assert!(
        after.1.ok > 0 && after.1.ok == after.1.sent,
        "{}",
        report.render()
    );
}
