//! Ledger properties: random operations (bookings, prefill ends, releases, reservations,
//! expiry, membership, credits of both kinds) hold the incremental gate to the full-scan
//! reference and leave every counter at zero after a full release.

use super::tests::{A, B, key, profile};
use super::*;
use crate::credits::CreditKey;
use crate::eligibility::Eligibility;
use crate::ids::ClassId;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Book {
        owner: bool,
        req: u8,
        rank: u8,
        first: u8,
        blocks: u8,
        prefill: u16,
        extra: u8,
    },
    PrefillDone {
        owner: bool,
        req: u8,
    },
    Release {
        owner: bool,
        req: u8,
    },
    Reserve {
        owner: bool,
        req: u8,
        rank: u8,
        blocks: u8,
        at: u8,
    },
    Expire {
        at: u8,
    },
    ReleaseOwner {
        owner: bool,
    },
    Upsert {
        worker: u8,
        ranks: u8,
        kv: u8,
        batch: u8,
    },
    RemoveWorker {
        worker: u8,
    },
    /// Room credits (only with credits on): A now holds `held` on a rank.
    Credit {
        rank: u8,
        held: u8,
    },
    /// Prefill credits (only with them on): A now holds `held` prompt tokens on a rank.
    PrefillCredit {
        rank: u8,
        held: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), 0u8..24, 0u8..12, 0u8..4, 0u8..12, 0u16..400, 0u8..4).prop_map(
            |(owner, req, rank, first, blocks, prefill, extra)| Op::Book { owner, req, rank, first, blocks, prefill, extra }),
        2 => (any::<bool>(), 0u8..24).prop_map(|(owner, req)| Op::PrefillDone { owner, req }),
        3 => (any::<bool>(), 0u8..24).prop_map(|(owner, req)| Op::Release { owner, req }),
        3 => (any::<bool>(), 0u8..24, 0u8..12, 0u8..30, 0u8..50).prop_map(
            |(owner, req, rank, blocks, at)| Op::Reserve { owner, req, rank, blocks, at }),
        1 => (0u8..50).prop_map(|at| Op::Expire { at }),
        1 => any::<bool>().prop_map(|owner| Op::ReleaseOwner { owner }),
        1 => (0u8..5, 1u8..4, 0u8..80, 1u8..255).prop_map(|(worker, ranks, kv, batch)| Op::Upsert { worker, ranks, kv, batch }),
        1 => (0u8..5).prop_map(|worker| Op::RemoveWorker { worker }),
        2 => (0u8..12, 0u8..60).prop_map(|(rank, held)| Op::Credit { rank, held }),
        2 => (0u8..12, 0u16..600).prop_map(|(rank, held)| Op::PrefillCredit { rank, held }),
    ]
}

fn rank_of(l: &BookingLedger, n: u8) -> RankId {
    let ranks: Vec<RankId> = l.snapshot().ranks.iter().map(|r| r.rank).collect();
    if ranks.is_empty() {
        RankId::new(99, 0)
    } else {
        ranks[usize::from(n) % ranks.len()]
    }
}

fn apply(l: &mut BookingLedger, op: &Op) {
    let owner = |b: bool| if b { A } else { B };
    match *op {
        Op::Book {
            owner: o,
            req,
            rank,
            first,
            blocks,
            prefill,
            extra,
        } => {
            let hashes: Vec<u64> = (0..u64::from(blocks))
                .map(|i| u64::from(first) * 1000 + i)
                .collect();
            let b = Booking {
                rank: rank_of(l, rank),
                block_hashes: hashes,
                prefill_tokens: u64::from(prefill),
                extra_blocks: u64::from(extra),
            };
            l.book(key(owner(o), u128::from(req)), b);
        }
        Op::PrefillDone { owner: o, req } => {
            l.mark_prefill_done(&key(owner(o), u128::from(req)));
        }
        Op::Release { owner: o, req } => {
            l.release(&key(owner(o), u128::from(req)));
        }
        Op::Reserve {
            owner: o,
            req,
            rank,
            blocks,
            at,
        } => {
            let r = Reservation {
                rank: rank_of(l, rank),
                blocks: u64::from(blocks),
                expires_at: Timestamp(u64::from(at)),
                seq: u64::from(req),
            };
            l.reserve(key(owner(o), u128::from(req)), r);
        }
        Op::Expire { at } => {
            l.expire_reservations(Timestamp(u64::from(at)));
        }
        Op::ReleaseOwner { owner: o } => {
            l.release_owner(owner(o));
        }
        Op::Upsert {
            worker,
            ranks,
            kv,
            batch,
        } => {
            let mut spec = WorkerSpec::new(
                u64::from(worker),
                u32::from(ranks),
                u64::from(kv),
                u64::from(batch) * 4,
            );
            if worker % 2 == 0 {
                spec.loras = vec!["sql".into()];
            }
            l.upsert_worker(spec).expect("valid generated worker");
        }
        Op::RemoveWorker { worker } => {
            l.remove_worker(WorkerId(u64::from(worker)));
        }
        Op::Credit { rank, held } => {
            let rank = rank_of(l, rank);
            l.set_credit_held(rank, u64::from(held));
        }
        Op::PrefillCredit { rank, held } => {
            let rank = rank_of(l, rank);
            l.set_credit_held(CreditKey::prefill(rank), u64::from(held));
        }
    }
}

