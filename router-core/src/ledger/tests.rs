//! Ledger behaviour: idempotent bookings, shared prefixes counted once, reservations and
//! their conversion, membership changes, overload (the properties are in `props.rs`).

use super::*;
use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RequestId};
use uuid::Uuid;

pub(super) const A: RouterId = RouterId(Uuid::from_u128(1));
pub(super) const B: RouterId = RouterId(Uuid::from_u128(2));

pub(super) fn key(owner: RouterId, n: u128) -> BookingKey {
    BookingKey::new(owner, RequestId::from_u128(n))
}

pub(super) fn profile() -> PolicyProfile {
    PolicyProfile::from_toml_str(
        r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 1000
quantum = 100
prefill_busy_threshold = 100
decode_busy_threshold_frac = 0.5
[[classes]]
name = "batch"
slo_ms = 1000
quantum = 100
prefill_busy_threshold_frac = 0.5
busy_worker_ratio = 0.5
[[classes]]
name = "bulk"
slo_ms = 1000
quantum = 100
decode_busy_threshold_frac = 0.9
[reject_thresholds]
decode_blocks_frac = 0.95
prefill_tokens = 1000
"#,
    )
    .expect("valid test profile")
}

fn booking(rank: RankId, hashes: &[u64], prefill: u64) -> Booking {
    Booking {
        rank,
        block_hashes: hashes.to_vec(),
        prefill_tokens: prefill,
        extra_blocks: 0,
    }
}

fn ledger_with(workers: &[(u64, u32, u64)]) -> BookingLedger {
    let mut ledger = BookingLedger::new(&profile());
    for &(id, ranks, kv) in workers {
        ledger
            .upsert_worker(WorkerSpec::new(id, ranks, kv, 200))
            .expect("valid worker");
    }
    ledger
}

#[test]
fn a_shared_prefix_counts_once_per_rank() {
    let mut l = ledger_with(&[(1, 1, 100)]);
    let r = RankId::new(1, 0);
    l.book(key(A, 1), booking(r, &[10, 11, 12], 30));
    l.book(key(A, 2), booking(r, &[10, 11, 13, 14], 40));
    let s = l.rank_snapshot(r).expect("rank");
    assert_eq!((s.decode_blocks, s.prefill_tokens, s.requests), (5, 70, 2));
    l.release(&key(A, 1));
    assert_eq!(l.rank_snapshot(r).map(|s| s.decode_blocks), Some(4));
}

#[test]
fn operations_are_idempotent_and_keyed_by_owner_and_request() {
    let mut l = ledger_with(&[(1, 1, 100)]);
    let r = RankId::new(1, 0);
    assert_eq!(
        l.book(key(A, 1), booking(r, &[1], 10)),
        BookResult::Booked {
            converted_reservation: false
        }
    );
    assert_eq!(
        l.book(key(A, 1), booking(r, &[1], 10)),
        BookResult::AlreadyBooked
    );
    // Same request id from another router is another booking.
    assert!(matches!(
        l.book(key(B, 1), booking(r, &[1], 10)),
        BookResult::Booked { .. }
    ));
    assert!(l.mark_prefill_done(&key(A, 1)));
    assert!(!l.mark_prefill_done(&key(A, 1)));
    assert_eq!(l.rank_snapshot(r).map(|s| s.prefill_tokens), Some(10));
    assert_eq!(l.release(&key(A, 1)), Some(r));
    assert_eq!(l.release(&key(A, 1)), None);
    assert_eq!(l.counters().duplicate_books, 1);
    assert_eq!(
        l.book(key(A, 9), booking(RankId::new(7, 0), &[], 1)),
        BookResult::UnknownRank
    );
}

