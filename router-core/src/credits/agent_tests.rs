//! Credit agents of three replicas, each with its own ledger, trading messages: their
//! reservations on a rank never pass the class line, however the messages interleave, and
//! credits go back to the owner when requests end.

use super::*;
use crate::admission::RoomWant;
use crate::ids::{BookingKey, ClassId, RequestId};
use crate::ledger::{BookingLedger, Reservation};
use crate::policy::PolicyProfile;
use crate::time::Timestamp;
use std::collections::VecDeque;

const INTERACTIVE: ClassId = ClassId(0);

fn profile() -> PolicyProfile {
    super::test_replica::one_class("decode_busy_threshold_frac = 0.5")
}

/// A replica: its agent and its own view of the decode pool (two ranks of 1,024 blocks).
struct Replica {
    id: RouterId,
    agent: CreditAgent,
    ledger: BookingLedger,
    next: u128,
}

fn replica(n: u128) -> Replica {
    let (id, agent, ledger) = super::test_replica::parts(n, &profile(), false);
    Replica {
        id,
        agent,
        ledger,
        next: n << 64,
    }
}

/// Three replicas that know each other, past the settle period.
fn fleet() -> (Vec<Replica>, VecDeque<(RouterId, CreditOut)>) {
    let mut replicas: Vec<Replica> = (1..=3).map(replica).collect();
    let ids: Vec<RouterId> = replicas.iter().map(|r| r.id).collect();
    let mut wire = VecDeque::new();
    for r in &mut replicas {
        let peers = ids.iter().copied().filter(|p| *p != r.id);
        for out in r
            .agent
            .set_peers(peers.collect::<Vec<_>>(), Timestamp::ZERO)
        {
            wire.push_back((r.id, out));
        }
    }
    deliver_all(&mut replicas, &mut wire, Timestamp::from_millis(1));
    (replicas, wire)
}

/// What the actor does after every message: the ledger learns the credits held.
fn sync(replicas: &mut [Replica]) {
    for r in replicas.iter_mut() {
        for (rank, held) in r.agent.take_held_changes() {
            r.ledger.set_credit_held(rank, held);
        }
    }
}

fn ask(
    replicas: &mut [Replica],
    at: usize,
    want: &RoomWant,
    now: Timestamp,
    wire: &mut VecDeque<(RouterId, CreditOut)>,
) {
    let r = &mut replicas[at];
    for out in r.agent.want(want, &r.ledger, now) {
        wire.push_back((r.id, out));
    }
    sync(replicas);
}

fn deliver_all(
    replicas: &mut [Replica],
    wire: &mut VecDeque<(RouterId, CreditOut)>,
    now: Timestamp,
) {
    while let Some((from, out)) = wire.pop_front() {
        let Some(to) = replicas.iter_mut().find(|r| r.id == out.to) else {
            continue;
        };
        for reply in to.agent.receive(from, out.msg, &to.ledger, now) {
            wire.push_back((to.id, reply));
        }
    }
    sync(replicas);
}

/// Admits what the replica's own ledger allows (its room bounded by its credits): reserves
/// `need` on its best rank, in its own ledger and in every peer's (peer sync, delivered at
/// once here).
fn admit(replicas: &mut [Replica], at: usize, need: u64) -> Option<RequestId> {
    let rank =
        match replicas[at]
            .ledger
            .best_decode_room(INTERACTIVE, &crate::Eligibility::ANY, &[])
        {
            crate::ledger::BestRoom::Best { rank, headroom } if headroom >= need as i64 => rank,
            _ => return None,
        };
    replicas[at].next += 1;
    let request = RequestId(uuid::Uuid::from_u128(replicas[at].next));
    let key = BookingKey::new(replicas[at].id, request);
    let reservation = Reservation {
        rank,
        blocks: need,
        expires_at: Timestamp::from_millis(600_000),
        seq: 0,
    };
    for r in replicas.iter_mut() {
        r.ledger.reserve(key, reservation);
    }
    let r = &mut replicas[at];
    assert!(r.agent.reconcile(&r.ledger).is_empty(), "nothing ended");
    Some(request)
}

