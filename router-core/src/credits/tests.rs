//! Room credits: the owner never has more out than the line, whatever order messages take.

use super::*;
use crate::credits::CreditKind;
use crate::time::Timestamp;
use proptest::prelude::*;
use std::collections::VecDeque;

fn router(n: u128) -> RouterId {
    RouterId(uuid::Uuid::from_u128(n))
}

const RANK: RankId = RankId::new(1, 0);

#[test]
fn the_owner_of_a_rank_is_the_same_whatever_order_members_come_in() {
    let members = [router(1), router(2), router(3)];
    let reversed = [router(3), router(2), router(1)];
    for w in 0..50 {
        let rank = RankId::new(w, 0);
        assert_eq!(owner_of(rank, &members), owner_of(rank, &reversed));
    }
    assert_eq!(owner_of(RANK, &[]), None);
}

#[test]
fn a_leaving_member_moves_only_its_own_ranks() {
    let three = [router(1), router(2), router(3)];
    let two = [router(1), router(2)];
    let mut moved = 0;
    for w in 0..300 {
        let rank = RankId::new(w, 0);
        let before = owner_of(rank, &three);
        let after = owner_of(rank, &two);
        if before != Some(router(3)) {
            assert_eq!(
                before, after,
                "rank {rank:?} moved although its owner stayed"
            );
        } else {
            moved += 1;
        }
    }
    // Each member owns about a third.
    assert!(
        (60..=140).contains(&moved),
        "{moved} of 300 ranks were owned by one member"
    );
}

#[test]
fn a_grant_fits_under_the_line_and_a_give_back_frees_it() {
    let (me, other) = (router(1), router(2));
    let now = Timestamp::ZERO;
    let mut owner = CreditOwner::new(Duration::from_millis(500));
    owner.own(RANK, now, true);
    let mut holder = CreditHolder::default();
    holder.set_owner(RANK, me);
    let GrantDecision::Granted { blocks, seq } =
        owner.grant(RANK, CreditKind::Decode, me, 300, 512, 0, 1_000, now)
    else {
        panic!("room for 300 of 512");
    };
    let ack = holder
        .granted(me, RANK, blocks, seq)
        .expect("an acknowledgement");
    owner.held(me, ack);
    assert_eq!(owner.outstanding(RANK, CreditKind::Decode), 300);
    assert_eq!(
        owner.grant(RANK, CreditKind::Decode, other, 300, 512, 0, 1_000, now),
        GrantDecision::NoRoom { free: 212 }
    );
    // Load the owner sees but nobody holds credits for still counts.
    assert_eq!(
        owner.grant(RANK, CreditKind::Decode, other, 200, 512, 400, 1_000, now),
        GrantDecision::NoRoom { free: 112 }
    );
    holder.set_used(RANK, 300);
    assert_eq!(holder.spare(RANK), 0);
    assert_eq!(
        holder.set_used(RANK, 0),
        300,
        "the request's blocks are freed"
    );
    let back = holder
        .give_back(RANK, 0)
        .expect("a report of the give-back");
    owner.held(me, back);
    assert_eq!(owner.outstanding(RANK, CreditKind::Decode), 0);
    assert!(matches!(
        owner.grant(RANK, CreditKind::Decode, other, 300, 512, 0, 1_000, now),
        GrantDecision::Granted { .. }
    ));
}

#[test]
fn plentiful_room_is_granted_in_chunks_and_scarce_room_by_the_need() {
    let mut owner = CreditOwner::new(Duration::ZERO);
    let now = Timestamp::ZERO;
    owner.own(RANK, now, true);
    // 512 free, two members: a quarter of the free room at once.
    assert_eq!(
        owner.grant(RANK, CreditKind::Decode, router(1), 10, 512, 0, 2, now),
        GrantDecision::Granted {
            blocks: 128,
            seq: 1
        }
    );
    // 384 free: 96 now.
    assert_eq!(
        owner.grant(RANK, CreditKind::Decode, router(2), 10, 512, 0, 2, now),
        GrantDecision::Granted { blocks: 96, seq: 2 }
    );
    // Past the chunks, a big need still gets exactly what it needs while it fits.
    assert_eq!(
        owner.grant(RANK, CreditKind::Decode, router(2), 288, 512, 0, 2, now),
        GrantDecision::Granted {
            blocks: 288,
            seq: 3
        }
    );
    assert_eq!(owner.outstanding(RANK, CreditKind::Decode), 512);
}

#[test]
fn a_new_owner_grants_nothing_until_it_settles_and_counts_reported_credits() {
    let (old, new, holder_id) = (router(1), router(2), router(3));
    let mut holder = CreditHolder::default();
    holder.set_owner(RANK, old);
    holder.granted(old, RANK, 400, 1);
    let mut owner = CreditOwner::new(Duration::from_millis(500));
    let t0 = Timestamp::from_millis(1_000);
    owner.own(RANK, t0, false);
    assert_eq!(
        owner.grant(RANK, CreditKind::Decode, router(4), 10, 512, 0, 1_000, t0),
        GrantDecision::Settling
    );
    let report = holder
        .set_owner(RANK, new)
        .expect("held credits are reported to the new owner");
    owner.held(holder_id, report);
    let later = Timestamp::from_millis(1_600);
    assert_eq!(
        owner.grant(
            RANK,
            CreditKind::Decode,
            router(4),
            200,
            512,
            0,
            1_000,
            later
        ),
        GrantDecision::NoRoom { free: 112 }
    );
    // A grant from the old owner arriving late is refused.
    assert_eq!(holder.granted(old, RANK, 50, 2), None);
}

