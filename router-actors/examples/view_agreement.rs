//! Agreement over time: while three replicas route a steady load, how far apart are their
//! views of the fleet's booked load? Every `--sample-ms` the example reads every replica's
//! ledger (per rank: booked + reserved decode blocks, requests) and records, per sample, the
//! disagreement summed over ranks: for each rank, the largest minus the smallest value any
//! replica holds. Reported as p50 / p99 / max in blocks (and as a share of the fleet's KV
//! capacity) and in requests, with each replica's peer-sync lag (the staleness of its view:
//! a peer's delta from publication to application).
//!
//! One process: a real nats-server (testkit), `--replicas` aggregated nodes on it (each on its
//! own connection), `--workers` announced workers of `--kv` blocks each. Requests of 1 to 40
//! blocks (seeded) arrive open loop at `--rate` per second, round robin over the replicas,
//! each held 50 to 500 ms (seeded) then released.
//!
//! ```text
//! cargo run --release -p router-actors --example view_agreement -- --rate 1000 --seconds 10
//! ```
//!
//! Options: `--replicas` (3), `--workers` (8), `--kv` (10000), `--rate` (1000), `--seconds`
//! (10), `--sample-ms` (100), `--seed` (1). nats-server: `$NATS_SERVER_BIN`, `.tools/nats`.

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use router_actors::bus::Bus;
use router_actors::bus::nats::NatsBus;
use router_actors::testkit::NatsServer;
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{Node, NodeConfig, PeerSyncConfig, RouterHandle, Topology, WorkerLink};
use router_core::{
    Phase, PolicyProfile, PoolRole, Prompt, RankId, RequestId, RouteRequest, RouterId, WorkerSpec,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};

const CLUSTER: &str = "agreement";

