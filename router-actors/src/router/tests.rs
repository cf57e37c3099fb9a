//! RouterActor behaviour on paused tokio time: replies after queueing, exact deadline
//! expiry from its own timer, callers that go away, own deltas for peer sync, peers' deltas,
//! and the paired prefill/decode pools of one node.

use super::*;
use crate::room_view::room_channel;
use ractor::Actor;
use router_core::admission::{Phase, PoolRole, RejectReason, SchedulerConfig};
use router_core::ledger::Booking;
use router_core::{PrefixMode, Prompt, RankId};
use std::time::Duration;
use uuid::Uuid;

const NODE: RouterId = RouterId(Uuid::from_u128(1));
const PEER: RouterId = RouterId(Uuid::from_u128(2));

const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 500
quantum = 100
prefill_busy_threshold = 1000
decode_busy_threshold_frac = 0.5
"#;

fn args(role: PoolRole, clock: Clock) -> RouterArgs {
    RouterArgs::new(
        PoolRouterConfig {
            scheduler: SchedulerConfig::new(role, NODE),
            block_size: 16,
            prefix: PrefixMode::Events,
        },
        PolicyProfile::from_toml_str(PROFILE).expect("valid profile"),
        clock,
    )
}

/// A one-worker pool with `kv` blocks (the class line is half of it).
async fn spawn_with(args: RouterArgs, kv: u64) -> RouterHandle {
    let clock = args.clock;
    let (actor, _) = Actor::spawn(None, RouterActor, args)
        .await
        .expect("actor starts");
    let handle = RouterHandle::new(actor, clock);
    let mut worker = WorkerSpec::new(1, 1, kv, 2000);
    worker.block_size = 16;
    handle.upsert_worker(worker).expect("alive");
    handle
}

/// `blocks` full blocks of tokens, distinct per `seed`.
async fn spawn(args: RouterArgs) -> RouterHandle {
    spawn_with(args, 1000).await
}

fn request(id: u128, blocks: u32, seed: u32, phase: Phase) -> RouteRequest {
    let tokens = (0..blocks * 16).map(|t| seed * 100_000 + t).collect();
    RouteRequest::new(
        RequestId::from_u128(id),
        router_core::ClassId(0),
        phase,
        Prompt::Tokens(tokens),
    )
}

