//! The whole-system tests that bring up a fleet (a nats-server, `serve` replicas, simulated
//! workers, HAProxy), one test binary (each module was a binary of its own): the cluster
//! harness, issue #15's burst, issue #11's fault scenarios, the metrics reference and the
//! Grafana dashboard against live nodes, and `bench` through a `serve` node.
//!
//! Every test holds [`one_fleet_at_a_time`] for its whole run, so the fleets run one after
//! another, as they did when each file was a binary of its own: two at once on a 2-core
//! machine would measure each other (a burst's peak, a fault's timeline). The lighter tests
//! (command lines, one node or a small fleet) are the `system` binary, which runs them side by
//! side.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bench_serve;
mod cluster;
mod cluster_burst;
mod cluster_harness;
mod cluster_nats_outage;
mod cluster_replica_kill;
mod cluster_rolling_restart;
mod cluster_worker_kill;
mod dashboard_metrics;
mod metrics_doc;

static ONE_FLEET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Taken first by every test of this binary and held until it ends (a tokio lock: a test that
/// fails does not poison it for the next).
async fn one_fleet_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_FLEET.lock().await
}
