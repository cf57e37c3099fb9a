//! Replicas under faults on a real nats-server: a stopping node says goodbye and its peers
//! drop its bookings at once (not at the end of its lease); a NATS outage longer than every
//! lease keeps the fleet as last known (peers with their bookings, workers) and the node
//! keeps admitting, then everything resynchronises when the server is back.

use crate::support::*;
use router_actors::{Node, NodeConfig, Topology};
use router_core::{PolicyProfile, PoolRole, RequestId, RouterId};
use std::sync::Arc;
use std::time::Duration;

/// An aggregated node whose peers wait `lease` before expiring it.
async fn node_with_lease(id: u128, bus: Arc<dyn router_actors::bus::Bus>, lease: Duration) -> Node {
    let mut c: NodeConfig = config(id, Topology::Aggregated, PolicyProfile::fallback());
    c.peer_sync.lease = lease;
    Node::start(c, bus).await.expect("node starts")
}

async fn bookings_of(node: &Node, owner: u128) -> usize {
    let router = node.router(PoolRole::Aggregated).expect("pool");
    router
        .state_of(RouterId(uuid::Uuid::from_u128(owner)))
        .await
        .map(|s| s.bookings.len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_says_goodbye_and_its_peers_drop_its_bookings_at_once() {
    let server = start_nats().await;
    // A lease far longer than the test waits: only the goodbye can explain the drop.
    let lease = Duration::from_secs(30);
    let (bus_a, bus_b) = (bus(&server).await, bus(&server).await);
    let a = node_with_lease(1, Arc::clone(&bus_a), lease).await;
    let b = node_with_lease(2, Arc::clone(&bus_b), lease).await;
    let _workers = workers(&bus_a, PoolRole::Aggregated, &[1, 2], 100_000).await;
    ready(&a).await;
    ready(&b).await;
    let rb = b.router(PoolRole::Aggregated).expect("pool").clone();
    for id in 1..=3u128 {
        admit(&rb, request(id, 4)).await;
    }
    eventually(
        "a holds b's three bookings",
        Duration::from_secs(5),
        || async { bookings_of(&a, 2).await == 3 },
    )
    .await;
    b.shutdown().await;
    eventually(
        "a dropped b's bookings well before b's lease",
        Duration::from_secs(5),
        || async { bookings_of(&a, 2).await == 0 },
    )
    .await;
    let sync = a.peer_sync(PoolRole::Aggregated).expect("peer sync");
    let snapshot = sync.observe().await.expect("alive");
    assert!(snapshot.peers.is_empty(), "{:?}", snapshot.peers);
    assert_eq!(snapshot.counters.goodbyes, 1);
    assert_eq!(snapshot.counters.expired_peers, 0);
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_outage_longer_than_every_lease_keeps_peers_and_workers_and_admits() {
    let mut server = start_nats().await;
    let (bus_a, bus_b) = (bus(&server).await, bus(&server).await);
    let a = node(
        1,
        Topology::Aggregated,
        PolicyProfile::fallback(),
        Arc::clone(&bus_a),
    )
    .await;
    let b = node(
        2,
        Topology::Aggregated,
        PolicyProfile::fallback(),
        Arc::clone(&bus_b),
    )
    .await;
    let _workers = workers(&bus_a, PoolRole::Aggregated, &[1, 2], 100_000).await;
    ready(&a).await;
    ready(&b).await;
    let (ra, rb) = (
        a.router(PoolRole::Aggregated).expect("pool").clone(),
        b.router(PoolRole::Aggregated).expect("pool").clone(),
    );
    for id in 1..=3u128 {
        admit(&rb, request(id, 4)).await;
    }
    eventually(
        "a holds b's three bookings",
        Duration::from_secs(5),
        || async { bookings_of(&a, 2).await == 3 },
    )
    .await;

    server.stop();
    // Longer than the peers' lease (800 ms) and the workers' (5 s).
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(!a.bus_connected(), "a's connection is down");
    let sync = a.peer_sync(PoolRole::Aggregated).expect("peer sync");
    let during = sync.observe().await.expect("alive");
    assert!(!during.bus_connected);
    assert_eq!(during.peers.len(), 1, "b is kept: {:?}", during.peers);
    assert_eq!(during.counters.expired_peers, 0);
    assert_eq!(bookings_of(&a, 2).await, 3, "b's bookings are kept");
    let registry = a.registry().observe().await.expect("alive");
    assert_eq!(registry.workers.len(), 2, "the workers are kept");
    // The node still routes to the fleet it knows.
    admit(&ra, request(10, 4)).await;
    ra.release(RequestId::from_u128(10)).expect("alive");

    server
        .restart()
        .await
        .expect("nats-server restarts on its port");
    eventually(
        "a's peer sync sees the bus back",
        Duration::from_secs(15),
        || async { sync.observe().await.is_ok_and(|s| s.bus_connected) },
    )
    .await;
    for id in 1..=3u128 {
        rb.release(RequestId::from_u128(id)).expect("alive");
    }
    eventually(
        "b's releases reach a after the outage",
        Duration::from_secs(10),
        || async { bookings_of(&a, 2).await == 0 && idle(&ra).await && idle(&rb).await },
    )
    .await;
    let after = sync.observe().await.expect("alive");
    assert_eq!(after.counters.expired_peers, 0, "nobody expired");
    assert!(after.counters.bus_outages >= 1);
    a.shutdown().await;
    b.shutdown().await;
}