#[test]
fn a_reservation_holds_room_until_its_decode_leg_books_it() {
    let mut l = ledger_with(&[(1, 1, 100)]);
    let r = RankId::new(1, 0);
    let interactive = ClassId(0); // line = 50 blocks
    let res = Reservation {
        rank: r,
        blocks: 40,
        expires_at: Timestamp(1_000),
        seq: 1,
    };
    assert_eq!(l.reserve(key(A, 1), res), ReserveResult::Reserved);
    assert_eq!(l.applied_reserve_seq(A), 1);
    assert_eq!(
        l.decode_room(interactive, 11, &Eligibility::ANY, &[]),
        RoomAnswer::Full
    );
    assert!(matches!(
        l.decode_room(interactive, 10, &Eligibility::ANY, &[]),
        RoomAnswer::Room { .. }
    ));
    let epoch = l.room_epoch();
    let hashes: Vec<u64> = (0..30).collect();
    assert_eq!(
        l.book(key(A, 1), booking(r, &hashes, 0)),
        BookResult::Booked {
            converted_reservation: true
        }
    );
    let s = l.rank_snapshot(r).expect("rank");
    assert_eq!((s.decode_blocks, s.reserved_blocks), (30, 0));
    assert!(
        l.room_epoch() > epoch,
        "a smaller booking than the hold frees room"
    );
    assert_eq!(l.reserve(key(A, 1), res), ReserveResult::AlreadyBooked);
}

#[test]
fn reservations_expire_at_their_lease_and_raise_the_room_epoch() {
    let mut l = ledger_with(&[(1, 1, 100)]);
    let r = RankId::new(1, 0);
    l.reserve(
        key(A, 1),
        Reservation {
            rank: r,
            blocks: 5,
            expires_at: Timestamp(2_000),
            seq: 1,
        },
    );
    l.reserve(
        key(A, 2),
        Reservation {
            rank: r,
            blocks: 7,
            expires_at: Timestamp(1_000),
            seq: 2,
        },
    );
    assert_eq!(l.next_reservation_expiry(), Some(Timestamp(1_000)));
    let epoch = l.room_epoch();
    assert!(l.expire_reservations(Timestamp(999)).is_empty());
    assert_eq!(l.room_epoch(), epoch);
    assert_eq!(l.expire_reservations(Timestamp(1_000)), vec![key(A, 2)]);
    assert!(l.room_epoch() > epoch);
    assert_eq!(l.rank_snapshot(r).map(|s| s.reserved_blocks), Some(5));
    assert_eq!(l.unreserve(&key(A, 1)), Some(r));
    assert_eq!(l.next_reservation_expiry(), None);
    assert!(l.snapshot().is_idle());
}

#[test]
fn releasing_an_owner_drops_only_its_bookings_and_reservations() {
    let mut l = ledger_with(&[(1, 2, 100)]);
    l.book(key(A, 1), booking(RankId::new(1, 0), &[1, 2], 5));
    l.book(key(B, 1), booking(RankId::new(1, 1), &[1, 2], 5));
    l.reserve(
        key(A, 2),
        Reservation {
            rank: RankId::new(1, 1),
            blocks: 3,
            expires_at: Timestamp(9),
            seq: 1,
        },
    );
    assert_eq!(l.release_owner(A), 2);
    assert_eq!(l.booking_count(), 1);
    assert_eq!(l.reservation_count(), 0);
    assert!(l.booking(&key(B, 1)).is_some());
}

#[test]
fn removing_a_worker_drops_what_its_ranks_held() {
    let mut l = ledger_with(&[(1, 2, 100), (2, 1, 100)]);
    l.book(key(A, 1), booking(RankId::new(1, 1), &[1], 5));
    l.book(key(A, 2), booking(RankId::new(2, 0), &[1], 5));
    let dropped = l.remove_worker(WorkerId(1));
    assert_eq!(dropped, vec![key(A, 1)]);
    assert_eq!((l.rank_count(), l.booking_count()), (1, 1));
    // A re-announcement with fewer ranks drops the vanished rank's bookings.
    l.upsert_worker(WorkerSpec::new(1, 2, 100, 200))
        .expect("valid");
    l.book(key(A, 3), booking(RankId::new(1, 1), &[1], 5));
    let dropped = l
        .upsert_worker(WorkerSpec::new(1, 1, 100, 200))
        .expect("valid");
    assert_eq!(dropped, vec![key(A, 3)]);
}

