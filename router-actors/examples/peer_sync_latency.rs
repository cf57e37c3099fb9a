//! Peer-sync latency benchmark: how long after router A books or releases does router B's
//! ledger hold the change (DESIGN goal: views agree within 100 ms p99 at 10 k bookings/s).
//!
//! One process: a real nats-server (testkit), two aggregated Nodes on it (fallback profile:
//! never queues), a few simulated workers announced through `WorkerLink` with KV far larger
//! than the load. Bookings are driven on A at a fixed open-loop rate: every tick of a
//! `tokio::time::interval` (`MissedTickBehavior::Burst`) spawns one request that is routed
//! through A's RouterActor (`RouterHandle::route`) and released `--hold-ms` later. Each
//! admission and each release is one delta on the real path: A's RouterActor → its
//! PeerSyncActor → NATS → B's PeerSyncActor → B's RouterActor, which records the lag from the
//! envelope's `sent_at_us` to the delta's application in its ledger (`peer_lag_us`).
//!
//! ```text
//! cargo run --release -p router-actors --example peer_sync_latency -- --rate 10000 --seconds 5
//! ```
//!
//! Options: `--rate` bookings/s (1000), `--seconds` (5), `--hold-ms` (20), `--workers` (4),
//! `--blocks` KV blocks per prompt (2). nats-server: `$NATS_SERVER_BIN`, `.tools/nats`, `PATH`.
//! Both nodes and the server share the machine's cores; the CPU each used is printed.

use hdrhistogram::Histogram;
use router_actors::bus::Bus;
use router_actors::bus::nats::NatsBus;
use router_actors::router::RouteError;
use router_actors::testkit::NatsServer;
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{LagSummary, Node, NodeConfig, PeerSyncConfig, RouterHandle, Topology};
use router_actors::{WorkerLink, peer_sync::PeerSyncSnapshot};
use router_core::{
    Phase, PolicyProfile, PoolRole, Prompt, RequestId, RouteRequest, RouterId, WorkerSpec,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};

const CLUSTER: &str = "bench";

#[derive(Debug, Clone)]
struct Args {
    rate: u64,
    seconds: u64,
    hold_ms: u64,
    workers: u64,
    blocks: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        rate: 1000,
        seconds: 5,
        hold_ms: 20,
        workers: 4,
        blocks: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--rate" => args.rate = number(&value)?.max(1),
            "--seconds" => args.seconds = number(&value)?.max(1),
            "--hold-ms" => args.hold_ms = number(&value)?,
            "--workers" => args.workers = number(&value)?.max(1),
            "--blocks" => {
                args.blocks = u32::try_from(number(&value)?.max(1)).map_err(|e| e.to_string())?
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

fn node_config(id: u128) -> NodeConfig {
    let mut c = NodeConfig::new(
        CLUSTER,
        RouterId(uuid::Uuid::from_u128(id)),
        Topology::Aggregated,
        PolicyProfile::fallback(),
    );
    c.peer_sync = PeerSyncConfig {
        snapshot_window: Duration::from_millis(300),
        ..PeerSyncConfig::default()
    };
    c
}

/// A request with a prompt of its own (no prefix shared with any other).
fn request(id: u64, blocks: u32) -> RouteRequest {
    let base = (id as u32).wrapping_mul(7919);
    let tokens = (0..blocks * 16).map(|t| base.wrapping_add(t)).collect();
    RouteRequest::new(
        RequestId::from_u128(u128::from(id)),
        router_core::ClassId(0),
        Phase::Aggregated,
        Prompt::Tokens(tokens),
    )
}

/// CPU time (user + system) of a process, from /proc (Linux); `None` elsewhere.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0) // USER_HZ is 100 on Linux
}

/// The nats-server this process started (its child named nats-server).
fn nats_pid() -> Option<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let ppid = rest.split_whitespace().nth(1)?;
            (head.ends_with("nats-server") && ppid == me).then_some(pid)
        })
}

#[derive(Debug, Default)]
struct Tally {
    admitted: AtomicU64,
    rejected: AtomicU64,
    gone: AtomicU64,
    released: AtomicU64,
}