fn reserved_on(ledger: &BookingLedger, rank: RankId) -> u64 {
    ledger
        .rank_decode_room(INTERACTIVE, rank)
        .map_or(0, |(_, c)| c)
}

#[test]
fn three_replicas_asking_at_once_never_reserve_past_the_line() {
    let (mut replicas, mut wire) = fleet();
    let want = RoomWant {
        class: INTERACTIVE,
        need: 75,
        prefill_need: None,
        lora: None,
    };
    let mut admitted = 0;
    // Rounds of: every replica wants room, messages fly, every replica admits what it can.
    for round in 0..40u64 {
        let now = Timestamp::from_millis(10 + round);
        for r in replicas.iter_mut() {
            for out in r.agent.want(&want, &r.ledger, now) {
                wire.push_back((r.id, out));
            }
        }
        deliver_all(&mut replicas, &mut wire, now);
        for at in 0..replicas.len() {
            while admit(&mut replicas, at, 75).is_some() {
                admitted += 1;
            }
        }
        for rank in replicas[0].ledger.rank_ids().collect::<Vec<_>>() {
            let committed = reserved_on(&replicas[0].ledger, rank);
            assert!(
                committed <= 512,
                "round {round}: {committed} blocks on {rank:?}"
            );
        }
    }
    // 512 / 75 = 6 requests per rank, 2 ranks: every one of them found room.
    assert_eq!(admitted, 12, "credits left room unused");
}

#[test]
fn credits_of_an_ended_request_go_back_and_serve_another_replica() {
    let (mut replicas, mut wire) = fleet();
    let big = RoomWant {
        class: INTERACTIVE,
        need: 500,
        prefill_need: None,
        lora: None,
    };
    let now = Timestamp::from_millis(10);
    // Replica 0 fills both ranks.
    let mut held = Vec::new();
    for _ in 0..2 {
        ask(&mut replicas, 0, &big, now, &mut wire);
        deliver_all(&mut replicas, &mut wire, now);
        held.push(admit(&mut replicas, 0, 500).expect("room for 500 on an empty rank"));
    }
    // Replica 1 cannot get any.
    ask(&mut replicas, 1, &big, now, &mut wire);
    deliver_all(&mut replicas, &mut wire, now);
    assert!(admit(&mut replicas, 1, 500).is_none());
    // Replica 0's first request ends: released everywhere, its credits given back.
    let key = BookingKey::new(replicas[0].id, held[0]);
    for r in replicas.iter_mut() {
        r.ledger.unreserve(&key);
    }
    let id0 = replicas[0].id;
    let r0 = &mut replicas[0];
    for out in r0.agent.reconcile(&r0.ledger) {
        wire.push_back((id0, out));
    }
    sync(&mut replicas);
    deliver_all(&mut replicas, &mut wire, now);
    let later = Timestamp::from_millis(10) + ASK_TIMEOUT;
    ask(&mut replicas, 1, &big, later, &mut wire);
    deliver_all(&mut replicas, &mut wire, later);
    assert!(
        admit(&mut replicas, 1, 500).is_some(),
        "{:?}",
        replicas[1].agent.snapshot(later)
    );
}

#[test]
fn a_replica_that_dies_holding_credits_frees_them_at_its_owners() {
    let (mut replicas, mut wire) = fleet();
    let want = RoomWant {
        class: INTERACTIVE,
        need: 500,
        prefill_need: None,
        lora: None,
    };
    let now = Timestamp::from_millis(10);
    for _ in 0..2 {
        ask(&mut replicas, 2, &want, now, &mut wire);
        deliver_all(&mut replicas, &mut wire, now);
        admit(&mut replicas, 2, 500).expect("room on an empty rank");
    }
    let dead = replicas.pop().expect("three replicas").id;
    let live: Vec<RouterId> = replicas.iter().map(|r| r.id).collect();
    let later = Timestamp::from_millis(1_000);
    for r in replicas.iter_mut() {
        // Peer sync drops the dead replica's reservations with it.
        r.ledger.release_owner(dead);
        let peers: Vec<RouterId> = live.iter().copied().filter(|p| *p != r.id).collect();
        for out in r.agent.set_peers(peers, later) {
            wire.push_back((r.id, out));
        }
    }
    deliver_all(&mut replicas, &mut wire, later);
    // After the settle period the survivors get the whole line again.
    let settled = later + Duration::from_millis(200);
    let mut admitted = 0;
    for at in 0..2 {
        ask(&mut replicas, at, &want, settled, &mut wire);
        deliver_all(&mut replicas, &mut wire, settled);
        admitted += usize::from(admit(&mut replicas, at, 500).is_some());
    }
    assert_eq!(admitted, 2);
}