fn admitted(result: Result<router_core::Admission, RouteError>) -> router_core::Admission {
    match result {
        Ok(a) => a,
        other => panic!("expected an admission, got {other:?}"),
    }
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_is_answered_when_capacity_frees() {
    let router = spawn(args(PoolRole::Aggregated, Clock::start())).await;
    // 63 blocks x 16 tokens = 1008 prompt tokens: over the 1000-token busy line.
    admitted(router.route(request(1, 63, 1, Phase::Aggregated)).await);
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { router.route(request(2, 1, 2, Phase::Aggregated)).await }
    });
    settle().await;
    assert_eq!(router.observe().await.map(|s| s.waiting_replies), Ok(1));
    tokio::time::advance(Duration::from_millis(100)).await;
    router.prefill_done(RequestId::from_u128(1)).expect("alive");
    let a = admitted(waiting.await.expect("task"));
    assert_eq!(a.waited, Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_timer_rejects_a_queued_request_exactly_at_its_deadline() {
    let router = spawn(args(PoolRole::Aggregated, Clock::start())).await;
    admitted(router.route(request(1, 63, 1, Phase::Aggregated)).await);
    let started = tokio::time::Instant::now();
    let out = router.route(request(2, 1, 2, Phase::Aggregated)).await;
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    match out {
        Err(RouteError::Rejected {
            reason: RejectReason::DeadlinePassed { overdue_ms, .. },
            ..
        }) => {
            assert_eq!(overdue_ms, 0)
        }
        other => panic!("expected a deadline rejection, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_while_queued_is_never_booked() {
    let router = spawn(args(PoolRole::Aggregated, Clock::start())).await;
    admitted(router.route(request(1, 63, 1, Phase::Aggregated)).await);
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { router.route(request(2, 1, 2, Phase::Aggregated)).await }
    });
    settle().await;
    waiting.abort();
    settle().await;
    router.release(RequestId::from_u128(1)).expect("alive");
    let snap = router.observe().await.expect("alive");
    assert!(
        snap.scheduler.ledger.is_idle(),
        "{:?}",
        snap.scheduler.ledger
    );
    assert_eq!((snap.waiting_replies, snap.counters.abandoned), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn own_changes_are_published_as_deltas_and_peer_deltas_are_applied() {
    let (tx, mut rx) = mpsc::channel(16);
    let mut a = args(PoolRole::Aggregated, Clock::start());
    a.deltas = Some(tx);
    let router = spawn(a).await;
    admitted(router.route(request(1, 2, 1, Phase::Aggregated)).await);
    router.release(RequestId::from_u128(1)).expect("alive");
    settle().await;
    let first = rx.recv().await.expect("a delta");
    assert!(matches!(first.delta, BookingDelta::Book { .. }));
    let second = rx.recv().await.expect("a delta");
    assert!(matches!(second.delta, BookingDelta::Release { .. }));
    assert_eq!((first.index, second.index), (1, 2));
    assert_eq!(router.own_state().await.map(|s| s.deltas_sent), Ok(2));
    let busy = Booking {
        rank: RankId::new(1, 0),
        block_hashes: vec![],
        prefill_tokens: 5000,
        extra_blocks: 0,
    };
    router
        .cast(RouterMsg::Peer {
            owner: PEER,
            delta: BookingDelta::Book {
                request: RequestId::from_u128(9),
                booking: busy,
            },
            sent_at_us: None,
        })
        .expect("alive");
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { router.route(request(2, 1, 2, Phase::Aggregated)).await }
    });
    settle().await;
    assert_eq!(router.observe().await.map(|s| s.waiting_replies), Ok(1));
    router.cast(RouterMsg::PeerGone(PEER)).expect("alive");
    admitted(waiting.await.expect("task"));
}

#[tokio::test(start_paused = true)]
async fn the_prefill_actor_reserves_on_the_paired_decode_actor_and_waits_for_its_room_signal() {
    let clock = Clock::start();
    let (publisher, reader) = room_channel();
    let mut d = args(PoolRole::Decode, clock);
    d.room_out = Some(publisher);
    let decode = spawn_with(d, 100).await;
    let mut p = args(PoolRole::Prefill, clock);
    p.paired = Some(Paired {
        room: reader,
        decode: decode.clone(),
    });
    let prefill = spawn_with(p, 100).await;
    // 40 blocks: the decode line is 50 of 100 blocks.
    let first = admitted(prefill.route(request(1, 40, 1, Phase::Prefill)).await);
    let res = first.decode_reservation.expect("a decode reservation");
    settle().await;
    let decode_state = decode.observe().await.expect("alive");
    assert_eq!(decode_state.scheduler.ledger.reservations, 1);
    // A second 40-block request cannot fit: it waits in the prefill queue.
    let waiting = tokio::spawn({
        let prefill = prefill.clone();
        async move { prefill.route(request(2, 40, 2, Phase::Prefill)).await }
    });
    settle().await;
    assert_eq!(prefill.observe().await.map(|s| s.waiting_replies), Ok(1));
    // The prefill leg fails: its reservation goes back, the room signal wakes the queue.
    prefill.release(RequestId::from_u128(1)).expect("alive");
    decode.unreserve(res.key.request).expect("alive");
    let second = admitted(waiting.await.expect("task"));
    assert_eq!(second.request, RequestId::from_u128(2));
}

#[tokio::test(start_paused = true)]
async fn a_peer_reservation_lease_runs_in_this_node_clock() {
    let clock = Clock::start();
    // This node has been up for a while; the peer's clock started elsewhere.
    tokio::time::advance(Duration::from_secs(100)).await;
    let decode = spawn_with(args(PoolRole::Decode, clock), 100).await;
    let hold = router_core::LeasedReservation {
        rank: RankId::new(1, 0),
        blocks: 10,
        lease_left: router_core::LeaseLeft::from_duration(Duration::from_secs(1)),
        seq: 1,
    };
    let delta = BookingDelta::Reserve {
        request: RequestId::from_u128(5),
        reservation: hold,
    };
    decode
        .cast(RouterMsg::Peer {
            owner: PEER,
            delta,
            sent_at_us: None,
        })
        .expect("alive");
    // A call behind the cast: when it returns, the reservation is applied (same mailbox).
    decode.observe().await.expect("alive");
    let held = |s: &RouterSnapshot| s.scheduler.ledger.reservations;
    tokio::time::advance(Duration::from_millis(999)).await;
    settle().await;
    assert_eq!(decode.observe().await.map(|s| held(&s)), Ok(1));
    tokio::time::advance(Duration::from_millis(2)).await;
    settle().await;
    assert_eq!(
        decode.observe().await.map(|s| held(&s)),
        Ok(0),
        "expired by its own timer"
    );
}

#[tokio::test(start_paused = true)]
async fn a_starting_router_holds_requests_until_it_may_admit() {
    let (gate, admit_when) = tokio::sync::watch::channel(false);
    let mut a = args(PoolRole::Aggregated, Clock::start());
    a.admit_when = Some(admit_when);
    let router = spawn(a).await;
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { router.route(request(1, 2, 1, Phase::Aggregated)).await }
    });
    router.observe().await.expect("alive");
    settle().await;
    assert!(
        !waiting.is_finished(),
        "held while peers' bookings are not in"
    );
    let snap = router.observe().await.expect("alive");
    assert_eq!(
        (snap.waiting_replies, snap.scheduler.ledger.bookings),
        (1, 0)
    );
    gate.send_replace(true);
    admitted(waiting.await.expect("task"));
}