fn filters(l: &BookingLedger) -> Vec<Eligibility> {
    let mut out = vec![
        Eligibility::ANY,
        Eligibility::lora("sql"),
        Eligibility::lora("none"),
    ];
    if let Some(r) = l.snapshot().ranks.first() {
        out.push(Eligibility::pinned(r.rank));
        out.push(Eligibility {
            allowed_workers: Some(vec![r.rank.worker]),
            ..Eligibility::default()
        });
    }
    out
}

/// A room answer without the rank, which may differ between equally good ties.
fn headroom_of(answer: RoomAnswer) -> Option<Option<i64>> {
    match answer {
        RoomAnswer::Room { headroom, .. } => Some(Some(headroom)),
        RoomAnswer::Full => Some(None),
        RoomAnswer::NoRanks => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn releasing_everything_leaves_every_counter_at_zero(
        setup in proptest::collection::vec((0u8..5, 1u8..4, 0u8..80, 1u8..255), 1..4),
        ops in proptest::collection::vec(op(), 0..80),
        credits in any::<bool>(),
        prefill_credits in any::<bool>(),
    ) {
        let mut l = BookingLedger::new(&profile());
        for (worker, ranks, kv, batch) in setup {
            apply(&mut l, &Op::Upsert { worker, ranks, kv, batch });
        }
        if credits {
            l.enable_credits(A, prefill_credits);
        }
        for op in &ops {
            apply(&mut l, op);
        }
        l.release_owner(A);
        l.release_owner(B);
        let snap = l.snapshot();
        prop_assert!(snap.is_idle(), "not idle: {snap:?}");
        for r in &snap.ranks {
            prop_assert_eq!(l.own_blocks(r.rank), 0, "own blocks left on {:?}", r.rank);
            prop_assert_eq!(l.own_use(CreditKey::prefill(r.rank)), 0, "own prefill left on {:?}", r.rank);
        }
        let (busy, eligible) = l.busy_ranks(ClassId(0));
        prop_assert_eq!(busy, 0);
        prop_assert_eq!(eligible as usize, snap.ranks.len());
    }

    #[test]
    fn the_incremental_gate_always_agrees_with_the_full_scan(
        setup in proptest::collection::vec((0u8..5, 1u8..4, 0u8..80, 1u8..255), 1..4),
        ops in proptest::collection::vec(op(), 0..60),
        needs in proptest::collection::vec((0u64..60, 0u64..500), 1..4),
        credits in any::<bool>(),
        prefill_credits in any::<bool>(),
    ) {
        let mut l = BookingLedger::new(&profile());
        for (worker, ranks, kv, batch) in setup {
            apply(&mut l, &Op::Upsert { worker, ranks, kv, batch });
        }
        if credits {
            l.enable_credits(A, prefill_credits);
        }
        for op in &ops {
            apply(&mut l, op);
            let reference = ReferenceGate::new(&l);
            let pending = [(rank_of(&l, 0), 7), (rank_of(&l, 3), 2)];
            for filter in filters(&l) {
                for class in [ClassId(0), ClassId(1), ClassId(2)] {
                    for &(need, prefill_need) in &needs {
                        prop_assert_eq!(l.class_gate(class, need, prefill_need, &filter), reference.class_gate(class, need, prefill_need, &filter),
                            "class {:?} need {} prefill {} filter {:?}", class, need, prefill_need, filter);
                        if class != ClassId(1) {
                            let top = l.top_decode_rooms(class, &filter, 4);
                            prop_assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "{:?}", top);
                            match l.best_decode_room(class, &filter, &[]) {
                                BestRoom::Best { headroom, .. } => prop_assert_eq!(top.first().map(|t| t.1), Some(headroom)),
                                BestRoom::NoRanks => prop_assert!(top.is_empty()),
                            }
                            for p in [&[][..], &pending[..]] {
                                let fast = l.decode_room(class, need, &filter, p);
                                let slow = reference.decode_room(class, need, &filter, p);
                                prop_assert_eq!(headroom_of(fast), headroom_of(slow), "{:?} vs {:?}", fast, slow);
                                if let RoomAnswer::Room { rank, headroom } = fast {
                                    // Ties may pick another rank, never a worse one.
                                    let pinned = Eligibility { pinned: Some(rank), ..filter.clone() };
                                    let check = reference.decode_room(class, 0, &pinned, p);
                                    prop_assert!(matches!(check, RoomAnswer::Room { headroom: h, .. } if h == headroom), "{:?}", check);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
