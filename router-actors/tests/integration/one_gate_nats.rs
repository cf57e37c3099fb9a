//! Replicas as one gate, on a real nats-server: three router nodes take a burst of requests
//! at once, each admitting against the pool's decode room through room credits, in a
//! disaggregated fleet (reservations on the decode pool) and in an aggregated one (bookings
//! on the one pool). What they commit together on every rank stays under the class line (the
//! sum of every node's own reservations and bookings, not any one node's view), and the room
//! is used: every request that fits is admitted. The same holds for the prefill line of an
//! aggregated pool and of a disaggregated fleet's prefill pool: the prompt tokens booked on a
//! rank pass it by at most one prompt, as with one router.

use crate::support::*;
use router_actors::testkit::NatsServer;
use router_actors::{Node, Topology};
use router_core::{PolicyProfile, PoolRole, RankId, RouteRequest};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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

/// The pool whose decode room the class line guards.
fn room_pool(topology: Topology) -> PoolRole {
    match topology {
        Topology::Disaggregated => PoolRole::Decode,
        Topology::Aggregated => PoolRole::Aggregated,
    }
}

/// The pool whose prefill line the class guards.
fn prefill_pool(topology: Topology) -> PoolRole {
    match topology {
        Topology::Disaggregated => PoolRole::Prefill,
        Topology::Aggregated => PoolRole::Aggregated,
    }
}

/// An aggregated class with a prefill line of 3,000 tokens and no decode line.
const PREFILL_PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 30000
quantum = 100
prefill_busy_threshold = 3000
"#;
const PREFILL_LINE: u64 = 3000;
/// Prompt tokens of one burst request (75 blocks of 16).
const PROMPT: u64 = NEED as u64 * 16;

/// The class line a burst runs against.
#[derive(Debug, Clone, Copy)]
enum Line {
    /// `decode_busy_threshold_frac = 0.5` of the decode (or aggregated) workers' KV.
    Decode,
    /// `prefill_busy_threshold = 3000` prompt tokens on the prefill (or aggregated) workers.
    Prefill,
}

