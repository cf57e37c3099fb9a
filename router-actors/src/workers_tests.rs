//! The worker side of a node end to end: announcements and leases through the registry, KV
//! events through the KvEventsActor, both published by `WorkerLink`, into the pool's router.
//!
//! Each scenario takes the bus as `Arc<dyn Bus>` so it can be rerun on NATS; the wrappers
//! below run them on the in-process bus on paused tokio time (where lease boundaries are
//! checked to the millisecond).

use crate::bus::Bus;
use crate::bus::local::LocalBus;
use crate::clock::Clock;
use crate::kv_events::{KvEventsArgs, KvEventsConfig, KvEventsHandle};
use crate::registry::{
    EndpointAllowList, RegistryArgs, RegistryConfig, RegistryHandle, RegistryShared,
};
use crate::router::{RouteError, RouterActor, RouterArgs, RouterHandle};
use crate::testkit::{Fault, FaultBus};
use crate::wire::{Envelope, Outbox, Subjects, WIRE_VERSION, WorkerAnnounce, encode};
use crate::worker_link::WorkerLink;
use bytes::Bytes;
use ractor::Actor;
use router_core::admission::{Phase, PoolRole, SchedulerConfig};
use router_core::hashing::local_block_hashes;
use router_core::{
    ExternalHash, KvEvent, KvEventData, PolicyProfile, PoolRouterConfig, PrefixMode, Prompt,
    RankId, RequestId, RouteRequest, RouterId, SharedKvIndex, StoredBlock, WorkerId, WorkerSpec,
};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const CLUSTER: &str = "sy";
const BS: u32 = 16;

const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 500
quantum = 100
prefill_busy_threshold = 100000
"#;

async fn spawn_router(role: PoolRole) -> RouterHandle {
    spawn_router_with(role, SharedKvIndex::default()).await
}

/// A router reading `index` (which a KvEventsActor may write).
async fn spawn_router_with(role: PoolRole, index: SharedKvIndex) -> RouterHandle {
    let clock = Clock::start();
    let args = RouterArgs {
        kv_index: Some(index),
        ..RouterArgs::new(
            PoolRouterConfig {
                scheduler: SchedulerConfig::new(role, RouterId(Uuid::from_u128(1))),
                block_size: BS,
                prefix: PrefixMode::Events,
            },
            PolicyProfile::from_toml_str(PROFILE).expect("valid profile"),
            clock,
        )
    };
    let (actor, _) = Actor::spawn(None, RouterActor, args)
        .await
        .expect("router starts");
    RouterHandle::new(actor, clock)
}

async fn spawn_registry(
    bus: &Arc<dyn Bus>,
    pools: Vec<(PoolRole, RouterHandle)>,
) -> RegistryHandle {
    spawn_registry_allowing(bus, pools, EndpointAllowList::default()).await
}

async fn spawn_registry_allowing(
    bus: &Arc<dyn Bus>,
    pools: Vec<(PoolRole, RouterHandle)>,
    allowed: EndpointAllowList,
) -> RegistryHandle {
    let args = RegistryArgs {
        bus: bus.clone(),
        subjects: Subjects::new(CLUSTER),
        pools,
        config: RegistryConfig::default(),
        shared: RegistryShared::new(),
        allowed_endpoints: Arc::new(allowed),
    };
    RegistryHandle::spawn(None, args)
        .await
        .expect("registry starts")
        .0
}

async fn spawn_kv(bus: &Arc<dyn Bus>, pool: PoolRole, index: &SharedKvIndex) -> KvEventsHandle {
    let args = KvEventsArgs {
        bus: bus.clone(),
        subjects: Subjects::new(CLUSTER),
        pool,
        index: index.clone(),
        config: KvEventsConfig::default(),
    };
    KvEventsHandle::spawn(None, args)
        .await
        .expect("kv events actor starts")
        .0
}

fn spec(id: u64, dp: u32, kv: u64) -> WorkerSpec {
    let mut spec = WorkerSpec::new(id, dp, kv, 8192);
    spec.block_size = BS;
    spec
}

