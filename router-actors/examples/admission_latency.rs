//! Admission latency with room credits: how long a request takes from the gate to its
//! admission (`RouterHandle::route`) when replicas share the decode room through credits,
//! against the same load without credits, with 1 to 5 replicas on a real nats-server.
//!
//! One process: a real nats-server (testkit), `--replicas` router nodes on it, each on its
//! own connection, and workers announced through `WorkerLink` with KV far larger than the
//! load (the class line never binds: what is measured is the price of asking, not of
//! waiting for room). The class has `decode_busy_threshold_frac = 0.9`, so every admission
//! needs credits. Requests are driven open loop at `--rate` per second, spread round robin
//! over the replicas, each held `--hold-ms` then released; every route call's latency goes
//! into a histogram.
//!
//! ```text
//! cargo run --release -p router-actors --example admission_latency -- \
//!     --replicas 3 --topology disagg --credits on --rate 2000 --seconds 5
//! ```
//!
//! Options: `--replicas` (3), `--topology` agg|disagg (disagg), `--credits` on|off (on),
//! `--rate` requests/s (2000), `--seconds` (5), `--hold-ms` (50), `--workers` (4),
//! `--prefill-line` tokens (none): the class also gets `prefill_busy_threshold`, so an
//! aggregated pool's admissions need prefill credits as well.
//! nats-server: `$NATS_SERVER_BIN`, `.tools/nats`, `PATH`.

use hdrhistogram::Histogram;
use router_actors::bus::Bus;
use router_actors::bus::nats::NatsBus;
use router_actors::testkit::NatsServer;
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{Node, NodeConfig, PeerSyncConfig, RouterHandle, Topology, WorkerLink};
use router_core::{
    Phase, PolicyProfile, PoolRole, Prompt, RequestId, RouteRequest, RouterId, WorkerSpec,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};

const CLUSTER: &str = "admission";

const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 30000
quantum = 100
decode_busy_threshold_frac = 0.9
"#;

#[derive(Debug, Clone)]
struct Args {
    replicas: u64,
    topology: Topology,
    credits: bool,
    rate: u64,
    seconds: u64,
    hold_ms: u64,
    workers: u64,
    prefill_line: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        replicas: 3,
        topology: Topology::Disaggregated,
        credits: true,
        rate: 2000,
        seconds: 5,
        hold_ms: 50,
        workers: 4,
        prefill_line: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--replicas" => args.replicas = number(&value)?.clamp(1, 16),
            "--topology" => {
                args.topology = match value.as_str() {
                    "agg" => Topology::Aggregated,
                    "disagg" => Topology::Disaggregated,
                    other => return Err(format!("--topology {other}: agg or disagg")),
                }
            }
            "--credits" => {
                args.credits = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--credits {other}: on or off")),
                }
            }
            "--rate" => args.rate = number(&value)?.max(1),
            "--seconds" => args.seconds = number(&value)?.max(1),
            "--hold-ms" => args.hold_ms = number(&value)?,
            "--prefill-line" => args.prefill_line = Some(number(&value)?),
            "--workers" => args.workers = number(&value)?.max(1),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

fn node_config(id: u128, args: &Args) -> Result<NodeConfig, String> {
    let text = match args.prefill_line {
        Some(line) => format!("{PROFILE}prefill_busy_threshold = {line}\n"),
        None => PROFILE.to_owned(),
    };
    let profile = PolicyProfile::from_toml_str(&text).map_err(|e| e.to_string())?;
    let mut c = NodeConfig::new(
        CLUSTER,
        RouterId(uuid::Uuid::from_u128(id)),
        args.topology,
        profile,
    );
    c.peer_sync = PeerSyncConfig {
        snapshot_window: Duration::from_millis(300),
        ..PeerSyncConfig::default()
    };
    c.room_credits = args.credits;
    Ok(c)
}

/// A request with a prompt of its own (two blocks, no prefix shared).
fn request(id: u64, topology: Topology) -> RouteRequest {
    let base = (id as u32).wrapping_mul(7919);
    let tokens = (0..32).map(|t| base.wrapping_add(t)).collect();
    let phase = match topology {
        Topology::Aggregated => Phase::Aggregated,
        Topology::Disaggregated => Phase::Prefill,
    };
    RouteRequest::new(
        RequestId::from_u128(u128::from(id)),
        router_core::ClassId(0),
        phase,
        Prompt::Tokens(tokens),
    )
}

