//! Prefill credits in an aggregated pool: three replicas, each with its own ledger and no
//! peer sync at all (the worst case: nobody sees another's bookings), admitting a burst of
//! prompts. The prompt tokens they book together on a rank never pass the class's prefill
//! line by more than one prompt (what one router allows: it admits onto a rank not yet
//! busy), decode room is granted on the same rank, and credits come back when prefill ends.

use super::*;
use crate::admission::RoomWant;
use crate::eligibility::Eligibility;
use crate::ids::{BookingKey, ClassId, RankId, RequestId};
use crate::ledger::{Booking, BookingLedger};
use crate::policy::PolicyProfile;
use crate::time::Timestamp;
use proptest::prelude::*;
use std::collections::VecDeque;

const CLASS: ClassId = ClassId(0);
/// 0.5 × a batch of 4,096 tokens.
const LINE: u64 = 2048;

fn profile() -> PolicyProfile {
    super::test_replica::one_class(
        "prefill_busy_threshold_frac = 0.5\ndecode_busy_threshold_frac = 0.5",
    )
}

struct Replica {
    id: RouterId,
    agent: CreditAgent,
    ledger: BookingLedger,
    /// Own requests still in prefill, with their rank.
    prefilling: Vec<RequestId>,
    next: u128,
}

fn fleet(n: u128) -> (Vec<Replica>, VecDeque<(RouterId, CreditOut)>) {
    let mut replicas: Vec<Replica> = (1..=n)
        .map(|i| {
            let (id, agent, ledger) = super::test_replica::parts(i, &profile(), true);
            Replica {
                id,
                agent,
                ledger,
                prefilling: Vec::new(),
                next: i << 64,
            }
        })
        .collect();
    let mut wire =
        super::test_replica::introduce(replicas.iter_mut().map(|r| (r.id, &mut r.agent)).collect());
    deliver(
        &mut replicas,
        &mut wire,
        Timestamp::from_millis(1),
        usize::MAX,
    );
    (replicas, wire)
}

fn sync(r: &mut Replica) {
    for (key, held) in r.agent.take_held_changes() {
        r.ledger.set_credit_held(key, held);
    }
}

/// Delivers up to `budget` messages (the rest stay in flight).
fn deliver(
    replicas: &mut [Replica],
    wire: &mut VecDeque<(RouterId, CreditOut)>,
    now: Timestamp,
    budget: usize,
) {
    for _ in 0..budget {
        let Some((from, out)) = wire.pop_front() else {
            break;
        };
        let Some(to) = replicas.iter_mut().find(|r| r.id == out.to) else {
            continue;
        };
        for reply in to.agent.receive(from, out.msg, &to.ledger, now) {
            wire.push_back((to.id, reply));
        }
        sync(to);
    }
}

fn want(prompt: u64) -> RoomWant {
    RoomWant {
        class: CLASS,
        need: 10,
        prefill_need: Some(prompt),
        lora: None,
    }
}

/// One admission as the scheduler makes it: the gate with both needs, then a rank whose
/// prefill credits cover the prompt and whose decode room takes the blocks; booked in this
/// replica's ledger only.
fn try_admit(r: &mut Replica, prompt: u64, now: Timestamp) -> Result<(), Vec<CreditOut>> {
    if r.ledger
        .class_gate(CLASS, 10, prompt, &Eligibility::ANY)
        .is_err()
    {
        return Err(r.agent.want(&want(prompt), &r.ledger, now));
    }
    let rank = r
        .ledger
        .rank_ids()
        .find(|rank| {
            let load = r.ledger.rank_load(*rank).expect("a known rank");
            load.prefill_covers(CLASS.index(), prompt) && load.has_room(CLASS.index(), 10)
        })
        .expect("an open gate has a covered rank");
    r.next += 1;
    let request = RequestId(uuid::Uuid::from_u128(r.next));
    let booking = Booking {
        rank,
        block_hashes: Vec::new(),
        prefill_tokens: prompt,
        extra_blocks: 10,
    };
    r.ledger.book(BookingKey::new(r.id, request), booking);
    r.prefilling.push(request);
    Ok(())
}