#[test]
fn a_capacity_change_moves_the_class_lines() {
    let mut l = ledger_with(&[(1, 1, 100)]);
    let r = RankId::new(1, 0);
    let hashes: Vec<u64> = (0..40).collect();
    l.book(key(A, 1), booking(r, &hashes, 0));
    assert_eq!(
        l.class_gate(ClassId(0), 20, 0, &Eligibility::ANY),
        Err(GateClosed::DecodeFull)
    );
    let epoch = l.room_epoch();
    l.upsert_worker(WorkerSpec::new(1, 1, 200, 200))
        .expect("valid");
    assert!(l.room_epoch() > epoch);
    assert_eq!(l.class_gate(ClassId(0), 20, 0, &Eligibility::ANY), Ok(()));
}

#[test]
fn a_worker_is_overloaded_only_when_all_its_ranks_are_over() {
    let mut l = ledger_with(&[(1, 2, 100)]);
    l.book(key(A, 1), booking(RankId::new(1, 0), &[], 1_001));
    assert!(!l.worker_is_overloaded(WorkerId(1)));
    l.book(key(A, 2), booking(RankId::new(1, 1), &[], 1_001));
    assert!(l.worker_is_overloaded(WorkerId(1)));
    // No eligible rank left: the gate stays open so selection can report the overload.
    assert_eq!(l.class_gate(ClassId(0), 1, 0, &Eligibility::ANY), Ok(()));
    assert_eq!(
        l.decode_room(ClassId(0), 1, &Eligibility::ANY, &[]),
        RoomAnswer::NoRanks
    );
    l.mark_prefill_done(&key(A, 2));
    assert!(!l.worker_is_overloaded(WorkerId(1)));
}

#[test]
fn the_gate_names_why_it_is_closed() {
    let mut l = ledger_with(&[(1, 1, 100), (2, 1, 100)]);
    let (r1, r2) = (RankId::new(1, 0), RankId::new(2, 0));
    let interactive = ClassId(0);
    l.book(key(A, 1), booking(r1, &[], 101));
    assert_eq!(l.class_gate(interactive, 1, 0, &Eligibility::ANY), Ok(()));
    l.book(key(A, 2), booking(r2, &[], 101));
    assert_eq!(
        l.class_gate(interactive, 1, 0, &Eligibility::ANY),
        Err(GateClosed::PrefillBusy)
    );
    l.mark_prefill_done(&key(A, 2));
    let hashes: Vec<u64> = (0..45).collect();
    l.book(key(A, 3), booking(r2, &hashes, 0));
    // r2 is not busy but has only 5 blocks left under the 0.5 line.
    assert_eq!(
        l.class_gate(interactive, 6, 0, &Eligibility::ANY),
        Err(GateClosed::DecodeFull)
    );
    assert_eq!(l.class_gate(interactive, 5, 0, &Eligibility::ANY), Ok(()));
    // Pinned to the busy rank: closed for the pin even though r2 is open.
    assert_eq!(
        l.class_gate(interactive, 1, 0, &Eligibility::pinned(r1)),
        Err(GateClosed::PrefillBusy)
    );
}