async fn ledger_idle(router: &RouterHandle) -> bool {
    router
        .observe()
        .await
        .map(|s| s.scheduler.ledger.is_idle())
        .unwrap_or(false)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let server = NatsServer::start().await?;
    let connect = |url: String| async move {
        NatsBus::connect(&url)
            .await
            .map(|b| Arc::new(b) as Arc<dyn Bus>)
    };
    let (bus_a, bus_b, bus_w) = (
        connect(server.url().to_owned()).await?,
        connect(server.url().to_owned()).await?,
        connect(server.url().to_owned()).await?,
    );
    let a = Node::start(node_config(1), Arc::clone(&bus_a)).await?;
    let b = Node::start(node_config(2), Arc::clone(&bus_b)).await?;
    let subjects = Subjects::new(CLUSTER);
    let mut links = Vec::new();
    for id in 1..=args.workers {
        let announce = WorkerAnnounce {
            spec: WorkerSpec::new(id, 1, 100_000_000, 100_000_000),
            pool: PoolRole::Aggregated,
            endpoint: format!("http://127.0.0.1:1/{id}"),
            heartbeat_ms: 0,
            lease_ms: 10_000,
            leaving: false,
        };
        links.push(
            WorkerLink::start(
                Arc::clone(&bus_w),
                &subjects,
                announce,
                Duration::from_millis(500),
            )
            .await?,
        );
    }
    for node in [&a, &b] {
        let mut ready = node.ready();
        tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r)).await??;
    }
    let (ra, rb) = (
        a.router(PoolRole::Aggregated)
            .ok_or("no pool on a")?
            .clone(),
        b.router(PoolRole::Aggregated)
            .ok_or("no pool on b")?
            .clone(),
    );
    // Both routers know every worker before the load starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    for router in [&ra, &rb] {
        while router.observe().await?.scheduler.ledger.ranks.len() < args.workers as usize {
            if Instant::now() > deadline {
                return Err("workers not known in time".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let before = rb.observe().await?.peer_lag_us;
    let sync_b0 = b
        .peer_sync(PoolRole::Aggregated)
        .ok_or("no peer sync on b")?
        .observe()
        .await?
        .counters;
    let nats = nats_pid();
    let cpu_me_0 = cpu_seconds(std::process::id());
    let cpu_nats_0 = nats.and_then(cpu_seconds);

    // Open loop: one request per tick, whatever became of the earlier ones.
    let tally = Arc::new(Tally::default());
    let route_us = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(
        1, 60_000_000, 3,
    )?));
    let total = args.rate * args.seconds;
    let hold = Duration::from_millis(args.hold_ms);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate as f64));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    for id in 1..=total {
        tick.tick().await;
        let (router, tally, route_us) = (ra.clone(), Arc::clone(&tally), Arc::clone(&route_us));
        let r = request(id, args.blocks);
        tasks.spawn(async move {
            let asked = Instant::now();
            let outcome = router.route(r).await;
            let took = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX);
            if let Ok(mut h) = route_us.lock() {
                h.saturating_record(took);
            }
            match outcome {
                Ok(_) => {
                    tally.admitted.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    if router.release(RequestId::from_u128(u128::from(id))).is_ok() {
                        tally.released.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(RouteError::Rejected { .. }) => {
                    tally.rejected.fetch_add(1, Ordering::Relaxed);
                }
                Err(RouteError::UnknownClass(_) | RouteError::Unavailable) => {
                    tally.gone.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // Reap finished tasks as we go so the set stays small.
        while tasks.try_join_next().is_some() {}
    }
    let issued_in = start.elapsed();
    while tasks.join_next().await.is_some() {}
    let finished_in = start.elapsed();

    // Convergence: both ledgers end idle (every booking released, on A and in B's view).
    let settle = Instant::now();
    let mut converged = false;
    while settle.elapsed() < Duration::from_secs(10) {
        if ledger_idle(&ra).await && ledger_idle(&rb).await {
            converged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let settled_in = settle.elapsed();
    let cpu_me = cpu_me_0.and_then(|c0| cpu_seconds(std::process::id()).map(|c| c - c0));
    let cpu_nats = cpu_nats_0.and_then(|c0| nats.and_then(cpu_seconds).map(|c| c - c0));
    let wall = start.elapsed().as_secs_f64();

    let snap_b = rb.observe().await?;
    let snap_a = ra.observe().await?;
    let lag: LagSummary = snap_b.peer_lag_us;
    let sync_b: PeerSyncSnapshot = b
        .peer_sync(PoolRole::Aggregated)
        .ok_or("no peer sync on b")?
        .observe()
        .await?;
    let sync_a: PeerSyncSnapshot = a
        .peer_sync(PoolRole::Aggregated)
        .ok_or("no peer sync on a")?
        .observe()
        .await?;
    let (route_p50, route_p99, route_max) = route_us
        .lock()
        .map(|h| (h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()))
        .unwrap_or_default();

    let achieved = total as f64 / issued_in.as_secs_f64();
    let admitted = tally.admitted.load(Ordering::Relaxed);
    let c = &sync_b.counters;
    let gaps = c.gaps - sync_b0.gaps;
    let repairs = c.snapshots_applied - sync_b0.snapshots_applied;
    println!("nats-server {} at {}", server.version(), server.url());
    println!(
        "target {} bookings/s for {} s, hold {} ms, {} workers, {}-block prompts",
        args.rate, args.seconds, args.hold_ms, args.workers, args.blocks
    );
    println!(
        "issued {total} in {:.3} s (achieved {achieved:.0}/s); all routes answered and \
         releases sent in {:.3} s; admitted {admitted}, rejected {}, router gone {}, \
         released {}",
        issued_in.as_secs_f64(),
        finished_in.as_secs_f64(),
        tally.rejected.load(Ordering::Relaxed),
        tally.gone.load(Ordering::Relaxed),
        tally.released.load(Ordering::Relaxed),
    );
    println!(
        "route call on A (µs): p50 {route_p50}, p99 {route_p99}, max {route_max}; \
         A own deltas published {}, dropped before sync {}",
        sync_a.counters.own_deltas, snap_a.counters.dropped_deltas
    );
    println!(
        "B peer sync during the run: applied {}, replayed {}, gaps {} (missed {}), stale {}, \
         digest mismatches {}, snapshot repairs applied {}, decode errors {}",
        c.applied - sync_b0.applied,
        c.replayed - sync_b0.replayed,
        gaps,
        c.missed - sync_b0.missed,
        c.stale - sync_b0.stale,
        c.digest_mismatches - sync_b0.digest_mismatches,
        repairs,
        sync_b.decode_errors.total()
    );
    println!(
        "B lag before the run: {} samples; after: {lag:?}",
        before.count
    );
    println!(
        "CPU over {wall:.2} s wall: this process (both nodes + driver) {}, nats-server {}",
        cpu_me.map_or("n/a".into(), |c| format!(
            "{c:.2} s ({:.0}% of one core)",
            100.0 * c / wall
        )),
        cpu_nats.map_or("n/a".into(), |c| format!(
            "{c:.2} s ({:.0}% of one core)",
            100.0 * c / wall
        )),
    );
    println!(
        "convergence: both ledgers idle = {converged} ({:.0} ms after the last release)",
        settled_in.as_secs_f64() * 1000.0
    );
    println!();
    println!(
        "| target/s | achieved/s | s | deltas measured | p50 ms | p99 ms | max ms | gaps | \
         repairs | both idle |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {achieved:.0} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
        args.rate,
        args.seconds,
        lag.count,
        ms(lag.p50_us),
        ms(lag.p99_us),
        ms(lag.max_us),
        gaps,
        repairs,
        if converged { "yes" } else { "NO" },
    );

    for link in links {
        let _ = link.shutdown().await;
    }
    a.shutdown().await;
    b.shutdown().await;
    drop(server);
    if converged {
        Ok(())
    } else {
        Err("ledgers did not end idle".into())
    }
}
