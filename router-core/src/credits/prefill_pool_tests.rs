//! Prefill credits in a disaggregated fleet's prefill pool: three replicas' prefill routers,
//! each with its own ledger and no peer sync at all (nobody sees another's bookings), take a
//! burst of prompts. What they book together on a prefill rank passes the class's prefill
//! line by at most one prompt, as one router allows; the decode room they wait on is asked
//! of the paired decode pool apart, never of the prefill pool's owners.

use super::*;
use crate::admission::{Outcome, Phase, PoolRole, SchedulerConfig};
use crate::ids::{ClassId, RequestId};
use crate::ledger::BookingLedger;
use crate::policy::PolicyProfile;
use crate::router::{PoolRouter, PoolRouterConfig, PrefixMode, Prompt, RouteRequest};
use crate::time::Timestamp;
use crate::worker::WorkerSpec;
use std::collections::VecDeque;

const CLASS: ClassId = ClassId(0);
/// The class's prefill line, in prompt tokens.
const LINE: u64 = 1000;
const PROMPT: u32 = 600;
const BS: u32 = 16;

fn profile() -> PolicyProfile {
    super::test_replica::one_class(
        "prefill_busy_threshold = 1000\ndecode_busy_threshold_frac = 0.5",
    )
}

fn pool_router(role: PoolRole, n: u128, workers: &[(u64, u64)]) -> PoolRouter {
    let id = RouterId(uuid::Uuid::from_u128(n));
    let config = PoolRouterConfig {
        scheduler: SchedulerConfig::new(role, id),
        block_size: BS,
        prefix: PrefixMode::Events,
    };
    let mut router = PoolRouter::new(config, profile());
    for &(worker, kv_blocks) in workers {
        let mut spec = WorkerSpec::new(worker, 1, kv_blocks, 4096);
        spec.block_size = BS;
        router.upsert_worker(spec).expect("a valid worker");
    }
    router
}

struct Replica {
    id: RouterId,
    router: PoolRouter,
    agent: CreditAgent,
    admitted: usize,
}

/// Three prefill routers over prefill workers 1 and 2, credits on, every replica seeing the
/// other two; and the decode pool's ledger they read, with `decode_kv` blocks on worker 11.
fn fleet(decode_kv: u64) -> (Vec<Replica>, PoolRouter, VecDeque<(RouterId, CreditOut)>) {
    let mut replicas: Vec<Replica> = (1..=3)
        .map(|n| {
            let mut router = pool_router(PoolRole::Prefill, n, &[(1, 100_000), (2, 100_000)]);
            router.enable_credits();
            let id = router.scheduler().owner();
            let mut agent = CreditAgent::new(id, std::time::Duration::from_millis(5));
            agent.set_ranks(
                router.ledger().rank_ids().collect::<Vec<_>>(),
                Timestamp::ZERO,
            );
            Replica {
                id,
                router,
                agent,
                admitted: 0,
            }
        })
        .collect();
    let wire =
        super::test_replica::introduce(replicas.iter_mut().map(|r| (r.id, &mut r.agent)).collect());
    let decode = pool_router(PoolRole::Decode, 9, &[(11, decode_kv)]);
    (replicas, decode, wire)
}

fn prompt(id: u128) -> RouteRequest {
    let tokens = (0..PROMPT).map(|t| (id as u32) * 100_000 + t).collect();
    RouteRequest::new(
        RequestId::from_u128(id),
        CLASS,
        Phase::Prefill,
        Prompt::Tokens(tokens),
    )
}

/// Writes what the agent now holds into the router's ledger; drains when that opened the
/// gate. Returns the requests admitted.
fn sync(r: &mut Replica, decode: &BookingLedger, now: Timestamp) -> usize {
    let held = r.agent.take_held_changes();
    if !r.router.apply_credits(held, true) {
        return 0;
    }
    let admitted = r
        .router
        .drain(now, Some(decode))
        .iter()
        .filter(|o| o.admitted().is_some())
        .count();
    r.admitted += admitted;
    admitted
}

/// Delivers every message on the wire, as the credit couriers would.
fn deliver(
    replicas: &mut [Replica],
    decode: &BookingLedger,
    wire: &mut VecDeque<(RouterId, CreditOut)>,
    now: Timestamp,
) {
    while let Some((from, out)) = wire.pop_front() {
        let Some(to) = replicas.iter_mut().find(|r| r.id == out.to) else {
            continue;
        };
        for reply in to.agent.receive(from, out.msg, to.router.ledger(), now) {
            wire.push_back((to.id, reply));
        }
        sync(to, decode, now);
    }
}

