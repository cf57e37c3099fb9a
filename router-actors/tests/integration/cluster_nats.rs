//! Router nodes on a real nats-server: ledgers converge, a killed peer's bookings expire
//! within its lease, a lost message is repaired by snapshot, RoomChanged from one node's decode
//! pool wakes another node's prefill queue, and a router that fails mid-load is restarted with
//! every ledger on every node at exactly zero when the load is over.
//!
//! Real sockets mean real time: waits poll with a bounded deadline; leases are short.

use crate::support::*;
use router_actors::bus::Bus;
use router_actors::testkit::{Fault, FaultBus};
use router_actors::{RouterMsg, Topology};
use router_core::{PolicyProfile, PoolRole, RequestId, WorkerId};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_converge_under_bookings_and_releases_and_end_idle() {
    let server = start_nats().await;
    let (bus_a, bus_b) = (bus(&server).await, bus(&server).await);
    let a = agg_node(1, &bus_a).await;
    let b = agg_node(2, &bus_b).await;
    let _links = workers(&bus_a, PoolRole::Aggregated, &[1, 2, 3, 4], 100_000).await;
    ready(&a).await;
    ready(&b).await;
    let (ra, rb) = (agg_router(&a), agg_router(&b));
    for id in 1..=60u128 {
        let router = if id % 2 == 0 { &ra } else { &rb };
        admit(router, request(id, 4 + (id % 7) as u32)).await;
        if id % 3 == 0 {
            router
                .prefill_done(RequestId::from_u128(id))
                .expect("alive");
        }
        if id % 5 == 0 {
            router.release(RequestId::from_u128(id)).expect("alive");
        }
    }
    eventually(
        "both ledgers hold the same load",
        Duration::from_secs(5),
        || async {
            let (la, lb) = (loads(&ra).await, loads(&rb).await);
            la == lb && la.iter().map(|l| l.2).sum::<u32>() == 48
        },
    )
    .await;
    for id in 1..=60u128 {
        let router = if id % 2 == 0 { &ra } else { &rb };
        router.release(RequestId::from_u128(id)).expect("alive");
    }
    all_idle(&[&ra, &rb]).await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_peers_bookings_expire_on_the_survivor_within_its_lease() {
    let server = start_nats().await;
    let (bus_a, bus_b) = (bus(&server).await, bus(&server).await);
    let a = agg_node(1, &bus_a).await;
    let b = agg_node(2, &bus_b).await;
    let _links = workers(&bus_b, PoolRole::Aggregated, &[1, 2], 100_000).await;
    ready(&a).await;
    ready(&b).await;
    let ra = agg_router(&a);
    let rb = agg_router(&b);
    for id in 1..=10u128 {
        admit(&ra, request(id, 4)).await;
    }
    eventually("b sees a's bookings", Duration::from_secs(5), || async {
        rb.observe()
            .await
            .map(|s| s.scheduler.ledger.bookings)
            .unwrap_or(0)
            == 10
    })
    .await;
    // Kill a: its actors stop without releasing anything or saying goodbye.
    let killed = Instant::now();
    a.kill().await;
    eventually(
        "a's bookings expire on b",
        LEASE + HEARTBEAT * 4 + Duration::from_secs(1),
        || async { idle(&rb).await },
    )
    .await;
    let took = killed.elapsed();
    assert!(
        took >= LEASE - HEARTBEAT * 2,
        "expired before the lease: {took:?}"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_message_is_detected_and_repaired_by_snapshot() {
    let server = start_nats().await;
    let inner = bus(&server).await;
    let lossy = Arc::new(FaultBus::new(
        inner,
        format!("{CLUSTER}.router.agg.bookings"),
        6,
        Fault::Drop,
    ));
    let bus_b = bus(&server).await;
    let lossy_bus: Arc<dyn Bus> = lossy.clone();
    let a = agg_node(1, &lossy_bus).await;
    let b = agg_node(2, &bus_b).await;
    let _links = workers(&bus_b, PoolRole::Aggregated, &[1, 2], 100_000).await;
    ready(&a).await;
    ready(&b).await;
    let ra = agg_router(&a);
    let rb = agg_router(&b);
    for id in 1..=20u128 {
        admit(&ra, request(id, 3)).await;
    }
    eventually(
        "b repaired to a's state",
        Duration::from_secs(5),
        || async { loads(&ra).await == loads(&rb).await },
    )
    .await;
    assert_eq!(lossy.injected.load(Ordering::SeqCst), 1, "the fault fired");
    let sync = b
        .peer_sync(PoolRole::Aggregated)
        .expect("pool")
        .observe()
        .await
        .expect("alive");
    assert!(
        sync.counters.gaps >= 1 || sync.counters.digest_mismatches >= 1,
        "{:?}",
        sync.counters
    );
    assert!(sync.counters.snapshots_applied >= 1, "{:?}", sync.counters);
    for id in 1..=20u128 {
        ra.release(RequestId::from_u128(id)).expect("alive");
    }
    all_idle(&[&ra, &rb]).await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_changed_from_one_nodes_decode_pool_wakes_another_nodes_prefill_queue() {
    let server = start_nats().await;
    let (bus_a, bus_b) = (bus(&server).await, bus(&server).await);
    let profile = || PolicyProfile::from_toml_str(DISAGG_PROFILE).expect("profile");
    let a = node(1, Topology::Disaggregated, profile(), Arc::clone(&bus_a)).await;
    let b = node(2, Topology::Disaggregated, profile(), Arc::clone(&bus_b)).await;
    let _prefill = workers(&bus_a, PoolRole::Prefill, &[1], 100_000).await;
    // One decode worker of 100 blocks: the class may commit 50.
    let _decode = workers(&bus_a, PoolRole::Decode, &[11], 100).await;
    ready(&a).await;
    ready(&b).await;
    let pa = a.router(PoolRole::Prefill).expect("prefill").clone();
    let pb = b.router(PoolRole::Prefill).expect("prefill").clone();
    let da = a.router(PoolRole::Decode).expect("decode").clone();
    let db = b.router(PoolRole::Decode).expect("decode").clone();
    let mut first = request(1, 40);
    first.phase = router_core::Phase::Prefill;
    let held = admit(&pa, first).await;
    assert!(held.decode_reservation.is_some());
    eventually(
        "b's decode ledger shows a's reservation",
        Duration::from_secs(5),
        || async {
            db.observe()
                .await
                .map(|s| s.scheduler.ledger.reservations)
                .unwrap_or(0)
                == 1
        },
    )
    .await;
    let mut second = request(2, 40);
    second.phase = router_core::Phase::Prefill;
    let waiting = tokio::spawn(async move { pb.route(second).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "b's request must wait for decode room"
    );
    // a's prefill leg fails: the reservation goes back on a's decode pool.
    pa.release(RequestId::from_u128(1)).expect("alive");
    da.unreserve(RequestId::from_u128(1)).expect("alive");
    let out = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken in time")
        .expect("task");
    assert!(out.is_ok(), "{out:?}");
    assert!(
        b.room_counters.received.load(Ordering::Relaxed) >= 1,
        "b heard a's RoomChanged"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_that_fails_mid_load_is_restarted_and_every_ledger_ends_at_zero() {
    let server = start_nats().await;
    let (bus_a, bus_b) = (bus(&server).await, bus(&server).await);
    let a = agg_node(1, &bus_a).await;
    let b = agg_node(2, &bus_b).await;
    let _links = workers(&bus_a, PoolRole::Aggregated, &[1, 2, 3], 100_000).await;
    ready(&a).await;
    ready(&b).await;
    let ra = agg_router(&a);
    let rb = agg_router(&b);
    for id in 1..=30u128 {
        admit(if id % 2 == 0 { &ra } else { &rb }, request(id, 5)).await;
        if id == 15 {
            ra.cast(RouterMsg::InjectFault("injected mid-load".into()))
                .expect("alive");
            eventually("a's router restarted", Duration::from_secs(5), || async {
                ra.observe().await.is_ok()
            })
            .await;
        }
    }
    let children = ractor::call!(
        a.supervisor(),
        router_actors::supervisor::SupervisorMsg::Observe
    )
    .expect("supervisor");
    assert!(
        children
            .iter()
            .any(|c| c.name == "router-agg" && c.restarts == 1),
        "{children:?}"
    );
    for id in 1..=30u128 {
        (if id % 2 == 0 { &ra } else { &rb })
            .release(RequestId::from_u128(id))
            .expect("alive");
    }
    eventually(
        "every ledger on every node at zero",
        Duration::from_secs(8),
        || async { idle(&ra).await && idle(&rb).await },
    )
    .await;
    assert!(a.inflight(PoolRole::Aggregated).expect("pool").is_empty());
    let _ = WorkerId(0);
    a.shutdown().await;
    b.shutdown().await;
}
