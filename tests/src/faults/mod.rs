//! Issue #11's fault scenarios, shared by the CI tests (`tests/tests/fleet/cluster_*.rs`) and the
//! `cluster-faults` command: a fleet from the cluster harness (a real nats-server, N `serve`
//! replicas, M simulated aggregated workers, HAProxy), load from `router-tools bench` as a
//! separate process (constant-rate synthetic load through HAProxy, `--per-request`), the
//! scenario's faults injected on a timeline (`inject.rs`), then every surviving replica's
//! `/debug/state` and `/metrics` read, and the requests cut into phases by send time with the
//! scenario's promises checked (`report.rs`).
//!
//! Timeline: bench starts; after `before` the fault begins; the fault's window ends when the
//! fleet is whole again (see [`Scenario`]); the load goes on for `after`, then bench gets
//! SIGTERM (it stops sending and lets its requests finish) and its JSON is read.

mod inject;
pub mod report;

pub use report::{FaultReport, PhaseCounts, Promise, ReplicaEnd, Sent};

use crate::support::observe::metric_sum;
use crate::support::process::{Proc, START_TIMEOUT};
use crate::support::{Cluster, ClusterBuilder, Role, TempDir};
use std::time::{Duration, Instant, SystemTime};

/// A fault and its promise (docs/runtime-semantics.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The nats-server is killed for `outage`, then started again on its port. The fault
    /// lasts from the kill to the restart. Promise: no request fails or is shed; every
    /// replica says its bus is disconnected, then connected; the ledgers agree within a
    /// second of the last reconnect.
    NatsOutage,
    /// Replica 1 gets SIGKILL. The fault lasts until HAProxy sees it down. Promise: only
    /// requests in flight at the kill fail; none sent after HAProxy saw it down; the survivors
    /// drop it (and its bookings) within its 3 s lease.
    ReplicaKill,
    /// Worker 1 gets SIGKILL. The fault lasts until every replica dropped it. Promise: only
    /// requests in flight on it at the kill fail (streams cut with an error); a request placed
    /// on it later is placed again elsewhere, so none sent after the kill fails.
    WorkerKill,
    /// Every replica in turn gets SIGTERM, exits and is started again on its address, the next
    /// once HAProxy sees it up. The fault lasts from the first SIGTERM to the last replica up.
    /// Promise: no request fails or is shed; every replica exits 0.
    RollingRestart,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Self::NatsOutage,
        Self::ReplicaKill,
        Self::WorkerKill,
        Self::RollingRestart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::NatsOutage => "nats-outage",
            Self::ReplicaKill => "replica-kill",
            Self::WorkerKill => "worker-kill",
            Self::RollingRestart => "rolling-restart",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// The fleet and the load of a run.
#[derive(Debug, Clone)]
pub struct FaultOptions {
    pub replicas: usize,
    pub workers: usize,
    /// Requests per second bench sends through HAProxy.
    pub rate: f64,
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    /// The workers' `--speedup`.
    pub speedup: f64,
    /// Load before the fault.
    pub before: Duration,
    /// Load after the fault's window.
    pub after: Duration,
    /// How long NATS stays down (`nats-outage`).
    pub outage: Duration,
}

impl Default for FaultOptions {
    /// What `cluster-faults` runs unless told otherwise.
    fn default() -> Self {
        Self {
            replicas: 3,
            workers: 4,
            rate: 40.0,
            prompt_tokens: 64,
            max_tokens: 16,
            speedup: 10.0,
            before: Duration::from_secs(3),
            after: Duration::from_secs(3),
            outage: Duration::from_secs(10),
        }
    }
}

impl FaultOptions {
    /// The CI tests' runs: as the command's, with shorter phases around the fault.
    pub fn ci() -> Self {
        Self {
            workers: 3,
            before: Duration::from_secs(2),
            after: Duration::from_secs(2),
            ..Self::default()
        }
    }

    fn setup(&self, scenario: Scenario) -> String {
        let mut s = format!(
            "{} replicas, {} simulated workers (speedup {}) behind HAProxy; router-tools bench \
             sends {} req/s ({} prompt tokens, {} output tokens)",
            self.replicas,
            self.workers,
            self.speedup,
            self.rate,
            self.prompt_tokens,
            self.max_tokens
        );
        if scenario == Scenario::NatsOutage {
            s.push_str(&format!("; NATS down for {:?}", self.outage));
        }
        s
    }
}

/// The fault's window and what the timeline measured.
#[derive(Debug, Default)]
pub(crate) struct Window {
    pub from: Option<SystemTime>,
    pub to: Option<SystemTime>,
    pub recovery: Vec<(String, Duration)>,
    pub notes: Vec<String>,
    /// Promises the timeline checked itself.
    pub promises: Vec<Promise>,
}