#[tokio::test(start_paused = true)]
async fn a_route_call_gives_up_at_its_timeout_and_the_request_is_never_booked() {
    let clock = Clock::start();
    // A node that never becomes ready holds every route call: the handle must not wait
    // forever (a stuck actor answers the same way).
    let (gate, admit_when) = tokio::sync::watch::channel(false);
    let mut held = args(PoolRole::Aggregated, clock);
    held.admit_when = Some(admit_when);
    let router = spawn(held)
        .await
        .with_route_timeout(Duration::from_millis(750));
    let started = tokio::time::Instant::now();
    let out = router.route(request(1, 1, 1, Phase::Aggregated)).await;
    assert_eq!(out, Err(RouteError::Unavailable));
    assert_eq!(started.elapsed(), Duration::from_millis(750));
    // When the node turns ready, the abandoned request is not booked for nobody.
    gate.send_replace(true);
    settle().await;
    let snap = router.observe().await.expect("alive");
    assert_eq!(snap.scheduler.ledger.bookings, 0);
    assert_eq!(snap.counters.rolled_back, 1);
}

#[tokio::test(start_paused = true)]
async fn a_booking_never_released_is_released_by_its_lease_and_published() {
    let (tx, mut rx) = mpsc::channel(16);
    let mut a = args(PoolRole::Aggregated, Clock::start());
    a.config.scheduler.booking_lease = Some(Duration::from_secs(60));
    a.deltas = Some(tx);
    let router = spawn(a).await;
    admitted(router.route(request(1, 2, 1, Phase::Aggregated)).await);
    admitted(router.route(request(2, 2, 2, Phase::Aggregated)).await);
    router.release(RequestId::from_u128(2)).expect("alive");
    tokio::time::advance(Duration::from_millis(59_999)).await;
    settle().await;
    let snap = router.observe().await.expect("alive");
    assert_eq!(snap.scheduler.ledger.bookings, 1, "not yet due");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    let snap = router.observe().await.expect("alive");
    assert!(
        snap.scheduler.ledger.is_idle(),
        "{:?}",
        snap.scheduler.ledger
    );
    assert_eq!(snap.counters.leases_expired, 1);
    let mut released = Vec::new();
    while let Ok(own) = rx.try_recv() {
        if let crate::wire::BookingDelta::Release { request } = own.delta {
            released.push(request);
        }
    }
    assert_eq!(
        released,
        vec![RequestId::from_u128(2), RequestId::from_u128(1)],
        "the expired booking's release reaches peer sync"
    );
}
