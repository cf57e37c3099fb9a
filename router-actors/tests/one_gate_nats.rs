//! Replicas as one gate, on a real nats-server: three router nodes take a burst of requests
//! at once, each admitting against the pool's decode room through room credits, in a
//! disaggregated fleet (reservations on the decode pool) and in an aggregated one (bookings
//! on the one pool). What they commit together on every rank stays under the class line (the
//! sum of every node's own reservations and bookings, not any one node's view), and the room
//! is used: every request that fits is admitted.

mod support;

use router_actors::{Node, Topology};
use router_core::{PolicyProfile, PoolRole, RankId, RouteRequest};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::*;

/// Decode blocks one request needs (its prompt; no output blocks asked for).
const NEED: u32 = 75;
/// Blocks of each decode worker; the class line is half.
const DECODE_KV: u64 = 1024;
const LINE: u64 = DECODE_KV / 2;

fn burst_request(id: u128, topology: Topology) -> RouteRequest {
    let mut r = request(id, NEED);
    if topology == Topology::Disaggregated {
        r.phase = router_core::Phase::Prefill;
    }
    r
}

/// The pool whose room the class line guards.
fn room_pool(topology: Topology) -> PoolRole {
    match topology {
        Topology::Disaggregated => PoolRole::Decode,
        Topology::Aggregated => PoolRole::Aggregated,
    }
}

/// What every node committed on each rank of the room pool (its own reservations and its
/// own bookings, every block whole), summed: the fleet's real commitment.
async fn committed_per_rank(nodes: &[Node], pool: PoolRole) -> HashMap<RankId, u64> {
    let mut total = HashMap::new();
    for node in nodes {
        let router = node.router(pool).expect("room pool");
        let own = router.own_state().await.expect("router alive");
        for (_, r) in own.reservations {
            *total.entry(r.rank).or_insert(0) += r.blocks;
        }
        for (_, b) in own.bookings {
            *total.entry(b.rank).or_insert(0) += b.block_hashes.len() as u64 + b.extra_blocks;
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_disaggregated_replicas_taking_one_burst_never_reserve_past_the_decode_line() {
    burst_through_three_replicas(Topology::Disaggregated).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_aggregated_replicas_taking_one_burst_never_book_past_the_decode_line() {
    burst_through_three_replicas(Topology::Aggregated).await;
}

async fn burst_through_three_replicas(topology: Topology) {
    let server = start_nats().await;
    let mut buses = Vec::new();
    let mut nodes = Vec::new();
    for id in 1..=3u128 {
        let bus = bus(&server).await;
        let profile = PolicyProfile::from_toml_str(DISAGG_PROFILE).expect("profile");
        nodes.push(node(id, topology, profile, Arc::clone(&bus)).await);
        buses.push(bus);
    }
    let pool = room_pool(topology);
    let mut fleet = workers(&buses[0], pool, &[11, 12], DECODE_KV).await;
    if topology == Topology::Disaggregated {
        fleet.extend(workers(&buses[0], PoolRole::Prefill, &[1], 100_000).await);
    }
    for node in &nodes {
        ready(node).await;
    }
    // Every node sees both others before the burst (membership decides rank owners).
    eventually(
        "every node sees its two peers",
        Duration::from_secs(5),
        || async {
            for node in &nodes {
                let sync = node.peer_sync(pool).expect("peer sync of the room pool");
                match sync.observe().await {
                    Ok(s) if s.peers.len() == 2 => {}
                    _ => return false,
                }
            }
            true
        },
    )
    .await;

    let admitted = Arc::new(AtomicUsize::new(0));
    let mut burst = Vec::new();
    for id in 1..=60u128 {
        let entry = if topology == Topology::Disaggregated {
            PoolRole::Prefill
        } else {
            PoolRole::Aggregated
        };
        let router = nodes[(id % 3) as usize]
            .router(entry)
            .expect("entry pool")
            .clone();
        let admitted = Arc::clone(&admitted);
        burst.push(tokio::spawn(async move {
            if router.route(burst_request(id, topology)).await.is_ok() {
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // 512 / 75 = 6 requests per rank: twelve fit, and the credits let all twelve in.
    let fits = 2 * (LINE / u64::from(NEED)) as usize;
    eventually(
        "every request that fits is admitted",
        Duration::from_secs(10),
        || async { admitted.load(Ordering::Relaxed) >= fits },
    )
    .await;
    // Give the others every chance to overshoot: more gate passes, more peer sync.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        admitted.load(Ordering::Relaxed),
        fits,
        "admitted past the line"
    );
    let committed = committed_per_rank(&nodes, pool).await;
    assert_eq!(committed.len(), 2, "{committed:?}");
    for (rank, blocks) in &committed {
        assert!(
            *blocks <= LINE,
            "{blocks} blocks committed on {rank:?}, line {LINE}"
        );
    }
    for task in burst {
        task.abort();
    }
    for node in nodes {
        node.shutdown().await;
    }
}