/// Runs `scenario` on a fresh fleet and reports it.
pub async fn run(scenario: Scenario, opts: &FaultOptions) -> FaultReport {
    assert!(
        opts.replicas >= 2,
        "a fault scenario needs 2 replicas or more"
    );
    assert!(
        opts.workers >= 2,
        "a fault scenario needs 2 workers or more"
    );
    let mut cluster = ClusterBuilder::new()
        .replicas(opts.replicas)
        .workers(Role::Agg, opts.workers, 4096)
        .speedup(opts.speedup)
        // HAProxy marks a replica down after 2 failed checks 200 ms apart.
        .http_extra("shutdown_delay_ms = 1000")
        .start()
        .await;
    cluster.wait_ready(Duration::from_secs(60)).await;
    let dir = TempDir::new("faults");
    let json = dir.path().join("bench.json");
    let bench = start_bench(&cluster.url(), opts, &json);

    tokio::time::sleep(opts.before).await;
    let window = inject::run(scenario, &mut cluster, opts).await;
    tokio::time::sleep(opts.after).await;
    let stopped = tokio::task::spawn_blocking(move || bench.stop())
        .await
        .expect("bench stopped");
    let load_stopped = Instant::now();
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!(
            "bench wrote no result ({e}), exit {:?}:\n{}",
            stopped.code, stopped.stderr
        )
    });
    let value: serde_json::Value = serde_json::from_str(&text).expect("bench's JSON");
    let requests = report::parse_bench(&value).expect("bench's records");
    let origin_ms = value["started_unix_ms"].as_f64().unwrap_or(0.0);

    let idle_after = cluster
        .wait_ledgers_idle(Duration::from_secs(15))
        .await
        .ok()
        .map(|()| load_stopped.elapsed());
    let replicas = end_states(&cluster).await;
    let fault_ms = (
        window.from.map_or(origin_ms, report::unix_ms),
        window.to.map_or(origin_ms, report::unix_ms),
    );
    let mut report = FaultReport {
        scenario: scenario.name().to_owned(),
        setup: opts.setup(scenario),
        origin_ms,
        fault_ms,
        requests,
        recovery: window.recovery,
        notes: window.notes,
        replicas,
        idle_after,
        promises: window.promises,
        outputs: None,
    };
    inject::judge(scenario, &mut report);
    report.promise(
        "bench ran to its stop",
        stopped.code == Some(0),
        format!("exit {:?}", stopped.code),
    );
    report.promise(
        "every surviving ledger ends with no booking, no reservation, an empty queue",
        idle_after.is_some(),
        format!("{} replicas read", report.replicas.len()),
    );
    if !report.broken().is_empty() {
        report.outputs = Some(cluster.outputs());
    }
    let exits = tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("the fleet stopped");
    let bad: Vec<String> = exits
        .iter()
        .filter(|(name, s)| name != "haproxy" && s.code != Some(0))
        .map(|(name, s)| format!("{name}: {:?}", s.code))
        .collect();
    report.promise(
        "every process exits 0 at SIGTERM at the end",
        bad.is_empty(),
        if bad.is_empty() {
            format!("{} processes", exits.len())
        } else {
            bad.join(", ")
        },
    );
    report
}

/// `router-tools bench` through `url`: synthetic load until SIGTERM, every request recorded
/// in `json`. Returns once it has started sending.
fn start_bench(url: &str, opts: &FaultOptions, json: &std::path::Path) -> Proc {
    let (rate, prompt, out) = (
        opts.rate.to_string(),
        opts.prompt_tokens.to_string(),
        opts.max_tokens.to_string(),
    );
    let json = json.to_string_lossy().into_owned();
    let mut bench = Proc::spawn_tools(
        "bench",
        &[
            "bench",
            "--url",
            url,
            "--rate",
            &rate,
            "--prompt-tokens",
            &prompt,
            "--max-output-tokens",
            &out,
            "--timeout-secs",
            "30",
            "--json",
            &json,
            "--per-request",
        ],
    );
    bench.wait_for(START_TIMEOUT, |line| {
        line.starts_with("bench: started").then_some(())
    });
    bench
}

/// Each surviving replica's ledgers and retries, from its `/debug/state` and `/metrics`.
async fn end_states(cluster: &Cluster) -> Vec<ReplicaEnd> {
    let totals = cluster.ledger_totals().await;
    let metrics = cluster.metrics().await;
    totals
        .into_iter()
        .zip(metrics)
        .enumerate()
        .map(|(i, (totals, metrics))| {
            let (bookings, reservations, queued) = totals.unwrap_or((u64::MAX, u64::MAX, u64::MAX));
            ReplicaEnd {
                name: format!("replica {i}"),
                bookings,
                reservations,
                queued,
                retries: metrics
                    .ok()
                    .and_then(|m| metric_sum(&m, "switchyard_http_retries_total"))
                    .unwrap_or(0.0),
            }
        })
        .collect()
}
