//! Issue #15's burst through the cluster harness: a disaggregated fleet over a real
//! nats-server (2 prefill, 2 decode simulated workers, decode KV 1,024 blocks each, speedup
//! 10), one class holding decode KV to half (512 blocks per decode worker), 120 concurrent
//! streaming requests of 1,000 unique prompt tokens and 200 output tokens sent all at once
//! through a real HAProxy, the decode workers' own KV use sampled every 20 ms.
//!
//! With 1 replica the fraction holds (overshoot ≤ 1 % of capacity). With 3 replicas each
//! admits against a view that does not yet hold the others' reservations, so today a burst
//! overshoots (up to ~27 % of capacity measured): the test records and prints the figures
//! and asserts the bound only when [`THREE_REPLICAS_HOLD_THE_BOUND`] is true (set it once
//! the one-gate design lands) or `SWITCHYARD_ENFORCE_ONE_GATE=1`. Both always assert that
//! every request completed and every ledger returned to idle.
//!
//! The bursts run one at a time (a lock): two at once on a 2-core machine would measure
//! each other. `cargo run -p switchyard-system-tests --bin cluster-burst` runs the same
//! burst many times with a report.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use switchyard_system_tests::burst::{BurstReport, BurstSpec, run_burst};

/// Whether 3 replicas must keep the overshoot within the bound (issue #15): false until the
/// replicas admit as one gate.
const THREE_REPLICAS_HOLD_THE_BOUND: bool = false;
/// Set to 1 to enforce the 3-replica bound without changing [`THREE_REPLICAS_HOLD_THE_BOUND`].
const ENFORCE_ENV: &str = "SWITCHYARD_ENFORCE_ONE_GATE";

/// The 1-replica peak must reach at least this share of the limit: a fleet that admits far
/// below its line (or a sampler that saw nothing) is not holding it, it is idle.
const MIN_ONE_REPLICA_UTILISATION: f64 = 0.5;

const READY: Duration = Duration::from_secs(60);

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts the fleet with `replicas`, sends one burst, checks completion and idle ledgers,
/// stops every process cleanly, and returns the figures.
async fn burst(replicas: usize) -> (BurstSpec, BurstReport) {
    let _serial = ONE_AT_A_TIME.lock().await;
    let spec = BurstSpec {
        replicas,
        ..BurstSpec::default()
    };
    let cluster = spec.cluster().start().await;
    cluster.wait_ready(READY).await;
    let report = run_burst(&cluster, &spec, 1).await;
    println!(
        "burst, {replicas} replica(s): peak decode KV {} of {} (limit {}), over the limit {} \
         blocks = {:.1} % of capacity, utilisation {:.2}, {}/{} ok, requests per replica {:?}, \
         {} decode preemptions, {} samples, {:.1} s",
        report.peaks_text(),
        report.capacity,
        report.limit,
        report.overshoot_blocks(),
        report.overshoot_pct(),
        report.utilisation(),
        report.ok,
        report.sent,
        report.per_replica,
        report.preemptions,
        report.samples,
        report.wall.as_secs_f64(),
    );
    println!("{}", report.to_json());
    assert_eq!(
        report.ok,
        report.sent,
        "every request completes: {:?}\n{}",
        report.failures,
        cluster.outputs()
    );
    if let Err(held) = &report.ledgers_idle {
        panic!("every ledger returns to idle: {held}");
    }
    assert!(
        report.samples >= 10 && report.sample_misses * 10 <= report.samples,
        "the decode workers' /load was read through the burst (at most 1 read in 10 missed): \
         {report:?}"
    );
    assert_eq!(
        report.per_replica.iter().filter(|n| **n > 0).count(),
        replicas,
        "HAProxy spread the burst over every replica: {:?}",
        report.per_replica
    );
    for (name, stopped) in cluster.stop() {
        if name != "haproxy" {
            assert_eq!(stopped.code, Some(0), "{name}: {}", stopped.stderr);
        }
    }
    (spec, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_holds_the_decode_fraction_under_a_burst() {
    let (spec, report) = burst(1).await;
    assert!(
        report.overshoot_blocks() <= spec.bound_blocks(),
        "1 replica: peak {} over the limit {} by more than {} blocks",
        report.peaks_text(),
        report.limit,
        spec.bound_blocks()
    );
    assert!(
        report.utilisation() >= MIN_ONE_REPLICA_UTILISATION,
        "1 replica: peak {} is under {MIN_ONE_REPLICA_UTILISATION} of the limit {}",
        report.peaks_text(),
        report.limit
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_haproxy_burst_and_every_request_completes() {
    let (spec, report) = burst(3).await;
    let enforce =
        THREE_REPLICAS_HOLD_THE_BOUND || std::env::var(ENFORCE_ENV).is_ok_and(|v| v == "1");
    if enforce {
        assert!(
            report.overshoot_blocks() <= spec.bound_blocks(),
            "3 replicas: peak {} over the limit {} by more than {} blocks (issue #15)",
            report.peaks_text(),
            report.limit,
            spec.bound_blocks()
        );
    } else {
        println!(
            "3 replicas: the {}-block bound is not enforced yet (issue #15; \
             THREE_REPLICAS_HOLD_THE_BOUND or {ENFORCE_ENV}=1); overshoot {} blocks",
            spec.bound_blocks(),
            report.overshoot_blocks()
        );
    }
}
