//! What the router nodes on a real nats-server share in these tests: the bus, a node's
//! config with short leases, announced workers, readiness, requests and ledger checks.

#![allow(dead_code)]

use router_actors::bus::Bus;
use router_actors::bus::nats::NatsBus;
use router_actors::testkit::NatsServer;
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{Node, NodeConfig, PeerSyncConfig, RouterHandle, Topology, WorkerLink};
use router_core::{PolicyProfile, PoolRole, Prompt, RequestId, RouteRequest, RouterId, WorkerSpec};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub const CLUSTER: &str = "itest";
pub const LEASE: Duration = Duration::from_millis(800);
pub const HEARTBEAT: Duration = Duration::from_millis(100);

pub const DISAGG_PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 30000
quantum = 100
prefill_busy_threshold = 100000
decode_busy_threshold_frac = 0.5
"#;

pub async fn bus(server: &NatsServer) -> Arc<dyn Bus> {
    Arc::new(
        NatsBus::connect(server.url())
            .await
            .expect("connects to nats-server"),
    )
}

pub fn config(id: u128, topology: Topology, profile: PolicyProfile) -> NodeConfig {
    let mut c = NodeConfig::new(
        CLUSTER,
        RouterId(uuid::Uuid::from_u128(id)),
        topology,
        profile,
    );
    c.peer_sync = PeerSyncConfig {
        heartbeat_every: HEARTBEAT,
        lease: LEASE,
        snapshot_window: Duration::from_millis(300),
        snapshot_timeout: Duration::from_millis(500),
        ..PeerSyncConfig::default()
    };
    c.recheck_every = Duration::from_millis(200);
    c
}

pub async fn workers(bus: &Arc<dyn Bus>, pool: PoolRole, ids: &[u64], kv: u64) -> Vec<WorkerLink> {
    let mut links = Vec::new();
    for &id in ids {
        let announce = WorkerAnnounce {
            spec: WorkerSpec::new(id, 1, kv, 100_000),
            pool,
            endpoint: format!("http://127.0.0.1:1/{id}"),
            heartbeat_ms: 0,
            lease_ms: 5_000,
            leaving: false,
        };
        let subjects = Subjects::new(CLUSTER);
        links.push(
            WorkerLink::start(
                Arc::clone(bus),
                &subjects,
                announce,
                Duration::from_millis(200),
            )
            .await
            .expect("announces"),
        );
    }
    links
}

pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not within {limit:?}: {what}");
}

/// A router node of this test cluster on `bus`.
pub async fn node(id: u128, topology: Topology, profile: PolicyProfile, bus: Arc<dyn Bus>) -> Node {
    Node::start(config(id, topology, profile), bus)
        .await
        .unwrap_or_else(|e| panic!("node {id} starts: {e}"))
}

/// An aggregated-pool node with the fallback profile (one class, never queues).
pub async fn agg_node(id: u128, bus: &Arc<dyn Bus>) -> Node {
    node(
        id,
        Topology::Aggregated,
        PolicyProfile::fallback(),
        Arc::clone(bus),
    )
    .await
}

/// The aggregated pool's router of `node`.
pub fn agg_router(node: &Node) -> RouterHandle {
    node.router(PoolRole::Aggregated).expect("pool").clone()
}

pub async fn start_nats() -> NatsServer {
    NatsServer::start()
        .await
        .expect("nats-server (run scripts/install-nats.sh)")
}

/// Waits until every one of `routers` holds nothing.
pub async fn all_idle(routers: &[&RouterHandle]) {
    eventually("every ledger idle", Duration::from_secs(5), || async {
        for router in routers {
            if !idle(router).await {
                return false;
            }
        }
        true
    })
    .await;
}

pub async fn ready(node: &Node) {
    let mut rx = node.ready();
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|r| *r))
        .await
        .expect("node ready in time")
        .expect("alive");
}

pub fn request(id: u128, blocks: u32) -> RouteRequest {
    let tokens = (0..blocks * 16).map(|t| t + id as u32 * 100_000).collect();
    RouteRequest::new(
        RequestId::from_u128(id),
        router_core::ClassId(0),
        router_core::Phase::Aggregated,
        Prompt::Tokens(tokens),
    )
}

pub async fn admit(router: &RouterHandle, r: RouteRequest) -> router_core::Admission {
    match router.route(r).await {
        Ok(a) => a,
        other => panic!("expected an admission, got {other:?}"),
    }
}

/// Per-rank (prefill, decode blocks, requests) of a node's pool ledger.
pub async fn loads(router: &RouterHandle) -> Vec<(u64, u64, u32)> {
    let snap = router.observe().await.expect("alive");
    snap.scheduler
        .ledger
        .ranks
        .iter()
        .map(|r| (r.prefill_tokens, r.decode_blocks, r.requests))
        .collect()
}

pub async fn idle(router: &RouterHandle) -> bool {
    router
        .observe()
        .await
        .map(|s| s.scheduler.ledger.is_idle())
        .unwrap_or(false)
}
