//! A rolling restart under load, as an operator would run one (`faults::Scenario::
//! RollingRestart`, the same run as `cluster-faults --scenario rolling-restart`): three
//! `serve` replicas and three simulated workers behind a real HAProxy, `router-tools bench`
//! sending 40 requests/s through it; each replica in turn gets SIGTERM (its `/ready` turns
//! false, it keeps serving for `http.shutdown_delay_ms` while HAProxy's checks notice, then
//! it drains and says goodbye), exits 0, and is started again on the same address; the next
//! one goes once HAProxy sees it up. Not one request fails or is shed, and every ledger ends
//! idle.

use switchyard_system_tests::faults::{FaultOptions, Scenario, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_replica_under_load_fails_no_request() {
    let _fleet = crate::one_fleet_at_a_time().await;
    let report = run(Scenario::RollingRestart, &FaultOptions::ci()).await;
    println!("{}", report.render());
    assert!(
        report.broken().is_empty(),
        "{}\n{}",
        report.render(),
        report.outputs.as_deref().unwrap_or_default()
    );
    assert!(report.failures().is_empty(), "{}", report.render());
}