#[test]
fn a_gone_holder_frees_its_credits_and_an_unacknowledged_grant_expires() {
    let mut owner = CreditOwner::new(Duration::ZERO);
    let now = Timestamp::ZERO;
    owner.own(RANK, now, true);
    assert!(matches!(
        owner.grant(RANK, CreditKind::Decode, router(2), 500, 512, 0, 1_000, now),
        GrantDecision::Granted { .. }
    ));
    owner.holder_gone(router(2));
    assert_eq!(owner.outstanding(RANK, CreditKind::Decode), 0);
    assert!(matches!(
        owner.grant(RANK, CreditKind::Decode, router(3), 500, 512, 0, 1_000, now),
        GrantDecision::Granted { .. }
    ));
    let later = now + GRANT_TTL;
    assert!(matches!(
        owner.grant(
            RANK,
            CreditKind::Decode,
            router(4),
            500,
            512,
            0,
            1_000,
            later
        ),
        GrantDecision::Granted { .. }
    ));
}

/// What the model's replicas do, one step at a time.
#[derive(Debug, Clone)]
enum Step {
    /// Replica `h` asks for `need` blocks.
    Ask { h: usize, need: u64 },
    /// The next message to the owner is delivered.
    DeliverToOwner,
    /// The next message to replica `h` is delivered.
    DeliverTo { h: usize },
    /// Replica `h` uses its spare credits for a request.
    Use { h: usize },
    /// Replica `h` ends its oldest request and gives back what is spare.
    End { h: usize },
    /// Replica `h` sends a periodic report.
    Report { h: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize, 1..200u64).prop_map(|(h, need)| Step::Ask { h, need }),
        Just(Step::DeliverToOwner),
        (0..3usize).prop_map(|h| Step::DeliverTo { h }),
        (0..3usize).prop_map(|h| Step::Use { h }),
        (0..3usize).prop_map(|h| Step::End { h }),
        (0..3usize).prop_map(|h| Step::Report { h }),
    ]
}

enum ToOwner {
    Ask { h: usize, need: u64 },
    Held { h: usize, report: HeldReport },
}

proptest! {
    /// Whatever the interleaving of asks, grants, uses and give-backs (messages in order per
    /// direction, none lost), the credits replicas really hold never pass the line, and the
    /// owner never counts less than they hold.
    #[test]
    fn replicas_never_hold_more_than_the_line(steps in proptest::collection::vec(step(), 1..300)) {
        const LINE: u64 = 512;
        let owner_id = router(100);
        let ids = [router(1), router(2), router(3)];
        let now = Timestamp::ZERO;
        let mut owner = CreditOwner::new(Duration::ZERO);
        owner.own(RANK, now, true);
        let mut holders: Vec<CreditHolder> = (0..3).map(|_| CreditHolder::default()).collect();
        for h in &mut holders {
            h.set_owner(RANK, owner_id);
        }
        let mut to_owner: VecDeque<ToOwner> = VecDeque::new();
        let mut to_holder: Vec<VecDeque<(u64, u64)>> = vec![VecDeque::new(); 3];
        let mut live: Vec<VecDeque<u64>> = vec![VecDeque::new(); 3];
        for s in steps {
            match s {
                Step::Ask { h, need } => to_owner.push_back(ToOwner::Ask { h, need }),
                Step::DeliverToOwner => match to_owner.pop_front() {
                    Some(ToOwner::Ask { h, need }) => {
                        if let GrantDecision::Granted { blocks, seq } =
                            owner.grant(RANK, CreditKind::Decode, ids[h], need, LINE, 0, 3, now)
                        {
                            to_holder[h].push_back((blocks, seq));
                        }
                    }
                    Some(ToOwner::Held { h, report }) => owner.held(ids[h], report),
                    None => {}
                },
                Step::DeliverTo { h } => {
                    if let Some((blocks, seq)) = to_holder[h].pop_front()
                        && let Some(ack) = holders[h].granted(owner_id, RANK, blocks, seq)
                    {
                        to_owner.push_back(ToOwner::Held { h, report: ack });
                    }
                }
                Step::Use { h } => {
                    let spare = holders[h].spare(RANK);
                    if spare > 0 {
                        live[h].push_back(spare);
                        holders[h].set_used(RANK, live[h].iter().sum());
                    }
                }
                Step::End { h } => {
                    if live[h].pop_front().is_some() {
                        holders[h].set_used(RANK, live[h].iter().sum());
                    }
                    if let Some(report) = holders[h].give_back(RANK, 0) {
                        to_owner.push_back(ToOwner::Held { h, report });
                    }
                }
                Step::Report { h } => {
                    if let Some(report) = holders[h].report(RANK) {
                        to_owner.push_back(ToOwner::Held { h, report });
                    }
                }
            }
            let held: u64 = holders
                .iter()
                .map(|h| h.held(RANK))
                .sum();
            let in_flight: u64 = to_holder.iter().flatten().map(|(b, _)| b).sum();
            prop_assert!(held + in_flight <= LINE, "held {held} + in flight {in_flight} > {LINE}");
            prop_assert!(owner.outstanding(RANK, CreditKind::Decode) >= held + in_flight);
        }
    }
}