#[derive(Debug, Clone)]
struct Args {
    replicas: u64,
    workers: u64,
    kv: u64,
    rate: u64,
    seconds: u64,
    sample_ms: u64,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        replicas: 3,
        workers: 8,
        kv: 10_000,
        rate: 1000,
        seconds: 10,
        sample_ms: 100,
        seed: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let v = value
            .parse::<u64>()
            .map_err(|e| format!("{flag} {value}: {e}"))?;
        match flag.as_str() {
            "--replicas" => args.replicas = v.clamp(2, 16),
            "--workers" => args.workers = v.max(1),
            "--kv" => args.kv = v.max(1),
            "--rate" => args.rate = v.max(1),
            "--seconds" => args.seconds = v.max(1),
            "--sample-ms" => args.sample_ms = v.max(1),
            "--seed" => args.seed = v,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

/// Per rank: (committed blocks, requests), as one replica sees them.
async fn view(router: &RouterHandle) -> Result<HashMap<RankId, (u64, u64)>, String> {
    let snapshot = router.observe().await.map_err(|e| e.to_string())?;
    Ok(snapshot
        .scheduler
        .ledger
        .ranks
        .iter()
        .map(|r| {
            (
                r.rank,
                (r.decode_blocks + r.reserved_blocks, u64::from(r.requests)),
            )
        })
        .collect())
}

/// Σ over ranks of (largest − smallest) across views, for blocks and for requests.
fn disagreement(views: &[HashMap<RankId, (u64, u64)>]) -> (u64, u64) {
    let mut ranks: Vec<RankId> = views.iter().flat_map(|v| v.keys().copied()).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let spread = |pick: fn(&(u64, u64)) -> u64, rank: &RankId| {
        let values: Vec<u64> = views.iter().map(|v| v.get(rank).map_or(0, pick)).collect();
        values.iter().max().copied().unwrap_or(0) - values.iter().min().copied().unwrap_or(0)
    };
    ranks.iter().fold((0, 0), |(b, r), rank| {
        (b + spread(|x| x.0, rank), r + spread(|x| x.1, rank))
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let server = NatsServer::start().await?;
    let mut nodes = Vec::new();
    for id in 1..=args.replicas {
        let bus: Arc<dyn Bus> = Arc::new(NatsBus::connect(server.url()).await?);
        let mut config = NodeConfig::new(
            CLUSTER,
            RouterId(uuid::Uuid::from_u128(u128::from(id))),
            Topology::Aggregated,
            PolicyProfile::fallback(),
        );
        config.peer_sync = PeerSyncConfig {
            snapshot_window: Duration::from_millis(300),
            ..PeerSyncConfig::default()
        };
        nodes.push(Node::start(config, bus).await?);
    }
    let bus_w: Arc<dyn Bus> = Arc::new(NatsBus::connect(server.url()).await?);
    let subjects = Subjects::new(CLUSTER);
    let mut links = Vec::new();
    for id in 1..=args.workers {
        let announce = WorkerAnnounce {
            spec: WorkerSpec::new(id, 1, args.kv, 100_000_000),
            pool: PoolRole::Aggregated,
            endpoint: format!("http://127.0.0.1:1/{id}"),
            heartbeat_ms: 0,
            lease_ms: 10_000,
            leaving: false,
        };
        let link = WorkerLink::start(
            Arc::clone(&bus_w),
            &subjects,
            announce,
            Duration::from_millis(500),
        )
        .await?;
        links.push(link);
    }
    for node in &nodes {
        let mut ready = node.ready();
        tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r)).await??;
    }
    let routers: Vec<RouterHandle> = nodes
        .iter()
        .map(|n| n.router(PoolRole::Aggregated).cloned().ok_or("no pool"))
        .collect::<Result<_, _>>()?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let capacity = args.workers * args.kv;
    let sampler = {
        let routers = routers.clone();
        let every = Duration::from_millis(args.sample_ms);
        let until = Instant::now() + Duration::from_secs(args.seconds);
        tokio::spawn(async move {
            let mut blocks = Histogram::<u64>::new(3).expect("histogram");
            let mut requests = Histogram::<u64>::new(3).expect("histogram");
            let mut tick = tokio::time::interval(every);
            while Instant::now() < until {
                tick.tick().await;
                let mut views = Vec::new();
                for router in &routers {
                    if let Ok(v) = view(router).await {
                        views.push(v);
                    }
                }
                let (b, r) = disagreement(&views);
                let _ = blocks.record(b);
                let _ = requests.record(r);
            }
            (blocks, requests)
        })
    };
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut interval = tokio::time::interval(Duration::from_micros(1_000_000 / args.rate));
    interval.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let total = args.rate * args.seconds;
    let mut tasks = Vec::with_capacity(total as usize);
    for id in 1..=total {
        interval.tick().await;
        let router = routers[(id % args.replicas) as usize].clone();
        let blocks: u32 = rng.random_range(1..=40);
        let hold = Duration::from_millis(rng.random_range(50..=500));
        tasks.push(tokio::spawn(async move {
            let base = (id as u32).wrapping_mul(7919);
            let tokens = (0..blocks * 16).map(|t| base.wrapping_add(t)).collect();
            let request = RouteRequest::new(
                RequestId::from_u128(u128::from(id)),
                router_core::ClassId(0),
                Phase::Aggregated,
                Prompt::Tokens(tokens),
            );
            if router.route(request).await.is_ok() {
                tokio::time::sleep(hold).await;
                let _ = router.release(RequestId::from_u128(u128::from(id)));
            }
        }));
    }
    let (blocks, requests) = sampler.await?;
    for task in tasks {
        let _ = task.await;
    }
    let pct = |b: u64| 100.0 * b as f64 / capacity as f64;
    println!(
        "{} replicas, {} workers x {} blocks, {} requests/s for {} s, sampled every {} ms ({} samples)",
        args.replicas,
        args.workers,
        args.kv,
        args.rate,
        args.seconds,
        args.sample_ms,
        blocks.len()
    );
    println!(
        "disagreement, blocks: p50 {} ({:.3} % of capacity)  p99 {} ({:.3} %)  max {} ({:.3} %)",
        blocks.value_at_quantile(0.5),
        pct(blocks.value_at_quantile(0.5)),
        blocks.value_at_quantile(0.99),
        pct(blocks.value_at_quantile(0.99)),
        blocks.max(),
        pct(blocks.max())
    );
    println!(
        "disagreement, requests: p50 {}  p99 {}  max {}",
        requests.value_at_quantile(0.5),
        requests.value_at_quantile(0.99),
        requests.max()
    );
    for (i, router) in routers.iter().enumerate() {
        let lag = router.observe().await?.peer_lag_us;
        println!(
            "replica {}: staleness (peer-sync lag) p50 {:.3} ms  p99 {:.3} ms over {} deltas",
            i + 1,
            lag.p50_us as f64 / 1000.0,
            lag.p99_us as f64 / 1000.0,
            lag.count
        );
    }
    drop(links);
    for node in nodes {
        node.shutdown().await;
    }
    Ok(())
}