/// What every node committed on each rank of the room pool, summed: the fleet's real
/// commitment. Decode: its own reservations and bookings, every block whole; prefill: the
/// prompt tokens of its own bookings.
async fn committed_per_rank(nodes: &[Node], pool: PoolRole, prefill: bool) -> HashMap<RankId, u64> {
    let mut total = HashMap::new();
    for node in nodes {
        let router = node.router(pool).expect("room pool");
        let own = router.own_state().await.expect("router alive");
        for (_, r) in own.reservations {
            *total.entry(r.rank).or_insert(0) += if prefill { 0 } else { r.blocks };
        }
        for (_, b) in own.bookings {
            *total.entry(b.rank).or_insert(0) += if prefill {
                b.prefill_tokens
            } else {
                b.block_hashes.len() as u64 + b.extra_blocks
            };
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_disaggregated_replicas_taking_one_burst_never_reserve_past_the_decode_line() {
    // 512 / 75 = 6 requests per rank: twelve fit, and the credits let all twelve in.
    let fits = 2 * (LINE / u64::from(NEED)) as usize;
    let (_server, nodes) =
        burst_through_three_replicas(Topology::Disaggregated, Line::Decode, fits).await;
    check_committed(nodes, PoolRole::Decode, false, LINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_aggregated_replicas_taking_one_burst_never_book_past_the_decode_line() {
    let fits = 2 * (LINE / u64::from(NEED)) as usize;
    let (_server, nodes) =
        burst_through_three_replicas(Topology::Aggregated, Line::Decode, fits).await;
    check_committed(nodes, PoolRole::Aggregated, false, LINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_aggregated_replicas_taking_one_burst_stay_within_a_prompt_of_the_prefill_line() {
    // Prefill never ends here (no first token): a rank takes prompts while at or under the
    // line, 0, 1,200 and 2,400 tokens, so three per rank, as one router would.
    let fits = 2 * (PREFILL_LINE / PROMPT + 1) as usize;
    let (_server, nodes) =
        burst_through_three_replicas(Topology::Aggregated, Line::Prefill, fits).await;
    check_committed(nodes, PoolRole::Aggregated, true, PREFILL_LINE + PROMPT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_disaggregated_replicas_taking_one_burst_stay_within_a_prompt_of_the_prefill_line() {
    // The prefill pool's own line, held by prefill credits among the prefill routers of the
    // three nodes: three prompts per prefill rank, as one router admits.
    let fits = 2 * (PREFILL_LINE / PROMPT + 1) as usize;
    let (_server, nodes) =
        burst_through_three_replicas(Topology::Disaggregated, Line::Prefill, fits).await;
    check_committed(nodes, PoolRole::Prefill, true, PREFILL_LINE + PROMPT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_alone_in_its_pool_judges_the_lines_on_its_own_ledger() {
    // Alone, a router sees every booking there is: credits would only narrow where it may
    // place, so they stay off until a peer comes.
    let server = start_nats().await;
    let first_bus = bus(&server).await;
    let profile = PolicyProfile::from_toml_str(PREFILL_PROFILE).expect("profile");
    let first = node(1, Topology::Aggregated, profile, Arc::clone(&first_bus)).await;
    let _fleet = workers(&first_bus, PoolRole::Aggregated, &[11, 12], DECODE_KV).await;
    ready(&first).await;
    let router = first.router(PoolRole::Aggregated).expect("pool").clone();
    let snap = router.observe().await.expect("router alive");
    assert!(
        !snap.scheduler.ledger.room_credits,
        "credits on while alone"
    );
    // One router's own rule: three prompts per rank (the third crosses the line).
    let mut admitted = 0;
    for id in 1..=8u128 {
        let request = burst_request(id, Topology::Aggregated);
        if tokio::time::timeout(Duration::from_millis(300), router.route(request))
            .await
            .is_ok_and(|r| r.is_ok())
        {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 6);
    // A peer comes: credits bound the ledger from then on.
    let bus2 = bus(&server).await;
    let profile = PolicyProfile::from_toml_str(PREFILL_PROFILE).expect("profile");
    let peer = node(2, Topology::Aggregated, profile, bus2).await;
    eventually(
        "credits on once a peer is seen",
        Duration::from_secs(5),
        || async {
            router
                .observe()
                .await
                .is_ok_and(|s| s.scheduler.ledger.room_credits)
        },
    )
    .await;
    peer.shutdown().await;
    first.shutdown().await;
}

/// What the fleet committed on each rank is within `bound`; then the nodes stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credits_three_aggregated_replicas_admit_past_the_prefill_line() {
    // The contrast: each replica judges the line against its own view, and a burst that
    // reaches all three at once is admitted by each.
    let fits = 2 * (PREFILL_LINE / PROMPT + 1) as usize;
    let (_server, nodes, admitted) = burst(Topology::Aggregated, Line::Prefill, fits, false).await;
    println!("prefill line, 3 replicas without credits: {admitted} admitted (one router: {fits})");
    assert!(admitted > fits, "{admitted} admitted");
    for node in nodes {
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credits_three_disaggregated_replicas_admit_past_the_prefill_line() {
    let fits = 2 * (PREFILL_LINE / PROMPT + 1) as usize;
    let (_server, nodes, admitted) =
        burst(Topology::Disaggregated, Line::Prefill, fits, false).await;
    println!(
        "disaggregated prefill line, 3 replicas without credits: {admitted} admitted (one router: {fits})"
    );
    assert!(admitted > fits, "{admitted} admitted");
    for node in nodes {
        node.shutdown().await;
    }
}

async fn check_committed(nodes: Vec<Node>, pool: PoolRole, prefill: bool, bound: u64) {
    let committed = committed_per_rank(&nodes, pool, prefill).await;
    assert_eq!(committed.len(), 2, "{committed:?}");
    for (rank, amount) in &committed {
        assert!(
            *amount <= bound,
            "{amount} committed on {rank:?}, bound {bound}"
        );
    }
    for node in nodes {
        node.shutdown().await;
    }
}

/// Sixty requests at once through three replicas (round robin); exactly `fits` of them
/// are admitted. Returns the nodes, still up, for the caller to inspect (and the
/// nats-server they need).
async fn burst_through_three_replicas(
    topology: Topology,
    line: Line,
    fits: usize,
) -> (NatsServer, Vec<Node>) {
    let (server, nodes, admitted) = burst(topology, line, fits, true).await;
    assert_eq!(admitted, fits, "admitted past the line");
    (server, nodes)
}

/// The burst; waits until at least `fits` requests are admitted, then gives the replicas
/// every chance to admit more. Returns how many were admitted.
async fn burst(
    topology: Topology,
    line: Line,
    fits: usize,
    room_credits: bool,
) -> (NatsServer, Vec<Node>, usize) {
    let (profile, pool) = match line {
        Line::Decode => (DISAGG_PROFILE, room_pool(topology)),
        Line::Prefill => (PREFILL_PROFILE, prefill_pool(topology)),
    };
    let server = start_nats().await;
    let mut buses = Vec::new();
    let mut nodes = Vec::new();
    for id in 1..=3u128 {
        let bus = bus(&server).await;
        let profile = PolicyProfile::from_toml_str(profile).expect("profile");
        let mut config = config(id, topology, profile);
        config.room_credits = room_credits;
        let node = Node::start(config, Arc::clone(&bus))
            .await
            .unwrap_or_else(|e| panic!("node {id} starts: {e}"));
        nodes.push(node);
        buses.push(bus);
    }
    // Two ranks in the pool whose line is tested; one big worker in the other pool.
    let mut fleet = workers(&buses[0], pool, &[11, 12], DECODE_KV).await;
    let other = match pool {
        PoolRole::Decode => Some(PoolRole::Prefill),
        PoolRole::Prefill => Some(PoolRole::Decode),
        PoolRole::Aggregated => None,
    };
    if let Some(other) = other {
        fleet.extend(workers(&buses[0], other, &[1], 100_000).await);
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

    // Credits bound the ledgers once a replica has peers (and only when switched on).
    for node in &nodes {
        let router = node.router(pool).expect("room pool");
        let snap = router.observe().await.expect("router alive");
        assert_eq!(snap.scheduler.ledger.room_credits, room_credits);
    }

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
    eventually(
        "every request that fits is admitted",
        Duration::from_secs(10),
        || async { admitted.load(Ordering::Relaxed) >= fits },
    )
    .await;
    // Give the others every chance to overshoot: more gate passes, more peer sync.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let admitted = admitted.load(Ordering::Relaxed);
    for task in burst {
        task.abort();
    }
    drop(fleet);
    (server, nodes, admitted)
}
