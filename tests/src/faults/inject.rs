//! Each scenario's timeline ([`run`]: the fault injected into a running fleet, the fleet
//! watched until it is whole again) and its promises about the requests ([`judge`]: which
//! may fail and which may not, by send time against the fault).

use super::report::{FaultReport, Promise};
use super::{FaultOptions, Scenario, Window};
use crate::support::Cluster;
use std::time::{Duration, Instant, SystemTime};

/// How often the timeline polls the fleet.
const POLL: Duration = Duration::from_millis(50);

/// The peers' lease (`peer_sync.lease_ms`, 3 s by default): a killed replica's bookings go
/// within it (plus a heartbeat's check).
const PEER_LEASE: Duration = Duration::from_secs(3);

/// Injects `scenario`'s fault and follows the fleet until it is whole again.
pub(super) async fn run(scenario: Scenario, cluster: &mut Cluster, opts: &FaultOptions) -> Window {
    match scenario {
        Scenario::NatsOutage => nats_outage(cluster, opts).await,
        Scenario::ReplicaKill => replica_kill(cluster).await,
        Scenario::WorkerKill => worker_kill(cluster).await,
        Scenario::RollingRestart => rolling_restart(cluster).await,
    }
}

fn promise(what: &str, kept: bool, detail: String) -> Promise {
    Promise {
        what: what.to_owned(),
        kept,
        detail,
    }
}

/// Polls `check` every [`POLL`] until it gives a value or `limit` passes.
async fn poll<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn nats_outage(cluster: &mut Cluster, opts: &FaultOptions) -> Window {
    let mut w = Window::default();
    cluster.nats.stop();
    let down = Instant::now();
    w.from = Some(SystemTime::now());
    tokio::time::sleep(opts.outage.min(Duration::from_secs(3))).await;
    let bodies = cluster.ready_bodies().await;
    let all_say = bodies
        .iter()
        .all(|(status, body)| *status == 200 && body["bus"] == "disconnected");
    w.promises.push(promise(
        "during the outage every replica stays ready and says its bus is disconnected",
        all_say,
        format!("{bodies:?}"),
    ));
    let apart = cluster.ledger_totals().await;
    w.notes.push(format!(
        "bookings each replica held 3 s into the outage: {:?}",
        apart
            .iter()
            .map(|t| t.as_ref().map_or(u64::MAX, |t| t.0))
            .collect::<Vec<_>>()
    ));
    tokio::time::sleep(opts.outage.saturating_sub(down.elapsed())).await;
    let restarted = cluster.nats.restart().await;
    w.to = Some(SystemTime::now());
    let back = Instant::now();
    if let Err(e) = restarted {
        w.promises
            .push(promise("NATS restarted on its port", false, e.to_string()));
        return w;
    }
    let connected = poll(Duration::from_secs(20), || async {
        let bodies = cluster.ready_bodies().await;
        bodies
            .iter()
            .all(|(s, b)| *s == 200 && b["bus"] == "connected")
            .then_some(())
    })
    .await;
    w.promises.push(promise(
        "every replica says its bus is connected again",
        connected.is_some(),
        format!("within 20 s: {}", connected.is_some()),
    ));
    let reconnected = Instant::now();
    w.recovery.push((
        "every replica's /ready said \"bus\": \"connected\" after NATS was back".into(),
        back.elapsed(),
    ));
    // Agreement: every replica's ledger holds the same bookings, give or take those whose
    // deltas are on their way (a tenth of a second of load).
    let tolerance = 4.max((opts.rate / 10.0).ceil() as u64);
    let agreed = poll(Duration::from_secs(15), || async {
        let counts: Vec<u64> = cluster
            .ledger_totals()
            .await
            .into_iter()
            .map(|t| t.map_or(u64::MAX, |t| t.0))
            .collect();
        let spread = counts.iter().max()? - counts.iter().min()?;
        (spread <= tolerance).then_some(())
    })
    .await;
    let took = reconnected.elapsed();
    w.recovery.push((
        "then the ledgers agreed (bookings within the requests in flight)".into(),
        took,
    ));
    w.promises.push(promise(
        "after the reconnect the ledgers agree within a second",
        agreed.is_some() && took <= Duration::from_secs(1),
        format!(
            "{:.3} s, tolerance {tolerance} bookings",
            took.as_secs_f64()
        ),
    ));
    w
}

async fn replica_kill(cluster: &mut Cluster) -> Window {
    let mut w = Window::default();
    let killed_at = Instant::now();
    w.from = Some(SystemTime::now());
    let killed = cluster.replicas.remove(1).kill();
    w.notes.push(format!(
        "replica 1 killed (exit {:?}); the survivors are listed in order",
        killed.code
    ));
    let Some(haproxy) = cluster.haproxy.as_ref() else {
        w.to = w.from;
        return w;
    };
    let http = reqwest::Client::new();
    let down = poll(Duration::from_secs(10), || async {
        let servers = haproxy.servers(&http).await.ok()?;
        (servers.get(1)?.status == "DOWN").then_some(())
    })
    .await;
    w.to = Some(SystemTime::now());
    w.recovery.push((
        "HAProxy saw the killed replica down".into(),
        killed_at.elapsed(),
    ));
    w.promises.push(promise(
        "HAProxy takes the killed replica out",
        down.is_some(),
        format!("within 10 s: {}", down.is_some()),
    ));
    let peers = cluster.replicas.len() - 1;
    let dropped = poll(Duration::from_secs(15), || async {
        let members = cluster.membership().await;
        members
            .iter()
            .all(|m| m.is_some_and(|(p, _)| p == peers))
            .then_some(())
    })
    .await;
    let took = killed_at.elapsed();
    w.recovery
        .push(("every survivor dropped it and its bookings".into(), took));
    w.promises.push(promise(
        "the survivors drop its bookings within its lease",
        dropped.is_some() && took <= PEER_LEASE + Duration::from_millis(1500),
        format!(
            "{:.3} s (lease {:?} + a heartbeat's check)",
            took.as_secs_f64(),
            PEER_LEASE
        ),
    ));
    w
}