/// Prompt tokens all replicas have booked on each rank.
fn prefill_on(replicas: &[Replica]) -> Vec<u64> {
    replicas[0]
        .ledger
        .rank_ids()
        .map(|rank| {
            replicas
                .iter()
                .map(|r| r.ledger.own_use(CreditKey::prefill(rank)))
                .sum()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn replicas_that_never_see_each_other_stay_within_one_prompt_of_the_line(
        prompts in proptest::collection::vec(100u64..1500, 3),
        order in proptest::collection::vec((0usize..3, 0usize..4), 20..80),
    ) {
        let (mut replicas, mut wire) = fleet(3);
        let max_prompt = *prompts.iter().max().expect("three prompts");
        for (step, (at, budget)) in order.into_iter().enumerate() {
            let now = Timestamp::from_millis(10 + step as u64);
            let r = &mut replicas[at];
            if let Err(outs) = try_admit(r, prompts[at], now) {
                let id = r.id;
                wire.extend(outs.into_iter().map(|o| (id, o)));
            }
            sync(&mut replicas[at]);
            deliver(&mut replicas, &mut wire, now, budget);
            for (rank, tokens) in prefill_on(&replicas).into_iter().enumerate() {
                prop_assert!(
                    tokens <= LINE + max_prompt,
                    "step {step}: {tokens} prompt tokens on rank {rank}"
                );
            }
        }
    }
}

#[test]
fn one_replica_fills_each_rank_to_its_line_and_refills_when_prefill_ends() {
    let (mut replicas, mut wire) = fleet(3);
    let mut now = Timestamp::from_millis(10);
    let mut admitted = 0;
    // Replica 0 alone asks until its gate stays closed.
    for _ in 0..40 {
        now = now + ASK_TIMEOUT;
        match try_admit(&mut replicas[0], 700, now) {
            Ok(()) => admitted += 1,
            Err(outs) => {
                let id = replicas[0].id;
                wire.extend(outs.into_iter().map(|o| (id, o)));
                sync(&mut replicas[0]);
                deliver(&mut replicas, &mut wire, now, usize::MAX);
            }
        }
    }
    // Each rank takes prompts while at or under 2,048 tokens: 700 × 3 = 2,100 (the third
    // crosses the line, as with one router), so three per rank.
    assert_eq!(admitted, 6, "{:?}", replicas[0].agent.snapshot(now));
    assert_eq!(prefill_on(&replicas), vec![2100, 2100]);
    // Replica 1 gets nothing while they prefill.
    now = now + ASK_TIMEOUT;
    let outs = try_admit(&mut replicas[1], 700, now).expect_err("every rank is taken");
    let id1 = replicas[1].id;
    wire.extend(outs.into_iter().map(|o| (id1, o)));
    deliver(&mut replicas, &mut wire, now, usize::MAX);
    assert!(try_admit(&mut replicas[1], 700, now).is_err());
    // Prefill ends on replica 0: its credits go back, and replica 1 is served.
    let r0 = &mut replicas[0];
    for request in std::mem::take(&mut r0.prefilling) {
        r0.ledger
            .mark_prefill_done(&BookingKey::new(r0.id, request));
    }
    let id0 = r0.id;
    let outs = r0.agent.reconcile(&r0.ledger);
    wire.extend(outs.into_iter().map(|o| (id0, o)));
    sync(&mut replicas[0]);
    deliver(&mut replicas, &mut wire, now, usize::MAX);
    now = now + ASK_TIMEOUT;
    let outs = try_admit(&mut replicas[1], 700, now).expect_err("credits first");
    wire.extend(outs.into_iter().map(|o| (id1, o)));
    deliver(&mut replicas, &mut wire, now, usize::MAX);
    assert!(
        try_admit(&mut replicas[1], 700, now).is_ok(),
        "{:?}",
        replicas[1].agent.snapshot(now)
    );
}

#[test]
fn a_prompt_above_the_line_still_gets_credits_on_an_idle_rank() {
    let (mut replicas, mut wire) = fleet(1);
    let now = Timestamp::from_millis(10);
    let outs = try_admit(&mut replicas[0], 3000, now).expect_err("no credits yet");
    assert!(outs.is_empty(), "a lone replica grants to itself");
    sync(&mut replicas[0]);
    deliver(&mut replicas, &mut wire, now, usize::MAX);
    assert!(try_admit(&mut replicas[0], 3000, now).is_ok());
}

#[test]
fn a_replica_cut_off_from_the_bus_keeps_what_it_holds_and_gives_it_back_once_reconnected() {
    let (mut replicas, mut wire) = fleet(3);
    // A replica that owns no rank: all its credits come from other owners.
    let members: Vec<RouterId> = replicas.iter().map(|r| r.id).collect();
    let ranks: Vec<RankId> = replicas[0].ledger.rank_ids().collect();
    let at = (0..3)
        .find(|&i| {
            ranks
                .iter()
                .all(|rank| owner_of(*rank, &members) != Some(members[i]))
        })
        .expect("three replicas, two ranks");
    let mut now = Timestamp::from_millis(10);
    let mut admitted = 0;
    for _ in 0..40 {
        now = now + ASK_TIMEOUT;
        match try_admit(&mut replicas[at], 700, now) {
            Ok(()) => admitted += 1,
            Err(outs) => {
                let id = replicas[at].id;
                wire.extend(outs.into_iter().map(|o| (id, o)));
                sync(&mut replicas[at]);
                deliver(&mut replicas, &mut wire, now, usize::MAX);
            }
        }
    }
    assert_eq!(admitted, 6);
    // The bus goes down; the six prefills end.
    let r0 = &mut replicas[at];
    r0.agent.set_connected(false);
    for request in std::mem::take(&mut r0.prefilling) {
        r0.ledger
            .mark_prefill_done(&BookingKey::new(r0.id, request));
    }
    let outs = r0.agent.reconcile(&r0.ledger);
    assert!(outs.is_empty(), "nothing can reach the owners: {outs:?}");
    sync(r0);
    // The credits it held are its safe share: six prompts again, without a message.
    let mut again = 0;
    for _ in 0..10 {
        now = now + ASK_TIMEOUT;
        match try_admit(r0, 700, now) {
            Ok(()) => again += 1,
            Err(outs) => {
                assert!(outs.is_empty(), "no ask while cut off: {outs:?}");
                sync(r0);
            }
        }
    }
    assert_eq!(again, 6, "{:?}", r0.agent.snapshot(now));
    // Back online, with those prefills ended and nothing wanted: the spare goes back.
    r0.agent.set_connected(true);
    for request in std::mem::take(&mut r0.prefilling) {
        r0.ledger
            .mark_prefill_done(&BookingKey::new(r0.id, request));
    }
    let mut outs = r0.agent.reconcile(&r0.ledger);
    outs.extend(r0.agent.tick(now + SPARE_HOLD + SPARE_HOLD));
    let me = r0.id;
    assert!(
        !outs.is_empty() && outs.iter().all(|o| o.to != me),
        "credits from other owners go back: {outs:?} {:?}",
        r0.agent.snapshot(now)
    );
    sync(r0);
    wire.extend(outs.into_iter().map(|o| (me, o)));
    deliver(&mut replicas, &mut wire, now, usize::MAX);
    assert_eq!(replicas[at].agent.spares().count(), 0);
}

#[test]
fn credits_switched_off_leave_the_lines_alone_to_bound_the_room() {
    let (mut replicas, _) = fleet(1);
    let r = &mut replicas[0];
    // With credits on and none held, the gate is closed.
    assert!(
        r.ledger
            .class_gate(CLASS, 10, 700, &Eligibility::ANY)
            .is_err()
    );
    assert!(r.ledger.snapshot().room_credits);
    // Off (a router alone in its pool): the gate opens on the lines alone, and the room
    // epoch rises so waiting gates look again.
    let epoch = r.ledger.room_epoch();
    assert!(r.ledger.disable_credits());
    assert!(r.ledger.room_epoch() > epoch);
    assert!(!r.ledger.snapshot().room_credits);
    assert!(
        r.ledger
            .class_gate(CLASS, 10, 700, &Eligibility::ANY)
            .is_ok()
    );
    assert!(!r.ledger.disable_credits(), "already off");
    // On again: nothing held yet.
    r.ledger.enable_credits(r.id, true);
    assert!(
        r.ledger
            .class_gate(CLASS, 10, 700, &Eligibility::ANY)
            .is_err()
    );
}
