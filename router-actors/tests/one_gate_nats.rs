//! Replicas as one gate, on a real nats-server: three router nodes take a burst of
//! disaggregated requests at once, each admitting against the decode pool's room through
//! room credits. What they reserve together on every decode rank stays under the class
//! line (the sum of every node's own reservations, not any one node's view), and the room
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

fn burst_request(id: u128) -> RouteRequest {
    let mut r = request(id, NEED);
    r.phase = router_core::Phase::Prefill;
    r
}

/// What every node reserved on each decode rank, summed: the fleet's real commitment.
async fn reserved_per_rank(nodes: &[Node]) -> HashMap<RankId, u64> {
    let mut total = HashMap::new();
    for node in nodes {
        let decode = node.router(PoolRole::Decode).expect("decode pool");
        let own = decode.own_state().await.expect("decode router alive");
        for (_, r) in own.reservations {
            *total.entry(r.rank).or_insert(0) += r.blocks;
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_taking_one_burst_never_reserve_past_the_decode_line() {
    let server = start_nats().await;
    let mut buses = Vec::new();
    let mut nodes = Vec::new();
    for id in 1..=3u128 {
        let bus = bus(&server).await;
        let profile = PolicyProfile::from_toml_str(DISAGG_PROFILE).expect("profile");
        nodes.push(node(id, Topology::Disaggregated, profile, Arc::clone(&bus)).await);
        buses.push(bus);
    }
    let _prefill = workers(&buses[0], PoolRole::Prefill, &[1], 100_000).await;
    let _decode = workers(&buses[0], PoolRole::Decode, &[11, 12], DECODE_KV).await;
    for node in &nodes {
        ready(node).await;
    }
    // Every node sees both others before the burst (membership decides rank owners).
    eventually(
        "every node sees its two peers",
        Duration::from_secs(5),
        || async {
            for node in &nodes {
                let sync = node.peer_sync(PoolRole::Decode).expect("decode peer sync");
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
        let prefill = nodes[(id % 3) as usize]
            .router(PoolRole::Prefill)
            .expect("prefill pool")
            .clone();
        let admitted = Arc::clone(&admitted);
        burst.push(tokio::spawn(async move {
            if prefill.route(burst_request(id)).await.is_ok() {
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
    let reserved = reserved_per_rank(&nodes).await;
    assert_eq!(reserved.len(), 2, "{reserved:?}");
    for (rank, blocks) in &reserved {
        assert!(
            *blocks <= LINE,
            "{blocks} blocks reserved on {rank:?}, line {LINE}"
        );
    }
    for task in burst {
        task.abort();
    }
    for node in nodes {
        node.shutdown().await;
    }
}