async fn worker_kill(cluster: &mut Cluster) -> Window {
    let mut w = Window::default();
    let killed_at = Instant::now();
    w.from = Some(SystemTime::now());
    let worker = cluster.workers.remove(0);
    let id = worker.id;
    let killed = worker.proc.kill();
    w.notes
        .push(format!("worker {id} killed (exit {:?})", killed.code));
    let left = cluster.workers.len();
    let dropped = poll(Duration::from_secs(20), || async {
        let members = cluster.membership().await;
        members
            .iter()
            .all(|m| m.is_some_and(|(_, workers)| workers == left))
            .then_some(())
    })
    .await;
    w.to = Some(SystemTime::now());
    w.recovery.push((
        "every replica dropped the worker from its registry".into(),
        killed_at.elapsed(),
    ));
    w.promises.push(promise(
        "every replica drops the killed worker",
        dropped.is_some(),
        format!("within 20 s: {}", dropped.is_some()),
    ));
    w
}

async fn rolling_restart(cluster: &mut Cluster) -> Window {
    let mut w = Window::default();
    let started = Instant::now();
    w.from = Some(SystemTime::now());
    let http = reqwest::Client::new();
    let mut exits = Vec::new();
    for i in 0..cluster.replicas.len() {
        let one = Instant::now();
        let replica = cluster.replicas.remove(i);
        let name = format!("replica {i} (restarted)");
        let (stopped, restarted) = tokio::task::spawn_blocking(move || replica.restart(&name))
            .await
            .expect("restarted");
        exits.push(stopped.code);
        cluster.replicas.insert(i, restarted);
        let Some(haproxy) = cluster.haproxy.as_ref() else {
            continue;
        };
        let up = poll(Duration::from_secs(20), || async {
            let servers = haproxy.servers(&http).await.ok()?;
            servers.get(i)?.checked_up().then_some(())
        })
        .await;
        w.recovery.push((
            format!("replica {i} stopped, started and seen up by HAProxy"),
            one.elapsed(),
        ));
        if up.is_none() {
            w.promises.push(promise(
                "HAProxy sees every restarted replica up",
                false,
                format!("replica {i}"),
            ));
        }
    }
    w.to = Some(SystemTime::now());
    w.recovery
        .push(("the whole rolling restart".into(), started.elapsed()));
    w.promises.push(promise(
        "every replica exits 0 at SIGTERM",
        exits.iter().all(|c| *c == Some(0)),
        format!("{exits:?}"),
    ));
    w
}

/// The scenario's promises about the requests.
pub(super) fn judge(scenario: Scenario, report: &mut FaultReport) {
    let (from, to) = report.fault_ms;
    let failed: Vec<_> = report
        .requests
        .iter()
        .filter(|r| r.failed() || r.shed())
        .cloned()
        .collect();
    let sent = report.requests.len();
    let count = |pred: &dyn Fn(&super::Sent) -> bool| failed.iter().filter(|r| pred(r)).count();
    match scenario {
        Scenario::NatsOutage | Scenario::RollingRestart => {
            let what = if scenario == Scenario::NatsOutage {
                "no request fails or is shed because of the outage"
            } else {
                "no request fails or is shed during the rolling restart"
            };
            report.promise(
                what,
                failed.is_empty(),
                format!("{} of {sent}", failed.len()),
            );
            let [_, during, _] = report.phases();
            report.promise(
                "requests keep flowing during the fault",
                during.1.ok > 0 && during.1.ok == during.1.sent,
                format!("{} of {} ok", during.1.ok, during.1.sent),
            );
        }
        Scenario::ReplicaKill | Scenario::WorkerKill => {
            // A request sent within this of the kill (taken just before the signal) may still
            // have reached the victim before it died.
            let grace = 100.0;
            let late = count(&|r| r.at_ms > from + grace && !r.in_flight_at(from));
            let not_in_flight = count(&|r| !r.in_flight_at(from) && r.at_ms <= from);
            report.promise(
                "only requests in flight at the kill fail",
                late == 0 && not_in_flight == 0,
                format!(
                    "{} failed: {late} sent after the kill, {not_in_flight} finished before it",
                    failed.len()
                ),
            );
            if scenario == Scenario::ReplicaKill {
                let after_down = count(&|r| r.at_ms >= to);
                report.promise(
                    "no request sent after HAProxy saw the replica down fails",
                    after_down == 0,
                    format!("{after_down}"),
                );
            }
            let shed = failed.iter().filter(|r| r.shed()).count();
            report.promise("no request is shed", shed == 0, format!("{shed}"));
            if scenario == Scenario::WorkerKill {
                let retries: f64 = report.replicas.iter().map(|r| r.retries).sum();
                report.notes.push(format!(
                    "requests placed again after a refused connection: {retries}"
                ));
            }
        }
    }
}