mod input {
    //! Whatever a peer sends on the credits subject (decoded: any ranks, classes and
    //! numbers, `u64::MAX` included), an agent never panics and its ledger stays usable.

    use super::*;
    use crate::ids::RankId;
    use crate::ledger::MAX_BOOKED;
    use proptest::prelude::*;

    fn number() -> impl Strategy<Value = u64> {
        prop_oneof![
            3 => 0u64..3000,
            1 => Just(u64::MAX),
            1 => Just(MAX_BOOKED),
            1 => any::<u64>(),
        ]
    }

    fn msg() -> impl Strategy<Value = CreditMsg> {
        let rank = (0u64..4, 0u32..2).prop_map(|(w, dp)| RankId {
            worker: crate::ids::WorkerId(w),
            dp_rank: dp,
        });
        let kind = prop_oneof![Just(CreditKind::Decode), Just(CreditKind::Prefill)];
        prop_oneof![
            (rank.clone(), 0u16..3, number(), kind.clone(), number()).prop_map(
                |(rank, class, need, kind, using)| CreditMsg::Ask {
                    rank,
                    class: ClassId(class),
                    need,
                    kind,
                    using,
                }
            ),
            (rank.clone(), number(), number(), kind.clone()).prop_map(
                |(rank, blocks, seq, kind)| CreditMsg::Grant {
                    rank,
                    blocks,
                    seq,
                    kind,
                }
            ),
            (rank.clone(), kind.clone()).prop_map(|(rank, kind)| CreditMsg::Deny { rank, kind }),
            (rank, number(), number(), number(), kind).prop_map(|(rank, held, seen, seq, kind)| {
                CreditMsg::Held(crate::credits::HeldReport {
                    rank,
                    kind,
                    held,
                    seen_grant_seq: seen,
                    report_seq: seq,
                })
            }),
        ]
    }

    /// Found by the property below: two holders reporting `u64::MAX` and 1 blocks held on
    /// one rank overflowed the owner's sum of outstanding credits.
    #[test]
    fn reports_of_u64_max_blocks_held_are_clamped() {
        let (mut replicas, _) = fleet();
        let r = &mut replicas[0];
        let rank = RankId {
            worker: crate::ids::WorkerId(2),
            dp_rank: 0,
        };
        for (from, held) in [(2, u64::MAX), (3, 1)] {
            let report = crate::credits::HeldReport {
                rank,
                kind: CreditKind::Decode,
                held,
                seen_grant_seq: 0,
                report_seq: 1,
            };
            let from = RouterId(uuid::Uuid::from_u128(from));
            let _ = r.agent.receive(
                from,
                CreditMsg::Held(report),
                &r.ledger,
                Timestamp::from_millis(10),
            );
        }
        let _ = r.agent.snapshot(Timestamp::from_millis(10));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_credit_message_from_a_peer_is_survived(
            msgs in prop::collection::vec((2u128..4, msg(), 0u64..50), 1..40)
        ) {
            let (mut replicas, _) = fleet();
            let r = &mut replicas[0];
            for (i, (from, msg, step)) in msgs.into_iter().enumerate() {
                let now = Timestamp::from_millis(10 + i as u64 * step);
                let from = RouterId(uuid::Uuid::from_u128(from));
                let _ = r.agent.receive(from, msg, &r.ledger, now);
                for (rank, held) in r.agent.take_held_changes() {
                    r.ledger.set_credit_held(rank, held);
                }
                let _ = r.agent.reconcile(&r.ledger);
                let _ = r.agent.tick(now);
            }
            let _ = r.agent.snapshot(Timestamp::from_millis(10_000));
            let _ = r.ledger.snapshot();
        }
    }
}
