//! Property tests: whatever another process puts on the bus, once decoded, the pool router
//! survives it. Peers' deltas and snapshots with any numbers (`u64::MAX` tokens, blocks and
//! leases included), workers' specs and KV events with any ids, interleaved with routing,
//! releases and expiry, never panic (debug builds check every addition for overflow) and
//! leave a ledger that can still route.

use super::*;
use crate::admission::{Phase, PoolRole};
use crate::ids::{ClassId, RankId, RouterId};
use crate::index::{ExternalHash, KvEventData, StoredBlock};
use crate::ledger::{Booking, BookingDelta, LeaseLeft, LeasedReservation};
use proptest::prelude::*;
use uuid::Uuid;

const BS: u32 = 16;

fn router() -> PoolRouter {
    let profile = PolicyProfile::from_toml_str(
        "default_class = \"chat\"\n[[classes]]\nname = \"chat\"\nslo_ms = 1000\nquantum = 64\n\
         prefill_busy_threshold_frac = 1.0\ndecode_busy_threshold_frac = 0.9\n",
    )
    .expect("valid profile");
    let config = PoolRouterConfig {
        scheduler: crate::admission::SchedulerConfig::new(
            PoolRole::Aggregated,
            RouterId(Uuid::from_u128(1)),
        ),
        block_size: BS,
        prefix: PrefixMode::Events,
    };
    let mut r = PoolRouter::new(config, profile);
    for w in 1..=2 {
        let mut spec = WorkerSpec::new(w, 2, 1000, 8192);
        spec.block_size = BS;
        r.upsert_worker(spec).expect("valid worker");
    }
    r
}

/// Small numbers mostly, and the ones that overflow sums.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..2000,
        1 => Just(u64::MAX),
        1 => Just(u64::MAX / 2 + 1),
        1 => any::<u64>(),
    ]
}

fn rank() -> impl Strategy<Value = RankId> {
    (0u64..4, prop_oneof![0u32..3, Just(u32::MAX)]).prop_map(|(w, dp)| RankId {
        worker: WorkerId(w),
        dp_rank: dp,
    })
}

fn booking() -> impl Strategy<Value = Booking> {
    (
        rank(),
        prop::collection::vec(0u64..16, 0..6),
        number(),
        number(),
    )
        .prop_map(
            |(rank, block_hashes, prefill_tokens, extra_blocks)| Booking {
                rank,
                block_hashes,
                prefill_tokens,
                extra_blocks,
            },
        )
}

fn reservation() -> impl Strategy<Value = LeasedReservation> {
    (rank(), number(), number(), number()).prop_map(|(rank, blocks, left, seq)| LeasedReservation {
        rank,
        blocks,
        lease_left: LeaseLeft::from_duration(std::time::Duration::from_micros(left)),
        seq,
    })
}

fn delta() -> impl Strategy<Value = BookingDelta> {
    let request = (0u128..8).prop_map(RequestId::from_u128);
    prop_oneof![
        (request.clone(), booking())
            .prop_map(|(request, booking)| BookingDelta::Book { request, booking }),
        request
            .clone()
            .prop_map(|request| BookingDelta::PrefillDone { request }),
        request
            .clone()
            .prop_map(|request| BookingDelta::Release { request }),
        (request.clone(), reservation()).prop_map(|(request, reservation)| {
            BookingDelta::Reserve {
                request,
                reservation,
            }
        }),
        request.prop_map(|request| BookingDelta::Unreserve { request }),
    ]
}

fn spec() -> impl Strategy<Value = WorkerSpec> {
    (
        0u64..4,
        prop_oneof![0u32..3, Just(u32::MAX - 1)],
        0u32..4,
        prop::option::of(number()),
        prop::option::of(number()),
        prop_oneof![Just(BS), 0u32..64, Just(u32::MAX)],
    )
        .prop_map(|(id, dp_start, dp_size, kv, batch, block_size)| {
            let mut spec = WorkerSpec::new(id, dp_size, 0, 0);
            spec.dp_start = dp_start;
            spec.total_kv_blocks = kv;
            spec.max_num_batched_tokens = batch;
            spec.block_size = block_size;
            spec
        })
}

fn kv_event() -> impl Strategy<Value = KvEvent> {
    let data = prop_oneof![
        (
            prop::option::of(0u64..32),
            prop::collection::vec((0u64..32, 0u64..32), 0..6)
        )
            .prop_map(|(parent, blocks)| KvEventData::Stored {
                parent: parent.map(ExternalHash),
                blocks: blocks
                    .into_iter()
                    .map(|(hash, local)| StoredBlock {
                        hash: ExternalHash(hash),
                        local: crate::hashing::LocalBlockHash(local),
                    })
                    .collect(),
            }),
        prop::collection::vec(0u64..32, 0..6).prop_map(|h| KvEventData::Removed {
            hashes: h.into_iter().map(ExternalHash).collect()
        }),
        Just(KvEventData::Cleared),
    ];
    (
        0u64..4,
        prop_oneof![0u32..3, Just(u32::MAX)],
        number(),
        data,
    )
        .prop_map(|(worker, dp_rank, event_id, data)| KvEvent {
            worker: WorkerId(worker),
            dp_rank,
            event_id,
            data,
        })
}

