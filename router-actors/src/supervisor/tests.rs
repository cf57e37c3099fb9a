//! Supervision: a RouterActor that fails mid-load is restarted behind the same handle with its
//! own in-flight bookings restored (nothing leaks, nothing counts twice), and a child that
//! keeps failing makes the supervisor escalate; a release sent during the restart is applied
//! by the next actor. Calls through a slot end: a stuck actor times out, a missing one is gone.

use super::*;
use crate::clock::Clock;
use crate::router::{RouterArgs, RouterHandle, RouterMsg, router_child};
use router_core::admission::{Phase, PoolRole, SchedulerConfig};
use router_core::{
    PolicyProfile, PoolRouterConfig, PrefixMode, Prompt, RequestId, RouteRequest, RouterId,
    WorkerSpec,
};
use std::time::Duration;

fn router_args(clock: Clock, inflight: InflightRegistry) -> RouterArgs {
    RouterArgs {
        inflight: Some(inflight),
        ..RouterArgs::new(
            PoolRouterConfig {
                scheduler: SchedulerConfig::new(
                    PoolRole::Aggregated,
                    RouterId(uuid::Uuid::from_u128(1)),
                ),
                block_size: 16,
                prefix: PrefixMode::Events,
            },
            PolicyProfile::fallback(),
            clock,
        )
    }
}