fn announce(spec: WorkerSpec, pool: PoolRole, lease_ms: u64) -> WorkerAnnounce {
    WorkerAnnounce {
        endpoint: format!("http://worker-{}:8000", spec.id.0),
        spec,
        pool,
        heartbeat_ms: lease_ms / 3,
        lease_ms,
        leaving: false,
    }
}

/// Lets forwarders and actors run everything already sent.
async fn settle(bus: &Arc<dyn Bus>) {
    let _ = bus.flush().await;
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

async fn ranks(router: &RouterHandle) -> Vec<(RankId, Option<u64>)> {
    router
        .observe()
        .await
        .expect("router alive")
        .scheduler
        .ledger
        .ranks
        .iter()
        .map(|r| (r.rank, r.total_kv_blocks))
        .collect()
}

fn tokens(seed: u32, blocks: u32) -> Vec<u32> {
    (0..blocks * BS)
        .map(|i| seed.wrapping_mul(7919).wrapping_add(i))
        .collect()
}

fn stored(worker: u64, event_id: u64, tokens: &[u32]) -> KvEvent {
    let blocks = local_block_hashes(tokens, BS as usize, None)
        .into_iter()
        .enumerate()
        .map(|(i, local)| StoredBlock {
            hash: ExternalHash(worker * 1_000_000 + event_id * 1000 + i as u64),
            local,
        })
        .collect();
    KvEvent {
        worker: WorkerId(worker),
        dp_rank: 0,
        event_id,
        data: KvEventData::Stored {
            parent: None,
            blocks,
        },
    }
}

async fn route(
    router: &RouterHandle,
    id: u128,
    prompt: Vec<u32>,
) -> Result<router_core::Admission, RouteError> {
    let request = RouteRequest::new(
        RequestId::from_u128(id),
        router_core::ClassId(0),
        Phase::Aggregated,
        Prompt::Tokens(prompt),
    );
    router.route(request).await
}

fn placed(result: Result<router_core::Admission, RouteError>) -> RankId {
    match result {
        Ok(a) => a.rank,
        other => panic!("expected an admission, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Scenarios

/// Join, capacity change, bookings, expiry exactly at the lease end, and a comeback.
pub(crate) async fn scenario_lease_lifecycle(bus: Arc<dyn Bus>) {
    let subjects = Subjects::new(CLUSTER);
    let router = spawn_router(PoolRole::Aggregated).await;
    let registry = spawn_registry(&bus, vec![(PoolRole::Aggregated, router.clone())]).await;
    let mut ready = registry.known_workers();
    assert_eq!(*ready.borrow_and_update(), 0);
    let subject = subjects.announce(PoolRole::Aggregated);
    let mut outbox = Outbox::new(CLUSTER, Uuid::from_u128(7));
    let mut send = async |a: &WorkerAnnounce| {
        let payload = outbox.seal(&subject, a).expect("encodes");
        bus.publish(subject.clone(), payload)
            .await
            .expect("published");
        settle(&bus).await;
    };

    let first = announce(spec(1, 2, 1000), PoolRole::Aggregated, 1000);
    send(&first).await;
    assert_eq!(
        ranks(&router).await,
        vec![
            (RankId::new(1, 0), Some(1000)),
            (RankId::new(1, 1), Some(1000))
        ]
    );
    assert_eq!(
        registry.endpoint(WorkerId(1)).as_deref(),
        Some("http://worker-1:8000")
    );
    assert_eq!(
        registry.workers(PoolRole::Aggregated),
        vec![(WorkerId(1), "http://worker-1:8000".to_owned())]
    );
    assert!(ready.has_changed().expect("registry alive"));
    assert_eq!(*ready.borrow_and_update(), 1);

    // A changed spec updates capacity; the same spec again changes nothing.
    let bigger = announce(spec(1, 2, 2000), PoolRole::Aggregated, 1000);
    send(&bigger).await;
    send(&bigger).await;
    assert_eq!(
        ranks(&router).await,
        vec![
            (RankId::new(1, 0), Some(2000)),
            (RankId::new(1, 1), Some(2000))
        ]
    );

    // A booking on it, then silence: present 1 ms before the lease end, gone 1 ms after.
    placed(route(&router, 1, tokens(1, 4)).await);
    assert_eq!(
        router.observe().await.map(|s| s.scheduler.ledger.bookings),
        Ok(1)
    );
    tokio::time::sleep(Duration::from_millis(999)).await;
    settle(&bus).await;
    assert_eq!(ranks(&router).await.len(), 2, "gone before its lease ended");
    tokio::time::sleep(Duration::from_millis(2)).await;
    settle(&bus).await;
    let snap = registry.observe().await.expect("registry alive");
    assert!(snap.workers.is_empty(), "{snap:?}");
    assert_eq!(
        (
            snap.counters.joined,
            snap.counters.updated,
            snap.counters.expired
        ),
        (1, 1, 1)
    );
    assert_eq!(snap.counters.announcements, 3);
    let state = router.observe().await.expect("router alive");
    assert!(state.scheduler.ledger.ranks.is_empty());
    assert_eq!(
        state.scheduler.ledger.bookings, 0,
        "its bookings go with it"
    );
    assert_eq!(registry.endpoint(WorkerId(1)), None);
    assert_eq!(*ready.borrow_and_update(), 0);

    // It comes back with its next announcement.
    send(&bigger).await;
    assert_eq!(ranks(&router).await.len(), 2);
    assert_eq!(*ready.borrow_and_update(), 1);
    let snap = registry.observe().await.expect("registry alive");
    assert_eq!(snap.counters.joined, 2);
    assert_eq!(snap.workers.first().map(|w| w.lease_ms), Some(1000));
}

/// Announcements for pools the node does not serve, garbage, foreign clusters, invalid
/// specs and stale repeats are counted and change nothing.
pub(crate) async fn scenario_refused_announcements(bus: Arc<dyn Bus>) {
    let subjects = Subjects::new(CLUSTER);
    let agg = spawn_router(PoolRole::Aggregated).await;
    let prefill = spawn_router(PoolRole::Prefill).await;
    let registry = spawn_registry(
        &bus,
        vec![
            (PoolRole::Aggregated, agg.clone()),
            (PoolRole::Prefill, prefill.clone()),
        ],
    )
    .await;
    let subject = subjects.announce(PoolRole::Aggregated);
    let mut outbox = Outbox::new(CLUSTER, Uuid::from_u128(7));
    let publish = async |payload: Bytes| {
        bus.publish(subject.clone(), payload)
            .await
            .expect("published");
    };
    // Not served here.
    let decode = announce(spec(1, 1, 100), PoolRole::Decode, 1000);
    publish(outbox.seal(&subject, &decode).expect("encodes")).await;
    // Served, but not this subject's pool.
    let wrong = announce(spec(2, 1, 100), PoolRole::Prefill, 1000);
    publish(outbox.seal(&subject, &wrong).expect("encodes")).await;
    // An invalid spec.
    let invalid = announce(spec(3, 0, 100), PoolRole::Aggregated, 1000);
    publish(outbox.seal(&subject, &invalid).expect("encodes")).await;
    // Garbage, a truncated envelope, another cluster, a future wire version.
    publish(Bytes::from_static(b"\xff\x00garbage")).await;
    let good = announce(spec(4, 1, 100), PoolRole::Aggregated, 1000);
    let mut whole = outbox.seal(&subject, &good).expect("encodes");
    publish(whole.split_to(whole.len() / 2)).await;
    let mut other = Outbox::new("other", Uuid::from_u128(8));
    publish(other.seal(&subject, &good).expect("encodes")).await;
    let future = Envelope {
        v: WIRE_VERSION + 1,
        cluster: CLUSTER.to_owned(),
        sender: Uuid::from_u128(9),
        seq: 1,
        sent_at_us: 0,
        body: good.clone(),
    };
    publish(encode(&future).expect("encodes")).await;
    settle(&bus).await;

    let snap = registry.observe().await.expect("registry alive");
    assert!(snap.workers.is_empty(), "{snap:?}");
    let c = &snap.counters;
    assert_eq!(
        (c.unserved_pool, c.pool_mismatch, c.invalid_spec, c.joined),
        (1, 1, 1, 0)
    );
    assert_eq!(
        (
            snap.edge.malformed,
            snap.edge.foreign_cluster,
            snap.edge.unknown_version
        ),
        (2, 1, 1)
    );
    assert_eq!(snap.edge.received, 7);
    assert!(ranks(&agg).await.is_empty());
    assert!(ranks(&prefill).await.is_empty());
    assert_eq!(*registry.known_workers().borrow(), 0);

    // A good one joins; a replay of an older announcement is stale; a too-short lease is
    // raised to the floor.
    let fresh = announce(spec(4, 1, 100), PoolRole::Aggregated, 1);
    let payload = outbox.seal(&subject, &fresh).expect("encodes");
    publish(payload).await;
    let replay = Envelope {
        v: WIRE_VERSION,
        cluster: CLUSTER.to_owned(),
        sender: Uuid::from_u128(7),
        seq: 1,
        sent_at_us: 0,
        body: fresh.clone(),
    };
    publish(encode(&replay).expect("encodes")).await;
    settle(&bus).await;
    let snap = registry.observe().await.expect("registry alive");
    assert_eq!(snap.workers.len(), 1);
    assert_eq!(snap.workers.first().map(|w| w.lease_ms), Some(100));
    assert_eq!((snap.counters.stale, snap.counters.lease_clamped), (1, 1));
    assert_eq!(ranks(&agg).await, vec![(RankId::new(4, 0), Some(100))]);
}

/// KV events published through `WorkerLink` reach the router's index: a request whose
/// prefix one worker stored is placed on that worker. A lost batch is counted as a gap.
pub(crate) async fn scenario_kv_events_reach_the_index(bus: Arc<dyn Bus>) {
    let subjects = Subjects::new(CLUSTER);
    let index = SharedKvIndex::default();
    let router = spawn_router_with(PoolRole::Aggregated, index.clone()).await;
    let registry = spawn_registry(&bus, vec![(PoolRole::Aggregated, router.clone())]).await;
    let kv = spawn_kv(&bus, PoolRole::Aggregated, &index).await;
    let lossy: Arc<dyn Bus> = Arc::new(FaultBus::new(
        bus.clone(),
        subjects.kv_events(PoolRole::Aggregated),
        2,
        Fault::Drop,
    ));
    let period = Duration::from_millis(100);
    let mut links = Vec::new();
    for w in 1..=3 {
        let a = announce(spec(w, 1, 10_000), PoolRole::Aggregated, 1000);
        links.push(
            WorkerLink::start(lossy.clone(), &subjects, a, period)
                .await
                .expect("link starts"),
        );
    }
    settle(&bus).await;
    assert_eq!(ranks(&router).await.len(), 3);

    let link = links.get(1).expect("worker 2");
    let prompt = tokens(42, 8);
    link.publish_kv_events(vec![stored(2, 1, &prompt)])
        .await
        .expect("published");
    // The second batch is lost on the way; the third arrives after a gap.
    link.publish_kv_events(vec![stored(2, 2, &tokens(43, 2))])
        .await
        .expect("published");
    let evicted = KvEvent {
        worker: WorkerId(2),
        dp_rank: 0,
        event_id: 3,
        data: KvEventData::Removed {
            hashes: vec![ExternalHash(2_000_000 + 1000 + 7)],
        },
    };
    link.publish_kv_events(vec![evicted])
        .await
        .expect("published");
    settle(&bus).await;

    assert_eq!(
        placed(route(&router, 1, prompt.clone()).await),
        RankId::new(2, 0),
        "the request follows the prefix worker 2 stored"
    );
    let snap = kv.observe().await.expect("kv actor alive");
    assert_eq!(snap.counters.batches, 2);
    assert_eq!(
        (snap.counters.events.stored, snap.counters.events.removed),
        (1, 1)
    );
    assert_eq!((snap.counters.gaps, snap.counters.missed), (1, 1));
    let publisher = snap.publishers.first().expect("one publisher");
    assert_eq!(snap.publishers.len(), 1);
    assert_eq!(
        (publisher.sender, publisher.last_seq, publisher.gaps),
        (link.sender(), 3, 1)
    );

    // A duplicated batch is dropped as stale; garbage on the subject is counted.
    let replay = Envelope {
        v: WIRE_VERSION,
        cluster: CLUSTER.to_owned(),
        sender: link.sender(),
        seq: 1,
        sent_at_us: 0,
        body: vec![stored(2, 1, &prompt)],
    };
    let kv_subject = subjects.kv_events(PoolRole::Aggregated);
    bus.publish(kv_subject.clone(), encode(&replay).expect("encodes"))
        .await
        .expect("published");
    bus.publish(kv_subject, Bytes::from_static(b"nonsense"))
        .await
        .expect("published");
    settle(&bus).await;
    let snap = kv.observe().await.expect("kv actor alive");
    assert_eq!((snap.counters.stale, snap.edge.malformed), (1, 1));
    assert_eq!(snap.counters.refused, 0, "{:?}", snap.counters);

    // The worker leaves (its lease runs out): its index entries go with it.
    drop(links);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle(&bus).await;
    assert!(registry.observe().await.expect("alive").workers.is_empty());
    assert!(ranks(&router).await.is_empty());
}

/// `WorkerLink` heartbeats keep a worker alive across many leases; an update goes out at
/// once; after the link is dropped the worker leaves within one lease.
pub(crate) async fn scenario_heartbeats_keep_a_worker(bus: Arc<dyn Bus>) {
    let subjects = Subjects::new(CLUSTER);
    let router = spawn_router(PoolRole::Aggregated).await;
    let registry = spawn_registry(&bus, vec![(PoolRole::Aggregated, router.clone())]).await;
    let a = announce(spec(5, 1, 500), PoolRole::Aggregated, 300);
    let link = WorkerLink::start(
        bus.clone(),
        &subjects,
        a.clone(),
        Duration::from_millis(100),
    )
    .await
    .expect("link starts");
    settle(&bus).await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        settle(&bus).await;
        assert_eq!(ranks(&router).await.len(), 1, "dropped while heart-beating");
    }
    let snap = registry.observe().await.expect("registry alive");
    assert_eq!((snap.counters.joined, snap.counters.expired), (1, 0));
    assert!(snap.counters.announcements >= 30, "{:?}", snap.counters);
    assert_eq!(
        snap.workers.first().map(|w| w.announcements),
        Some(snap.counters.announcements)
    );
    assert_eq!(snap.edge.overflow, 0);

    let mut bigger = a;
    bigger.spec.total_kv_blocks = Some(900);
    link.update(bigger);
    settle(&bus).await;
    assert_eq!(ranks(&router).await, vec![(RankId::new(5, 0), Some(900))]);

    link.shutdown().await.expect("flushes");
    tokio::time::sleep(Duration::from_millis(301)).await;
    settle(&bus).await;
    assert!(ranks(&router).await.is_empty());
    assert_eq!(registry.observe().await.map(|s| s.counters.expired), Ok(1));
}

// ---------------------------------------------------------------------------------------
// On the in-process bus, paused time.

fn local() -> Arc<dyn Bus> {
    Arc::new(LocalBus::new())
}

#[tokio::test(start_paused = true)]
async fn an_announced_worker_joins_updates_expires_at_its_lease_and_comes_back() {
    scenario_lease_lifecycle(local()).await;
}

#[tokio::test(start_paused = true)]
async fn unserved_pools_garbage_and_foreign_payloads_are_counted_and_ignored() {
    scenario_refused_announcements(local()).await;
}

#[tokio::test(start_paused = true)]
async fn kv_events_from_a_worker_link_place_requests_and_gaps_are_counted() {
    scenario_kv_events_reach_the_index(local()).await;
}

#[tokio::test(start_paused = true)]
async fn heartbeats_keep_a_worker_alive_across_many_leases() {
    scenario_heartbeats_keep_a_worker(local()).await;
}

#[tokio::test(start_paused = true)]
async fn a_restarted_worker_process_is_a_new_incarnation() {
    let bus = local();
    let subjects = Subjects::new(CLUSTER);
    let index = SharedKvIndex::default();
    let router = spawn_router_with(PoolRole::Aggregated, index.clone()).await;
    let registry = spawn_registry(&bus, vec![(PoolRole::Aggregated, router.clone())]).await;
    let kv = spawn_kv(&bus, PoolRole::Aggregated, &index).await;
    let a = announce(spec(1, 1, 10_000), PoolRole::Aggregated, 1000);
    let b = announce(spec(2, 1, 10_000), PoolRole::Aggregated, 1000);
    let period = Duration::from_millis(100);
    let first = WorkerLink::start(bus.clone(), &subjects, a.clone(), period)
        .await
        .expect("link starts");
    let _other = WorkerLink::start(bus.clone(), &subjects, b, period)
        .await
        .expect("link starts");
    settle(&bus).await;
    let prompt = tokens(9, 8);
    first
        .publish_kv_events(vec![stored(1, 1, &prompt)])
        .await
        .expect("published");
    settle(&bus).await;
    assert_eq!(
        placed(route(&router, 1, prompt.clone()).await),
        RankId::new(1, 0)
    );
    router.release(RequestId::from_u128(1)).expect("alive");
    // The process restarts with an empty cache under the same worker id.
    drop(first);
    let _second = WorkerLink::start(bus.clone(), &subjects, a, period)
        .await
        .expect("link starts");
    settle(&bus).await;
    let snap = registry.observe().await.expect("alive");
    assert_eq!((snap.counters.incarnations, snap.workers.len()), (1, 2));
    assert_eq!(
        router
            .observe()
            .await
            .map(|s| s.scheduler.ledger.ranks.len()),
        Ok(2)
    );
    // Worker 1 carries a little load (a peer's 2-block booking). Had its stale prefix stayed
    // in the index, the prompt would still go there (cost 2 + 2 + 8 = 12 against 16); with
    // the new incarnation's empty cache it goes to the idle worker 2 (20 against 16).
    router
        .cast(crate::router::RouterMsg::Peer {
            owner: RouterId(Uuid::from_u128(2)),
            delta: crate::wire::BookingDelta::Book {
                request: RequestId::from_u128(99),
                booking: router_core::ledger::Booking {
                    rank: RankId::new(1, 0),
                    block_hashes: vec![],
                    prefill_tokens: 32,
                    extra_blocks: 2,
                },
            },
            sent_at_us: None,
        })
        .expect("alive");
    assert_eq!(placed(route(&router, 2, prompt).await), RankId::new(2, 0));
    assert_eq!(kv.observe().await.map(|s| s.counters.events.stored), Ok(1));
}

/// An announcement naming a host outside the allow-list is refused and counted: the worker
/// never joins the router, so nothing is routed to it; a known worker that moves to a refused
/// host keeps its allowed endpoint.
#[tokio::test(start_paused = true)]
async fn an_endpoint_outside_the_allow_list_is_refused_and_never_routed_to() {
    let bus = local();
    let subject = Subjects::new(CLUSTER).announce(PoolRole::Aggregated);
    let router = spawn_router(PoolRole::Aggregated).await;
    let allowed = EndpointAllowList::parse(&["10.0.0.0/8", "engine.local"]).expect("valid list");
    let registry =
        spawn_registry_allowing(&bus, vec![(PoolRole::Aggregated, router.clone())], allowed).await;
    let mut good = announce(spec(1, 1, 10_000), PoolRole::Aggregated, 1000);
    good.endpoint = "http://10.1.2.3:8000".to_owned();
    let mut evil = announce(spec(2, 1, 10_000), PoolRole::Aggregated, 1000);
    evil.endpoint = "http://169.254.169.254:80".to_owned();
    let mut sneaky = announce(spec(3, 1, 10_000), PoolRole::Aggregated, 1000);
    sneaky.endpoint = "http://10.0.0.1:80@attacker.example".to_owned();
    let mut outboxes: Vec<Outbox> = (1..=3)
        .map(|i| Outbox::new(CLUSTER, Uuid::from_u128(100 + i)))
        .collect();
    for _ in 0..3 {
        for (outbox, a) in outboxes.iter_mut().zip([&good, &evil, &sneaky]) {
            let payload = outbox.seal(&subject, a).expect("encodes");
            bus.publish(subject.clone(), payload)
                .await
                .expect("published");
        }
    }
    settle(&bus).await;
    assert_eq!(
        ranks(&router).await,
        vec![(RankId::new(1, 0), Some(10_000))]
    );
    assert_eq!(registry.endpoint(WorkerId(2)), None);
    assert_eq!(registry.endpoint(WorkerId(3)), None);
    for id in 1..=20 {
        assert_eq!(
            placed(route(&router, id, tokens(id as u32, 4)).await),
            RankId::new(1, 0)
        );
    }
    let snap = registry.observe().await.expect("alive");
    assert_eq!(snap.counters.endpoint_refused, 6, "{:?}", snap.counters);
    assert_eq!(snap.counters.joined, 1);

    // Worker 1 moves to a refused host: refused, and it keeps its allowed endpoint.
    good.endpoint = "http://192.168.1.1:8000".to_owned();
    let payload = outboxes[0].seal(&subject, &good).expect("encodes");
    bus.publish(subject.clone(), payload)
        .await
        .expect("published");
    settle(&bus).await;
    assert_eq!(
        registry.endpoint(WorkerId(1)).as_deref(),
        Some("http://10.1.2.3:8000")
    );
    assert_eq!(
        registry
            .observe()
            .await
            .map(|s| s.counters.endpoint_refused),
        Ok(7)
    );
}

/// The whole machine stops for ten leases (a paused VM: nothing runs, the clock goes on). When
/// it runs again the worker is kept: its announcements could not be heard meanwhile. Silent
/// afterwards, it still leaves within one lease of listening.
#[tokio::test(start_paused = true)]
async fn a_stop_of_the_node_is_not_a_silent_worker() {
    let bus = local();
    let subjects = Subjects::new(CLUSTER);
    let router = spawn_router(PoolRole::Aggregated).await;
    let registry = spawn_registry(&bus, vec![(PoolRole::Aggregated, router.clone())]).await;
    let subject = subjects.announce(PoolRole::Aggregated);
    let mut outbox = Outbox::new(CLUSTER, Uuid::from_u128(7));
    let payload = outbox
        .seal(
            &subject,
            announce(spec(1, 1, 1000), PoolRole::Aggregated, 1000),
        )
        .expect("encodes");
    bus.publish(subject.clone(), payload)
        .await
        .expect("published");
    settle(&bus).await;
    assert_eq!(ranks(&router).await.len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;

    tokio::time::advance(Duration::from_secs(10)).await;
    settle(&bus).await;
    let snap = registry.observe().await.expect("registry alive");
    assert_eq!(snap.workers.len(), 1, "expired by a stop of the node");
    assert_eq!(
        (snap.counters.expired, snap.counters.leases_kept_stopped),
        (0, 1)
    );
    assert_eq!(ranks(&router).await.len(), 1);

    tokio::time::sleep(Duration::from_millis(1001)).await;
    settle(&bus).await;
    let snap = registry.observe().await.expect("registry alive");
    assert!(snap.workers.is_empty(), "{snap:?}");
    assert_eq!(snap.counters.expired, 1);
    assert!(ranks(&router).await.is_empty());
}
