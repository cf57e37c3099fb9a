//! The fast path against the full-scan reference on random ledgers: bookings with chained
//! hashes that share prefixes, prefill completions, releases, reservations, overloads,
//! workers of several ranks and two block sizes, random overlaps, preferences and room
//! needs. At temperature 0 both must pick a rank of equal cost, or fail the same way.

use super::*;
use crate::ids::{BookingKey, RequestId, RouterId, WorkerId};
use crate::ledger::{Booking, Reservation};
use crate::policy::PolicyProfile;
use crate::time::Timestamp;
use crate::worker::WorkerSpec;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use uuid::Uuid;

const OWNER: RouterId = RouterId(Uuid::from_u128(9));

fn profile() -> PolicyProfile {
    PolicyProfile::from_toml_str(
        r#"
default_class = "free"
[[classes]]
name = "free"
slo_ms = 1000
quantum = 100
[[classes]]
name = "tight"
slo_ms = 1000
quantum = 100
decode_busy_threshold_frac = 0.3
[reject_thresholds]
prefill_tokens = 900
decode_blocks_frac = 0.9
"#,
    )
    .expect("valid test profile")
}

/// Hashes of a prompt: `shared` blocks of root `root`, then blocks of a tail named by
/// (root, branch, shared). Two prompts agree on a prefix and differ after it, as chained
/// hashes do (equal hashes at a position imply equal hashes before it).
fn prompt(root: u8, branch: u8, shared: u8, len: u8) -> Vec<u64> {
    (0..u64::from(len))
        .map(|i| {
            if i < u64::from(shared) {
                u64::from(root) * 1_000 + i
            } else {
                let tail = (u64::from(root) * 10 + u64::from(branch)) * 10 + u64::from(shared);
                (tail + 1) * 1_000_000 + i
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Book {
        req: u8,
        rank: u8,
        root: u8,
        branch: u8,
        shared: u8,
        len: u8,
        prefill: u16,
    },
    PrefillDone {
        req: u8,
    },
    Release {
        req: u8,
    },
    Reserve {
        req: u8,
        rank: u8,
        blocks: u8,
    },
    Upsert {
        worker: u8,
        ranks: u8,
        kv: u8,
        big_blocks: bool,
    },
    RemoveWorker {
        worker: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..40, 0u8..16, 0u8..3, 0u8..3, 0u8..6, 0u8..10, 0u16..500).prop_map(
            |(req, rank, root, branch, shared, len, prefill)| Op::Book { req, rank, root, branch, shared, len, prefill }),
        2 => (0u8..40).prop_map(|req| Op::PrefillDone { req }),
        3 => (0u8..40).prop_map(|req| Op::Release { req }),
        2 => (0u8..40, 0u8..16, 0u8..30).prop_map(|(req, rank, blocks)| Op::Reserve { req, rank, blocks }),
        1 => (0u8..6, 1u8..4, 10u8..80, any::<bool>()).prop_map(|(worker, ranks, kv, big_blocks)| Op::Upsert { worker, ranks, kv, big_blocks }),
        1 => (0u8..6).prop_map(|worker| Op::RemoveWorker { worker }),
    ]
}

fn ranks(l: &BookingLedger) -> Vec<RankId> {
    l.snapshot().ranks.iter().map(|r| r.rank).collect()
}

fn pick(l: &BookingLedger, n: u8) -> RankId {
    let all = ranks(l);
    all.get(usize::from(n) % all.len().max(1))
        .copied()
        .unwrap_or(RankId::new(99, 0))
}

fn key(req: u8) -> BookingKey {
    BookingKey::new(OWNER, RequestId::from_u128(u128::from(req)))
}

fn apply(l: &mut BookingLedger, op: &Op) {
    match *op {
        Op::Book {
            req,
            rank,
            root,
            branch,
            shared,
            len,
            prefill,
        } => {
            let booking = Booking {
                rank: pick(l, rank),
                block_hashes: prompt(root, branch, shared, len),
                prefill_tokens: u64::from(prefill),
                extra_blocks: u64::from(len % 3),
            };
            l.book(key(req), booking);
        }
        Op::PrefillDone { req } => {
            l.mark_prefill_done(&key(req));
        }
        Op::Release { req } => {
            l.release(&key(req));
        }
        Op::Reserve { req, rank, blocks } => {
            let reservation = Reservation {
                rank: pick(l, rank),
                blocks: u64::from(blocks),
                expires_at: Timestamp(1_000),
                seq: u64::from(req),
            };
            l.reserve(key(req), reservation);
        }
        Op::Upsert {
            worker,
            ranks,
            kv,
            big_blocks,
        } => {
            let mut spec = WorkerSpec::new(u64::from(worker), u32::from(ranks), u64::from(kv), 600);
            spec.block_size = if big_blocks { 32 } else { 16 };
            l.upsert_worker(spec).expect("valid generated worker");
        }
        Op::RemoveWorker { worker } => {
            l.remove_worker(WorkerId(u64::from(worker)));
        }
    }
}

#[derive(Debug, Clone)]
struct Ask {
    root: u8,
    branch: u8,
    shared: u8,
    len: u8,
    prompt_tokens: u16,
    overlap: Vec<(u8, u8)>,
    preferred: Option<u8>,
    room: Option<u8>,
    seed: u64,
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        (0u8..3, 0u8..3, 0u8..6, 0u8..10, 0u16..400),
        proptest::collection::vec((0u8..20, 0u8..8), 0..4),
        proptest::option::weighted(0.2, 0u8..20),
        proptest::option::weighted(0.5, 0u8..30),
        any::<u64>(),
    )
        .prop_map(
            |((root, branch, shared, len, prompt_tokens), overlap, preferred, room, seed)| Ask {
                root,
                branch,
                shared,
                len,
                prompt_tokens,
                overlap,
                preferred,
                room,
                seed,
            },
        )
}

fn settings() -> impl Strategy<Value = SelectionConfig> {
    (
        prop_oneof![Just(0.0), Just(0.5), Just(1.0), Just(2.0)],
        prop_oneof![Just(0.0), Just(1.0), Just(2.5), Just(4.0)],
        any::<bool>(),
    )
        .prop_map(
            |(prefill_load_scale, overlap_credit, count_booked_prefix)| SelectionConfig {
                prefill_load_scale,
                overlap_credit,
                temperature: 0.0,
                count_booked_prefix,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_fast_path_picks_a_rank_as_cheap_as_the_full_scan(
        config in settings(),
        setup in proptest::collection::vec((0u8..6, 1u8..4, 10u8..80, any::<bool>()), 1..5),
        ops in proptest::collection::vec(op(), 0..60),
        asks in proptest::collection::vec(ask(), 1..6),
    ) {
        let mut l = BookingLedger::new(&profile());
        l.set_prefill_load_scale(config.prefill_load_scale);
        for (worker, ranks, kv, big_blocks) in setup {
            apply(&mut l, &Op::Upsert { worker, ranks, kv, big_blocks });
        }
        let selector = Selector::new(config).expect("valid settings");
        for op in &ops {
            apply(&mut l, op);
            for a in &asks {
                let hashes = prompt(a.root, a.branch, a.shared, a.len);
                let overlap: Vec<(RankId, u32)> = a.overlap.iter()
                    .map(|&(r, b)| (pick(&l, r), u32::from(b)))
                    .collect();
                let request = SelectionRequest {
                    class: ClassId(u16::from(a.room.is_some())),
                    block_hashes: &hashes,
                    prompt_tokens: u64::from(a.prompt_tokens),
                    overlap: &overlap,
                    eligibility: &Eligibility::ANY,
                    preferred: a.preferred.map(|p| pick(&l, p)),
                    need_room: a.room.map(u64::from),
                    need_prefill: None,
                };
                let fast = selector.select(&l, &request, &mut SmallRng::seed_from_u64(a.seed));
                let scan = selector.select_full_scan(&l, &request, &mut SmallRng::seed_from_u64(a.seed));
                match (fast, scan) {
                    (Ok(f), Ok(s)) => {
                        let tolerance = 1e-9 * s.cost.abs().max(1.0);
                        prop_assert!((f.cost - s.cost).abs() <= tolerance, "fast {:?} scan {:?}", f, s);
                        // The fast answer's own cost and overlap are the rank's real ones.
                        let pinned = Eligibility::pinned(f.rank);
                        let check = SelectionRequest { eligibility: &pinned, ..request };
                        let again = selector.select_full_scan(&l, &check, &mut SmallRng::seed_from_u64(0));
                        prop_assert_eq!(again.map(|s| (s.cost, s.overlap_blocks)), Ok((f.cost, f.overlap_blocks)));
                    }
                    (f, s) => prop_assert_eq!(f, s),
                }
            }
        }
    }
}