fn request(id: u128) -> RouteRequest {
    let tokens = (0..64).map(|t| t + id as u32 * 1000).collect();
    RouteRequest::new(
        RequestId::from_u128(id),
        router_core::ClassId(0),
        Phase::Aggregated,
        Prompt::Tokens(tokens),
    )
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

fn worker() -> WorkerSpec {
    let mut w = WorkerSpec::new(1, 1, 1000, 8192);
    w.block_size = 16;
    w
}

#[tokio::test(start_paused = true)]
async fn a_router_that_fails_mid_load_is_restarted_with_its_bookings_and_nothing_leaks() {
    let clock = Clock::start();
    let inflight = InflightRegistry::default();
    let slot = ActorSlot::empty();
    let child = router_child(
        "router-agg",
        router_args(clock, inflight.clone()),
        slot.clone(),
    );
    let (supervisor, _) = Actor::spawn(
        None,
        NodeSupervisor,
        SupervisorArgs {
            children: vec![child],
            policy: RestartPolicy::default(),
            board: ChildBoard::default(),
        },
    )
    .await
    .expect("supervisor starts");
    let router = RouterHandle::from_slot(slot, clock);
    router.upsert_worker(worker()).expect("alive");
    for id in 1..=3 {
        let out = router.route(request(id)).await;
        assert!(out.is_ok(), "{out:?}");
    }
    assert_eq!(inflight.len(), 3);
    router
        .cast(RouterMsg::InjectFault("boom".into()))
        .expect("alive");
    settle().await;
    tokio::time::advance(RestartPolicy::default().backoff).await;
    settle().await;
    // The same handle reaches the new actor, which booked the three again.
    router.upsert_worker(worker()).expect("restarted");
    let snap = router.observe().await.expect("restarted");
    assert_eq!(snap.scheduler.ledger.bookings, 3);
    let restarts = ractor::call!(supervisor, SupervisorMsg::Observe).expect("alive");
    assert_eq!(restarts[0].restarts, 1);
    for id in 1..=3 {
        router.release(RequestId::from_u128(id)).expect("alive");
    }
    let snap = router.observe().await.expect("alive");
    assert!(
        snap.scheduler.ledger.is_idle(),
        "{:?}",
        snap.scheduler.ledger
    );
    assert!(inflight.is_empty());
}

/// Releases sent while the router restarts: one into the failing actor's mailbox, one while
/// no actor runs. Neither is lost nor restored: the new actor holds only the booking still
/// live, and ends idle once that one is released.
#[tokio::test(start_paused = true)]
async fn a_release_sent_while_the_router_restarts_is_applied_by_the_next_actor() {
    let clock = Clock::start();
    let inflight = InflightRegistry::default();
    let slot = ActorSlot::empty();
    let child = router_child(
        "router-agg",
        router_args(clock, inflight.clone()),
        slot.clone(),
    );
    let (_supervisor, _) = Actor::spawn(
        None,
        NodeSupervisor,
        SupervisorArgs {
            children: vec![child],
            policy: RestartPolicy::default(),
            board: ChildBoard::default(),
        },
    )
    .await
    .expect("supervisor starts");
    let router = RouterHandle::from_slot(slot.clone(), clock).with_inflight(inflight.clone());
    router.upsert_worker(worker()).expect("alive");
    for id in 1..=3 {
        let out = router.route(request(id)).await;
        assert!(out.is_ok(), "{out:?}");
    }
    router
        .cast(RouterMsg::InjectFault("boom".into()))
        .expect("alive");
    // Queued behind the fault: the failing actor never handles it.
    router.release(RequestId::from_u128(1)).expect("recorded");
    settle().await;
    assert!(slot.get().is_none_or(|a| a.cast(RouterMsg::Tick).is_err()));
    // Between the failure and the restart: no actor at all.
    router.release(RequestId::from_u128(2)).expect("recorded");
    tokio::time::advance(RestartPolicy::default().backoff).await;
    settle().await;
    // Restarted with the one booking still live.
    router.upsert_worker(worker()).expect("restarted");
    let snap = router.observe().await.expect("restarted");
    assert_eq!(
        snap.scheduler.ledger.bookings, 1,
        "{:?}",
        snap.scheduler.ledger
    );
    router.release(RequestId::from_u128(3)).expect("alive");
    let snap = router.observe().await.expect("alive");
    assert!(
        snap.scheduler.ledger.is_idle(),
        "{:?}",
        snap.scheduler.ledger
    );
    assert!(inflight.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_child_that_keeps_failing_makes_the_supervisor_escalate() {
    let clock = Clock::start();
    let slot = ActorSlot::empty();
    let child = router_child(
        "router-agg",
        router_args(clock, InflightRegistry::default()),
        slot.clone(),
    );
    let policy = RestartPolicy {
        max_restarts: 1,
        window: Duration::from_secs(60),
        backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
    };
    let (_supervisor, stopped) = Actor::spawn(
        None,
        NodeSupervisor,
        SupervisorArgs {
            children: vec![child],
            policy,
            board: ChildBoard::default(),
        },
    )
    .await
    .expect("supervisor starts");
    let router = RouterHandle::from_slot(slot, clock);
    for _ in 0..2 {
        router
            .cast(RouterMsg::InjectFault("again".into()))
            .expect("alive");
        settle().await;
        tokio::time::advance(Duration::from_millis(20)).await;
        settle().await;
    }
    tokio::time::timeout(Duration::from_secs(1), stopped)
        .await
        .expect("supervisor stopped")
        .expect("joined");
}

/// An actor that keeps every reply port and never answers: a stuck actor.
struct Silent;

impl Actor for Silent {
    type Msg = RpcReplyPort<u32>;
    type State = Vec<RpcReplyPort<u32>>;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(Vec::new())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        reply: RpcReplyPort<u32>,
        kept: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        kept.push(reply);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_on_a_stuck_actor_times_out_and_one_on_an_empty_slot_is_gone() {
    let empty: ActorSlot<RpcReplyPort<u32>> = ActorSlot::empty();
    assert_eq!(
        empty.call(|reply| reply, Duration::from_secs(1)).await,
        Err(CallError::Gone)
    );
    let (actor, _) = Actor::spawn(None, Silent, ()).await.expect("starts");
    let slot = ActorSlot::new(actor.clone());
    let started = tokio::time::Instant::now();
    let answer = slot.call(|reply| reply, Duration::from_millis(300)).await;
    assert_eq!(answer, Err(CallError::Timeout(Duration::from_millis(300))));
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    actor.stop(None);
    settle().await;
    assert_eq!(
        slot.call(|reply| reply, Duration::from_secs(1)).await,
        Err(CallError::Gone)
    );
}