#[test]
fn with_credits_on_the_room_is_what_the_credits_cover() {
    let mut l = ledger_with(&[(1, 1, 100)]);
    let r = RankId::new(1, 0);
    let interactive = ClassId(0);
    // A peer's booking before credits: it counts against the line, not against A's credits.
    l.book(key(B, 1), booking(r, &(0..10).collect::<Vec<_>>(), 0));
    l.enable_credits(A, false);
    assert_eq!(
        l.class_gate(interactive, 1, 0, &Eligibility::ANY),
        Err(GateClosed::DecodeFull),
        "no credits, no room"
    );
    let epoch = l.room_epoch();
    l.set_credit_held(r, 30);
    assert!(l.room_epoch() > epoch, "more credits raise the room epoch");
    assert_eq!(l.class_gate(interactive, 30, 0, &Eligibility::ANY), Ok(()));
    assert_eq!(
        l.class_gate(interactive, 31, 0, &Eligibility::ANY),
        Err(GateClosed::DecodeFull)
    );
    // A books 20 blocks (3 of them shared with B's): its credits cover all 20.
    l.book(key(A, 2), booking(r, &(7..27).collect::<Vec<_>>(), 0));
    assert_eq!(l.own_blocks(r), 20);
    assert_eq!(l.class_gate(interactive, 10, 0, &Eligibility::ANY), Ok(()));
    assert_eq!(
        l.class_gate(interactive, 11, 0, &Eligibility::ANY),
        Err(GateClosed::DecodeFull)
    );
    // The line still binds: 50 - 27 committed = 23 < 40 spare credits.
    l.set_credit_held(r, 60);
    assert_eq!(l.class_gate(interactive, 23, 0, &Eligibility::ANY), Ok(()));
    assert_eq!(
        l.class_gate(interactive, 24, 0, &Eligibility::ANY),
        Err(GateClosed::DecodeFull)
    );
    l.release(&key(A, 2));
    assert_eq!(l.own_blocks(r), 0);
}

#[test]
fn the_busy_ratio_closes_the_gate_before_every_rank_is_busy() {
    let mut l = ledger_with(&[(1, 1, 100), (2, 1, 100), (3, 1, 100), (4, 1, 100)]);
    let batch = ClassId(1); // busy above 100 tokens (0.5 x 200), ratio 0.5
    l.book(key(A, 1), booking(RankId::new(1, 0), &[], 101));
    assert_eq!(l.class_gate(batch, 0, 0, &Eligibility::ANY), Ok(()));
    l.book(key(A, 2), booking(RankId::new(2, 0), &[], 101));
    assert_eq!(l.busy_ranks(batch), (2, 4));
    assert_eq!(
        l.class_gate(batch, 0, 0, &Eligibility::ANY),
        Err(GateClosed::PrefillBusy)
    );
}

#[test]
fn lora_requests_are_checked_on_adapter_capable_ranks() {
    let mut l = BookingLedger::new(&profile());
    let mut with_lora = WorkerSpec::new(1, 1, 100, 200);
    with_lora.loras = vec!["sql".into()];
    l.upsert_worker(with_lora).expect("valid");
    l.upsert_worker(WorkerSpec::new(2, 1, 100, 200))
        .expect("valid");
    let hashes: Vec<u64> = (0..50).collect();
    l.book(key(A, 1), booking(RankId::new(1, 0), &hashes, 0));
    assert_eq!(
        l.decode_room(ClassId(0), 1, &Eligibility::lora("sql"), &[]),
        RoomAnswer::Full
    );
    assert!(matches!(
        l.decode_room(ClassId(0), 1, &Eligibility::ANY, &[]),
        RoomAnswer::Room { rank, .. } if rank == RankId::new(2, 0)
    ));
    // Nobody serves this adapter: fall back to every eligible rank.
    assert!(matches!(
        l.decode_room(ClassId(0), 1, &Eligibility::lora("none"), &[]),
        RoomAnswer::Room { .. }
    ));
}

#[test]
fn pending_reservations_of_the_reader_count_against_the_room_it_sees() {
    let l = ledger_with(&[(1, 1, 100), (2, 1, 100)]);
    let (r1, r2) = (RankId::new(1, 0), RankId::new(2, 0));
    // Line 50 on both; the reader already promised 45 on r1 and 30 on r2.
    let pending = [(r1, 45), (r2, 30)];
    assert_eq!(
        l.decode_room(ClassId(0), 20, &Eligibility::ANY, &pending),
        RoomAnswer::Room {
            rank: r2,
            headroom: 20
        }
    );
    assert_eq!(
        l.decode_room(ClassId(0), 21, &Eligibility::ANY, &pending),
        RoomAnswer::Full
    );
}