/// The gate's wants of replica `at` go to its own agent (prefill room) or to the decode pool
/// (decode room); returns the decode ones.
fn route_wants(
    r: &mut Replica,
    wire: &mut VecDeque<(RouterId, CreditOut)>,
    now: Timestamp,
) -> Vec<crate::admission::RoomWant> {
    let (own, decode): (Vec<_>, Vec<_>) = r
        .router
        .take_room_wants()
        .into_iter()
        .partition(|w| w.prefill_need.is_some());
    for want in &own {
        assert_eq!(
            want.need, 0,
            "a prefill pool asks its owners for prefill room only"
        );
        let outs = r.agent.want(want, r.router.ledger(), now);
        assert!(
            outs.iter().all(|o| matches!(
                o.msg,
                CreditMsg::Ask {
                    kind: CreditKind::Prefill,
                    ..
                }
            )),
            "{outs:?}"
        );
        let id = r.id;
        wire.extend(outs.into_iter().map(|o| (id, o)));
    }
    decode
}

/// Prompt tokens all replicas have booked on each prefill rank.
fn prefill_on(replicas: &[Replica]) -> Vec<u64> {
    replicas[0]
        .router
        .ledger()
        .rank_ids()
        .map(|rank| {
            replicas
                .iter()
                .map(|r| r.router.ledger().own_use(CreditKey::prefill(rank)))
                .sum()
        })
        .collect()
}

#[test]
fn three_prefill_routers_that_never_see_each_other_admit_what_one_router_would() {
    let (mut replicas, decode, mut wire) = fleet(100_000);
    let mut now = Timestamp::from_millis(10);
    deliver(&mut replicas, decode.ledger(), &mut wire, now);
    for id in 1..=30u128 {
        now = now + std::time::Duration::from_millis(1);
        let at = (id % 3) as usize;
        let r = &mut replicas[at];
        let out = r.router.route(prompt(id), now, now, Some(decode.ledger()));
        if out.admitted().is_some() {
            r.admitted += 1;
        } else {
            assert!(matches!(out, Outcome::Queued { .. }), "{out:?}");
        }
        sync(r, decode.ledger(), now);
        let to_decode = route_wants(r, &mut wire, now);
        assert!(
            to_decode.is_empty(),
            "decode room is plentiful: {to_decode:?}"
        );
        deliver(&mut replicas, decode.ledger(), &mut wire, now);
        for tokens in prefill_on(&replicas) {
            assert!(
                tokens <= LINE + u64::from(PROMPT),
                "request {id}: {tokens} prompt tokens on one rank"
            );
        }
    }
    // One router admits onto a rank while it is at or under the line: 0 and 600 tokens, so
    // two prompts per rank, four in all.
    let admitted: usize = replicas.iter().map(|r| r.admitted).sum();
    assert_eq!(admitted, 4, "{:?}", prefill_on(&replicas));
    assert_eq!(prefill_on(&replicas), vec![1200, 1200]);
}

#[test]
fn prefill_room_and_decode_room_are_wanted_apart() {
    // Decode worker of 60 blocks: a line of 30, and a prompt of 600 tokens needs its 37 full
    // blocks.
    let (mut replicas, decode, mut wire) = fleet(60);
    let now = Timestamp::from_millis(10);
    deliver(&mut replicas, decode.ledger(), &mut wire, now);
    let r = &mut replicas[0];
    let out = r.router.route(prompt(1), now, now, Some(decode.ledger()));
    assert!(matches!(out, Outcome::Queued { .. }), "{out:?}");
    // No prefill credits yet: the want for prefill room goes to the pool's owners.
    let to_decode = route_wants(r, &mut wire, now);
    assert!(to_decode.is_empty(), "{to_decode:?}");
    deliver(&mut replicas, decode.ledger(), &mut wire, now);
    // Prefill credits came, and now the decode pool is what it waits on: that want carries
    // the decode blocks and no prefill need, for the paired decode router.
    let r = &mut replicas[0];
    sync(r, decode.ledger(), now);
    assert_eq!(r.admitted, 0);
    assert!(
        r.agent
            .spares()
            .any(|(key, held)| key.kind == CreditKind::Prefill && held > 0)
    );
    let to_decode = route_wants(r, &mut wire, now);
    assert_eq!(to_decode.len(), 1, "{to_decode:?}");
    assert_eq!((to_decode[0].need, to_decode[0].prefill_need), (37, None));
}