#[derive(Debug, Clone)]
enum Op {
    Peer(u128, BookingDelta),
    Replace(u128, Vec<(u128, Booking)>, Vec<(u128, LeasedReservation)>),
    Gone(u128),
    Upsert(WorkerSpec),
    Remove(u64),
    Event(KvEvent),
    Route(u128, u32, u64),
    Release(u128),
    Expire(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 1u128..4;
    prop_oneof![
        6 => (owner.clone(), delta()).prop_map(|(o, d)| Op::Peer(o, d)),
        1 => (
            owner.clone(),
            prop::collection::vec((0u128..8, booking()), 0..4),
            prop::collection::vec((0u128..8, reservation()), 0..3)
        )
            .prop_map(|(o, b, r)| Op::Replace(o, b, r)),
        1 => owner.prop_map(Op::Gone),
        1 => spec().prop_map(Op::Upsert),
        1 => (0u64..4).prop_map(Op::Remove),
        2 => kv_event().prop_map(Op::Event),
        3 => (100u128..120, 0u32..200, number()).prop_map(|(id, len, out)| Op::Route(id, len, out)),
        1 => (100u128..120).prop_map(Op::Release),
        1 => number().prop_map(Op::Expire),
    ]
}

fn apply(r: &mut PoolRouter, op: Op, now: Timestamp) {
    match op {
        Op::Peer(owner, delta) => {
            r.apply_peer(RouterId(Uuid::from_u128(owner)), delta, now);
        }
        Op::Replace(owner, bookings, reservations) => {
            let state = peer::Holdings {
                bookings: bookings
                    .into_iter()
                    .map(|(id, b)| (RequestId::from_u128(id), b))
                    .collect(),
                reservations: reservations
                    .into_iter()
                    .map(|(id, res)| (RequestId::from_u128(id), res))
                    .collect(),
            };
            r.replace_peer(RouterId(Uuid::from_u128(owner)), state, now);
        }
        Op::Gone(owner) => {
            r.peer_gone(RouterId(Uuid::from_u128(owner)));
        }
        Op::Upsert(spec) => {
            let _ = r.upsert_worker(spec);
        }
        Op::Remove(worker) => r.remove_worker(WorkerId(worker)),
        Op::Event(event) => {
            r.apply_kv_event(&event);
        }
        Op::Route(id, len, output) => {
            let mut request = RouteRequest::new(
                RequestId::from_u128(id),
                ClassId(0),
                Phase::Aggregated,
                Prompt::Tokens((0..len).collect()),
            );
            request.expected_output_tokens = output;
            r.route(request, now, now, None);
        }
        Op::Release(id) => {
            r.release(RequestId::from_u128(id));
        }
        Op::Expire(at) => {
            r.expire(Timestamp(at));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoded_bus_input_never_panics_the_pool_router(ops in prop::collection::vec(op(), 1..40)) {
        let mut r = router();
        for (i, op) in ops.into_iter().enumerate() {
            apply(&mut r, op, Timestamp(i as u64 * 1000));
        }
        // Still usable afterwards.
        let _ = r.scheduler().snapshot();
    }
}

/// Found by the property above: two peer bookings of `u64::MAX` private blocks on one rank
/// overflowed its sum. They are clamped when taken, and releasing them leaves the rank idle.
#[test]
fn peer_bookings_of_u64_max_are_clamped_and_released_exactly() {
    let mut r = router();
    let rank = RankId {
        worker: WorkerId(1),
        dp_rank: 0,
    };
    for (owner, request) in [(2, 1), (3, 1)] {
        let booking = Booking {
            rank,
            block_hashes: vec![7],
            prefill_tokens: u64::MAX,
            extra_blocks: u64::MAX,
        };
        r.apply_peer(
            RouterId(Uuid::from_u128(owner)),
            BookingDelta::Book {
                request: RequestId::from_u128(request),
                booking,
            },
            Timestamp(0),
        );
    }
    let snapshot = r.ledger().snapshot();
    assert_eq!(snapshot.counters.clamped, 2);
    let held = snapshot
        .ranks
        .iter()
        .find(|s| s.rank == rank)
        .expect("rank");
    assert_eq!(held.prefill_tokens, 2 * crate::ledger::MAX_BOOKED);
    for owner in [2, 3] {
        r.apply_peer(
            RouterId(Uuid::from_u128(owner)),
            BookingDelta::Release {
                request: RequestId::from_u128(1),
            },
            Timestamp(1),
        );
    }
    assert!(r.ledger().snapshot().is_idle());
}

/// An announcement asking for billions of ranks would make the router allocate a rank state
/// for each: refused as invalid.
#[test]
fn a_worker_with_more_ranks_than_any_engine_is_refused() {
    let mut r = router();
    let before = r.ledger().snapshot().ranks.len();
    let mut spec = WorkerSpec::new(9, u32::MAX / 2, 1000, 8192);
    spec.block_size = BS;
    assert!(r.upsert_worker(spec.clone()).is_err());
    spec.dp_size = crate::worker::MAX_DP_SIZE;
    r.upsert_worker(spec).expect("the largest accepted size");
    assert_eq!(
        r.ledger().snapshot().ranks.len(),
        before + crate::worker::MAX_DP_SIZE as usize
    );
}