async fn announce(
    bus: &Arc<dyn Bus>,
    pool: PoolRole,
    first_id: u64,
    count: u64,
) -> Result<Vec<WorkerLink>, Box<dyn std::error::Error>> {
    let subjects = Subjects::new(CLUSTER);
    let mut links = Vec::new();
    for id in first_id..first_id + count {
        let announce = WorkerAnnounce {
            spec: WorkerSpec::new(id, 1, 100_000_000, 100_000_000),
            pool,
            endpoint: format!("http://127.0.0.1:1/{id}"),
            heartbeat_ms: 0,
            lease_ms: 10_000,
            leaving: false,
        };
        let link = WorkerLink::start(
            Arc::clone(bus),
            &subjects,
            announce,
            Duration::from_millis(500),
        )
        .await?;
        links.push(link);
    }
    Ok(links)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let server = NatsServer::start().await?;
    let mut nodes = Vec::new();
    for id in 1..=args.replicas {
        let bus: Arc<dyn Bus> = Arc::new(NatsBus::connect(server.url()).await?);
        nodes.push(Node::start(node_config(u128::from(id), &args)?, bus).await?);
    }
    let bus_w: Arc<dyn Bus> = Arc::new(NatsBus::connect(server.url()).await?);
    let (entry, room_pool) = match args.topology {
        Topology::Aggregated => (PoolRole::Aggregated, PoolRole::Aggregated),
        Topology::Disaggregated => (PoolRole::Prefill, PoolRole::Decode),
    };
    let mut links = announce(&bus_w, room_pool, 1, args.workers).await?;
    if args.topology == Topology::Disaggregated {
        links.extend(announce(&bus_w, PoolRole::Prefill, 1000, args.workers).await?);
    }
    for node in &nodes {
        let mut ready = node.ready();
        tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r)).await??;
    }
    // Every replica sees the others (rank owners are decided among them).
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &nodes {
        let sync = node.peer_sync(room_pool).ok_or("no peer sync")?;
        while sync.observe().await?.peers.len() + 1 < nodes.len() {
            if Instant::now() > deadline {
                return Err("replicas do not see each other".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Rank ownership settles for two heartbeats after replicas first see each other: the
    // load starts once that is over (steady state, not a fleet starting up).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let routers: Vec<RouterHandle> = nodes
        .iter()
        .map(|n| n.router(entry).cloned().ok_or("no entry pool"))
        .collect::<Result<_, _>>()?;
    let releasers: Vec<(RouterHandle, Option<RouterHandle>)> = nodes
        .iter()
        .map(|n| {
            let entry = n.router(entry).cloned();
            let decode = (args.topology == Topology::Disaggregated)
                .then(|| n.router(PoolRole::Decode).cloned())
                .flatten();
            entry.map(|e| (e, decode)).ok_or("no entry pool")
        })
        .collect::<Result<_, _>>()?;

    let histogram = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(
        1, 60_000_000, 3,
    )?));
    let failed = Arc::new(AtomicU64::new(0));
    let mut interval = tokio::time::interval(Duration::from_micros(1_000_000 / args.rate));
    interval.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let total = args.rate * args.seconds;
    let mut tasks = Vec::with_capacity(total as usize);
    let started = Instant::now();
    for id in 1..=total {
        interval.tick().await;
        let at = (id % args.replicas) as usize;
        let router = routers[at].clone();
        let (release_entry, release_decode) = releasers[at].clone();
        let histogram = Arc::clone(&histogram);
        let failed = Arc::clone(&failed);
        let hold = Duration::from_millis(args.hold_ms);
        let topology = args.topology;
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            match router.route(request(id, topology)).await {
                Ok(_) => {
                    let us = sent.elapsed().as_micros() as u64;
                    if let Ok(mut h) = histogram.lock() {
                        let _ = h.record(us.max(1));
                    }
                    tokio::time::sleep(hold).await;
                    let request = RequestId::from_u128(u128::from(id));
                    let _ = release_entry.release(request);
                    if let Some(decode) = release_decode {
                        let _ = decode.unreserve(request);
                    }
                }
                Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let h = histogram.lock().map_err(|_| "histogram lock")?.clone();
    println!(
        "replicas {} topology {:?} credits {} prefill line {} rate {}/s for {:.1} s: admitted {} \
         failed {}",
        args.replicas,
        args.topology,
        if args.credits { "on" } else { "off" },
        args.prefill_line
            .map_or_else(|| "none".to_owned(), |l| l.to_string()),
        args.rate,
        elapsed,
        h.len(),
        failed.load(Ordering::Relaxed)
    );
    println!(
        "gate -> admitted: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.9)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max())
    );
    drop(links);
    for node in nodes {
        node.shutdown().await;
    }
    Ok(())
}
