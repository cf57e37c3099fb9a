//! Supervision of a whole node on the in-process bus (tokio time, paused): a peer-sync actor
//! that fails is restarted behind the same handle on the same delta queue while its router
//! keeps routing, and the peers' ledgers converge again; a node whose supervisor escalates
//! says it is no longer alive; calls on a node that is gone fail instead of hanging; a
//! restarted registry keeps its workers and their leases.

use router_actors::bus::Bus;
use router_actors::bus::local::LocalBus;
use router_actors::supervisor::{RestartPolicy, SupervisorMsg};
use router_actors::wire::{Subjects, WorkerAnnounce};
use router_actors::{
    CallError, Node, NodeConfig, PeerSyncConfig, PeerSyncMsg, RouterHandle, RouterMsg, Topology,
    WorkerLink,
};
use router_core::{PolicyProfile, PoolRole, Prompt, RequestId, RouteRequest, RouterId, WorkerSpec};
use std::sync::Arc;
use std::time::Duration;

const CLUSTER: &str = "supervision";
const POOL: PoolRole = PoolRole::Aggregated;

fn config(id: u128) -> NodeConfig {
    let mut c = NodeConfig::new(
        CLUSTER,
        RouterId(uuid::Uuid::from_u128(id)),
        Topology::Aggregated,
        PolicyProfile::fallback(),
    );
    c.peer_sync = PeerSyncConfig {
        heartbeat_every: Duration::from_millis(100),
        lease: Duration::from_secs(2),
        snapshot_window: Duration::from_millis(300),
        snapshot_timeout: Duration::from_millis(500),
        ..PeerSyncConfig::default()
    };
    c
}

async fn start(config: NodeConfig, bus: &Arc<dyn Bus>) -> Node {
    Node::start(config, Arc::clone(bus))
        .await
        .unwrap_or_else(|e| panic!("node starts: {e}"))
}

async fn workers(bus: &Arc<dyn Bus>, ids: &[u64]) -> Vec<WorkerLink> {
    let mut links = Vec::new();
    for &id in ids {
        let announce = WorkerAnnounce {
            spec: WorkerSpec::new(id, 1, 100_000, 100_000),
            pool: POOL,
            endpoint: format!("http://127.0.0.1:1/{id}"),
            heartbeat_ms: 0,
            lease_ms: 5_000,
            leaving: false,
        };
        let link = WorkerLink::start(
            Arc::clone(bus),
            &Subjects::new(CLUSTER),
            announce,
            Duration::from_millis(200),
        )
        .await
        .expect("announces");
        links.push(link);
    }
    links
}

async fn ready(node: &Node) {
    let mut rx = node.ready();
    tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|r| *r))
        .await
        .expect("node ready in time")
        .expect("alive");
}

/// Polls `check` every 20 ms of (paused) tokio time, up to `limit`.
async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not within {limit:?}: {what}");
}

fn request(id: u128) -> RouteRequest {
    let tokens = (0..32).map(|t| t + id as u32 * 100_000).collect();
    RouteRequest::new(
        RequestId::from_u128(id),
        router_core::ClassId(0),
        router_core::Phase::Aggregated,
        Prompt::Tokens(tokens),
    )
}

async fn admit(router: &RouterHandle, id: u128) {
    match router.route(request(id)).await {
        Ok(_) => {}
        other => panic!("request {id}: expected an admission, got {other:?}"),
    }
}

/// Whether `holder`'s ledger holds exactly what `owner`'s router holds as its own.
async fn mirrors(holder: &RouterHandle, owner: &RouterHandle, owner_id: RouterId) -> bool {
    let (Ok(own), Ok(held)) = (owner.own_state().await, holder.state_of(owner_id).await) else {
        return false;
    };
    own.bookings == held.bookings && own.reservations == held.reservations
}

async fn restarts_of(node: &Node, child: &str) -> u64 {
    let children = ractor::call!(node.supervisor(), SupervisorMsg::Observe).expect("supervisor");
    children
        .iter()
        .find(|c| c.name == child)
        .map_or(0, |c| c.restarts)
}

#[tokio::test(start_paused = true)]
async fn a_failed_peer_sync_is_restarted_the_node_keeps_routing_and_peers_converge() {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let a = start(config(1), &bus).await;
    let b = start(config(2), &bus).await;
    let _links = workers(&bus, &[1, 2, 3]).await;
    ready(&a).await;
    ready(&b).await;
    let (ra, rb) = (a.router(POOL).expect("pool"), b.router(POOL).expect("pool"));
    let (ida, idb) = (a.config.router_id, b.config.router_id);
    for id in 1..=10u128 {
        admit(if id % 2 == 0 { ra } else { rb }, id).await;
    }
    eventually("b holds a's bookings", Duration::from_secs(5), || {
        mirrors(rb, ra, ida)
    })
    .await;

    let sync = a.peer_sync(POOL).expect("pool").clone();
    assert!(sync.cast(PeerSyncMsg::InjectFault("injected".into())));
    // While peer sync is down and restarting, the router keeps admitting; its deltas wait in
    // the queue the next incarnation takes over.
    for id in 11..=20u128 {
        admit(ra, id).await;
    }
    for id in [2u128, 4, 12] {
        ra.release(RequestId::from_u128(id)).expect("alive");
    }
    eventually("peer sync failure seen", Duration::from_secs(5), || async {
        restarts_of(&a, "peer-sync-agg").await == 1
    })
    .await;
    // The handle the node gave out before the failure reaches the new incarnation.
    eventually("peer sync back", Duration::from_secs(5), || async {
        sync.observe().await.is_ok_and(|s| s.me == ida)
    })
    .await;
    eventually("b converges on a's state", Duration::from_secs(5), || {
        mirrors(rb, ra, ida)
    })
    .await;
    eventually("a converges on b's state", Duration::from_secs(5), || {
        mirrors(ra, rb, idb)
    })
    .await;
    let own = ra.own_state().await.expect("alive");
    assert_eq!(own.bookings.len(), 5 + 10 - 3, "{own:?}");

    // Everything released on both sides: both ledgers end empty everywhere.
    for id in 1..=20u128 {
        let _ = (if id > 10 || id % 2 == 0 { ra } else { rb }).release(RequestId::from_u128(id));
    }
    eventually("every ledger idle", Duration::from_secs(5), || async {
        let a_idle = ra
            .observe()
            .await
            .is_ok_and(|s| s.scheduler.ledger.is_idle());
        let b_idle = rb
            .observe()
            .await
            .is_ok_and(|s| s.scheduler.ledger.is_idle());
        a_idle && b_idle
    })
    .await;
    assert_eq!(restarts_of(&a, "peer-sync-agg").await, 1);
    assert!(a.is_alive());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_supervisor_escalates_is_no_longer_alive_and_calls_fail() {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let mut c = config(1);
    c.restart = RestartPolicy {
        max_restarts: 0,
        ..RestartPolicy::default()
    };
    let node = start(c, &bus).await;
    let mut alive = node.alive();
    assert!(alive.borrow().is_alive());
    let router = node.router(POOL).expect("pool").clone();
    router
        .cast(RouterMsg::InjectFault("past the budget".into()))
        .expect("alive");
    tokio::time::timeout(Duration::from_secs(5), alive.wait_for(|a| !a.is_alive()))
        .await
        .expect("escalation seen in time")
        .expect("watch open");
    assert!(!node.is_alive());
    // The reason names the child that failed too often, and why.
    let reason = alive
        .borrow()
        .reason()
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(reason.contains("supervisor gave up"), "{reason}");
    assert!(reason.contains("router-agg"), "{reason}");
    assert!(reason.contains("past the budget"), "{reason}");
    // Every child went with the supervisor: calls through the node's handles fail.
    let sync = node.peer_sync(POOL).expect("pool");
    eventually("peer sync gone", Duration::from_secs(1), || async {
        sync.observe().await == Err(CallError::Gone)
    })
    .await;
    assert_eq!(
        node.registry().observe().await.map(|_| ()),
        Err(CallError::Gone)
    );
    node.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_stopped_registry_or_kv_events_actor_is_restarted_behind_the_same_handle() {
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let node = start(config(1), &bus).await;
    let links = workers(&bus, &[1, 2]).await;
    ready(&node).await;
    let registry = node.registry().clone();
    let kv = node.kv_events(POOL).expect("pool").clone();
    assert_eq!(registry.directory().len(), 2);

    registry.actor().expect("running").stop(None);
    kv.actor().expect("running").stop(None);
    eventually("both restarted", Duration::from_secs(5), || async {
        restarts_of(&node, "worker-registry").await == 1
            && restarts_of(&node, "kv-events-agg").await == 1
            && registry.observe().await.is_ok()
            && kv.observe().await.is_ok()
    })
    .await;
    // The restarted registry carries on with the workers it knew: the directory never
    // emptied, and their leases still run.
    assert_eq!(registry.directory().len(), 2);
    let snap = registry.observe().await.expect("alive");
    assert_eq!(snap.workers.len(), 2, "{snap:?}");
    drop(links);
    eventually("silent workers expire", Duration::from_secs(10), || async {
        registry.directory().is_empty()
    })
    .await;
    assert!(node.is_alive());
    node.shutdown().await;
}

/// A required actor gone and not being restarted: the supervisor is stuck restarting another
/// child (its start never ends), so the router that fails meanwhile stays gone. The node
/// stops being alive once the grace has passed, naming both; while the grace runs it is
/// still alive (a child being restarted is not a failure).
#[tokio::test(start_paused = true)]
async fn a_required_actor_gone_and_not_restarted_makes_the_node_not_alive_naming_it() {
    use router_actors::testkit::StuckChild;
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new());
    let mut c = config(1);
    let (spec, stuck) = StuckChild::spec("stuck-child");
    c.extra_children.push(spec);
    c.liveness_grace = Duration::from_secs(3);
    let node = start(c, &bus).await;
    let _links = workers(&bus, &[1]).await;
    ready(&node).await;
    let router = node.router(POOL).expect("pool").clone();

    stuck.stop();
    router
        .cast(RouterMsg::InjectFault("gone for good".into()))
        .expect("alive");
    // Within the grace (past the restart's backoff): still alive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(node.is_alive(), "{:?}", *node.alive().borrow());
    assert!(router.observe().await.is_err(), "the router is gone");
    let mut alive = node.alive();
    tokio::time::timeout(Duration::from_secs(5), alive.wait_for(|a| !a.is_alive()))
        .await
        .expect("seen in time")
        .expect("watch open");
    let reason = alive
        .borrow()
        .reason()
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(reason.contains("actor router-agg gone"), "{reason}");
    assert!(reason.contains("actor stuck-child gone"), "{reason}");
    assert!(
        !reason.contains("peer-sync"),
        "running children are not named: {reason}"
    );
    node.kill().await;
}
