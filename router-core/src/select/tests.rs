//! Selection behaviour: prefix reuse against load, pins and preferences, eligibility
//! errors, tie spreading and softmax sampling. Every unfiltered temperature-0 case is
//! checked on both the fast path and the full scan.

use super::*;
use crate::ids::{BookingKey, RequestId, RouterId, WorkerId};
use crate::ledger::Booking;
use crate::policy::PolicyProfile;
use crate::worker::WorkerSpec;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use uuid::Uuid;

const OWNER: RouterId = RouterId(Uuid::from_u128(7));
/// Class 0 has no lines; class 1 may use half of a rank's KV blocks.
const FREE: ClassId = ClassId(0);
const HALF: ClassId = ClassId(1);

fn profile() -> PolicyProfile {
    PolicyProfile::from_toml_str(
        r#"
default_class = "free"
[[classes]]
name = "free"
slo_ms = 1000
quantum = 100
[[classes]]
name = "half"
slo_ms = 1000
quantum = 100
decode_busy_threshold_frac = 0.5
[reject_thresholds]
prefill_tokens = 10000
"#,
    )
    .expect("valid test profile")
}

/// `n` workers of one rank each (KV 1000 blocks, block size 16); even ones serve "sql".
fn ledger(n: u64) -> BookingLedger {
    let mut ledger = BookingLedger::new(&profile());
    for id in 0..n {
        let mut spec = WorkerSpec::new(id, 1, 1000, 8192);
        if id % 2 == 0 {
            spec.loras = vec!["sql".into()];
        }
        ledger.upsert_worker(spec).expect("valid worker");
    }
    ledger
}

fn rank(worker: u64) -> RankId {
    RankId::new(worker, 0)
}

fn book(ledger: &mut BookingLedger, n: u128, on: RankId, hashes: &[u64], prefill: u64) {
    let key = BookingKey::new(OWNER, RequestId::from_u128(n));
    let booking = Booking {
        rank: on,
        block_hashes: hashes.to_vec(),
        prefill_tokens: prefill,
        extra_blocks: 0,
    };
    ledger.book(key, booking);
}

/// Chained hashes: a shared root of `shared` blocks, then a tail unique to `tail`.
fn chain(shared: u64, tail: u64, len: u64) -> Vec<u64> {
    (0..len)
        .map(|i| {
            if i < shared {
                1000 + i
            } else {
                tail * 1_000_000 + i
            }
        })
        .collect()
}

fn request<'a>(hashes: &'a [u64], overlap: &'a [(RankId, u32)]) -> SelectionRequest<'a> {
    SelectionRequest {
        class: FREE,
        block_hashes: hashes,
        prompt_tokens: hashes.len() as u64 * 16,
        overlap,
        eligibility: &Eligibility::ANY,
        preferred: None,
        need_room: None,
        need_prefill: None,
    }
}

fn selector() -> Selector {
    Selector::new(SelectionConfig::default()).expect("default config is valid")
}

/// Both paths, same seed: the answers must agree.
fn both(ledger: &BookingLedger, request: &SelectionRequest<'_>) -> Result<Selected, SelectError> {
    let s = selector();
    let fast = s.select(ledger, request, &mut SmallRng::seed_from_u64(1));
    let scan = s.select_full_scan(ledger, request, &mut SmallRng::seed_from_u64(1));
    match (&fast, &scan) {
        (Ok(a), Ok(b)) => assert!((a.cost - b.cost).abs() < 1e-9, "{a:?} vs {b:?}"),
        _ => assert_eq!(fast, scan),
    }
    fast
}

#[test]
fn overlap_credit_attracts_a_request_to_the_rank_holding_its_prefix() {
    let mut l = ledger(4);
    let prefix = chain(8, 1, 8);
    book(&mut l, 1, rank(2), &prefix, 0);
    let hashes = chain(8, 2, 12);
    let overlap = [(rank(2), 8)];
    let got = both(&l, &request(&hashes, &overlap)).expect("placed");
    // P × (12 prompt blocks − c × 8 cached) + 8 committed + 4 new, against P × 12 + 0 + 12
    // on an idle rank.
    let SelectionConfig {
        prefill_load_scale: p,
        overlap_credit: c,
        ..
    } = SelectionConfig::default();
    assert_eq!(
        (got.rank, got.overlap_blocks, got.cost),
        (rank(2), 8, p * (12.0 - c * 8.0) + 12.0)
    );
}

#[test]
fn a_prefix_booked_in_flight_attracts_like_a_cached_one() {
    let mut l = ledger(4);
    // A request on rank 2 is still in prefill: its 8 blocks are booked, not yet announced
    // by the worker, so the KV index reports no overlap anywhere.
    book(&mut l, 1, rank(2), &chain(8, 1, 8), 128);
    let hashes = chain(8, 2, 12);
    let got = both(&l, &request(&hashes, &[])).expect("placed");
    assert_eq!((got.rank, got.overlap_blocks), (rank(2), 8));

    let blind = Selector::new(SelectionConfig {
        count_booked_prefix: false,
        ..SelectionConfig::default()
    })
    .expect("valid");
    let req = request(&hashes, &[]);
    let fast = blind.select(&l, &req, &mut SmallRng::seed_from_u64(1));
    let scan = blind.select_full_scan(&l, &req, &mut SmallRng::seed_from_u64(1));
    for got in [fast, scan] {
        let got = got.expect("placed");
        assert_ne!(got.rank, rank(2), "the busy rank has nothing cached yet");
        assert_eq!(got.overlap_blocks, 0);
    }
}

#[test]
fn a_cached_prefix_longer_than_the_booked_one_counts() {
    let mut l = ledger(4);
    book(&mut l, 1, rank(2), &chain(8, 1, 8)[..2], 32);
    let hashes = chain(8, 2, 12);
    let overlap = [(rank(2), 8)];
    let got = both(&l, &request(&hashes, &overlap)).expect("placed");
    assert_eq!((got.rank, got.overlap_blocks), (rank(2), 8));
}

#[test]
fn load_outweighs_overlap_when_the_holder_is_loaded() {
    let mut l = ledger(4);
    book(&mut l, 1, rank(2), &chain(8, 1, 8), 4096);
    let hashes = chain(8, 2, 12);
    let overlap = [(rank(2), 8)];
    let got = both(&l, &request(&hashes, &overlap)).expect("placed");
    assert_ne!(got.rank, rank(2));
    assert_eq!(got.overlap_blocks, 0);
}

#[test]
fn requests_sharing_only_a_first_block_do_not_herd() {
    let mut l = ledger(4);
    let s = selector();
    let mut rng = SmallRng::seed_from_u64(3);
    let mut used = std::collections::BTreeSet::new();
    for n in 0..8u64 {
        let hashes = chain(1, n + 10, 12);
        // The KV index would report the one shared block on every rank holding it.
        let overlap: Vec<(RankId, u32)> = used.iter().map(|r| (*r, 1)).collect();
        let got = s
            .select(&l, &request(&hashes, &overlap), &mut rng)
            .expect("placed");
        used.insert(got.rank);
        book(&mut l, u128::from(n), got.rank, &hashes, 192);
    }
    assert_eq!(used.len(), 4, "every rank took some of the load: {used:?}");
}

#[test]
fn a_pin_is_validated_and_taken_whatever_it_costs() {
    let mut l = ledger(3);
    book(&mut l, 1, rank(1), &chain(0, 1, 4), 5000);
    let hashes = chain(0, 2, 4);
    let pinned = Eligibility::pinned(rank(1));
    let mut req = request(&hashes, &[]);
    req.eligibility = &pinned;
    assert_eq!(both(&l, &req).map(|s| s.rank), Ok(rank(1)));

    let unknown = Eligibility::pinned(rank(9));
    req.eligibility = &unknown;
    assert_eq!(
        both(&l, &req),
        Err(SelectError::PinnedUnavailable { rank: rank(9) })
    );

    let not_allowed = Eligibility {
        pinned: Some(rank(1)),
        allowed_workers: Some(vec![WorkerId(0)]),
        lora: None,
    };
    req.eligibility = &not_allowed;
    assert_eq!(
        both(&l, &req),
        Err(SelectError::PinnedUnavailable { rank: rank(1) })
    );

    book(&mut l, 2, rank(1), &[], 6000); // over the 10000-token reject line
    req.eligibility = &pinned;
    assert_eq!(
        both(&l, &req),
        Err(SelectError::PinnedOverloaded { rank: rank(1) })
    );
}

#[test]
fn a_preferred_rank_is_taken_only_while_it_is_eligible() {
    let mut l = ledger(3);
    book(&mut l, 1, rank(1), &chain(0, 1, 4), 4000);
    let hashes = chain(0, 2, 4);
    let mut req = request(&hashes, &[]);
    req.preferred = Some(rank(1));
    assert_eq!(both(&l, &req).map(|s| s.rank), Ok(rank(1)));

    // Not a LoRA worker while one serving the adapter exists.
    let lora = Eligibility::lora("sql");
    req.eligibility = &lora;
    assert_ne!(both(&l, &req).map(|s| s.rank), Ok(rank(1)));

    // No room for the class there: 4 committed + 497 needed > 500.
    req.eligibility = &Eligibility::ANY;
    req.class = HALF;
    req.need_room = Some(497);
    assert_ne!(both(&l, &req).map(|s| s.rank), Ok(rank(1)));

    // Overloaded.
    req.class = FREE;
    req.need_room = None;
    book(&mut l, 2, rank(1), &[], 7000);
    assert_ne!(both(&l, &req).map(|s| s.rank), Ok(rank(1)));
}

#[test]
fn lora_and_allow_lists_narrow_the_candidates() {
    let mut l = ledger(4);
    book(&mut l, 1, rank(0), &[], 3000);
    book(&mut l, 2, rank(2), &[], 3000);
    let hashes = chain(0, 2, 4);
    let lora = Eligibility::lora("sql");
    let mut req = request(&hashes, &[]);
    req.eligibility = &lora;
    let got = both(&l, &req).expect("placed");
    assert!([rank(0), rank(2)].contains(&got.rank), "{got:?}");

    // An adapter nobody serves falls back to every allowed worker.
    let unknown = Eligibility::lora("nobody");
    req.eligibility = &unknown;
    let got = both(&l, &req).expect("placed");
    assert!([rank(1), rank(3)].contains(&got.rank), "{got:?}");

    let allowed = Eligibility {
        allowed_workers: Some(vec![WorkerId(2)]),
        ..Eligibility::default()
    };
    req.eligibility = &allowed;
    assert_eq!(both(&l, &req).map(|s| s.rank), Ok(rank(2)));
}

#[test]
fn errors_tell_no_worker_from_overload_and_from_no_room() {
    let hashes = chain(0, 2, 4);
    let req = request(&hashes, &[]);
    assert_eq!(both(&ledger(0), &req), Err(SelectError::NoWorkers));

    let mut l = ledger(2);
    let nobody = Eligibility {
        allowed_workers: Some(vec![WorkerId(42)]),
        ..Eligibility::default()
    };
    let mut filtered = req;
    filtered.eligibility = &nobody;
    assert_eq!(both(&l, &filtered), Err(SelectError::NoWorkers));

    let mut full = req;
    full.class = HALF;
    full.need_room = Some(501);
    assert_eq!(both(&l, &full), Err(SelectError::NoRoom));

    book(&mut l, 1, rank(0), &[], 20_000);
    book(&mut l, 2, rank(1), &[], 20_000);
    assert_eq!(both(&l, &req), Err(SelectError::AllWorkersOverloaded));
}

#[test]
fn seeded_tie_breaks_spread_over_every_tied_rank() {
    let l = ledger(8);
    let hashes = chain(0, 2, 4);
    let req = request(&hashes, &[]);
    let s = selector();
    for path in ["fast", "scan"] {
        let mut rng = SmallRng::seed_from_u64(11);
        let mut counts = [0u32; 8];
        for _ in 0..800 {
            let got = match path {
                "fast" => s.select(&l, &req, &mut rng),
                _ => s.select_full_scan(&l, &req, &mut rng),
            };
            counts[got.expect("placed").rank.worker.0 as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c >= 60), "{path}: {counts:?}");
    }
}

#[test]
fn a_positive_temperature_favours_cheaper_ranks_and_replays_by_seed() {
    let mut l = ledger(3);
    book(&mut l, 1, rank(1), &[], 800);
    book(&mut l, 2, rank(2), &[], 1600);
    let hashes = chain(0, 2, 4);
    let req = request(&hashes, &[]);
    let warm = Selector::new(SelectionConfig {
        temperature: 0.5,
        ..SelectionConfig::default()
    })
    .expect("valid");
    let draw = |seed: u64| -> Vec<RankId> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..3000)
            .map(|_| warm.select(&l, &req, &mut rng).expect("placed").rank)
            .collect()
    };
    let picks = draw(5);
    let count = |r: RankId| picks.iter().filter(|p| **p == r).count();
    let (cheap, mid, dear) = (count(rank(0)), count(rank(1)), count(rank(2)));
    assert!(
        cheap > mid && mid > dear && dear > 0,
        "{cheap} {mid} {dear}"
    );
    assert_eq!(picks, draw(5));
    assert_ne!(picks, draw(6));
}

#[test]
fn the_scheduler_places_on_the_prefix_holder_and_replays_by_seed() {
    use crate::admission::{
        AdmissionRequest, Outcome, Phase, PoolRole, Scheduler, SchedulerConfig,
    };
    use crate::time::Timestamp;
    let run = |seed: u64| -> Vec<RankId> {
        let mut config = SchedulerConfig::new(PoolRole::Aggregated, OWNER);
        config.seed = seed;
        let mut s = Scheduler::new(config, profile());
        for id in 0..6 {
            s.ledger_mut()
                .upsert_worker(WorkerSpec::new(id, 1, 1000, 8192))
                .expect("valid worker");
        }
        (0..12u64)
            .map(|n| {
                let mut r = AdmissionRequest::new(
                    RequestId::from_u128(u128::from(n)),
                    FREE,
                    Phase::Aggregated,
                    Timestamp(n),
                );
                r.block_hashes = chain(0, n, 4);
                r.prompt_tokens = 64;
                if n % 3 == 0 {
                    r.overlap = vec![(rank(4), 4)];
                }
                match s.arrive(r, Timestamp(n), None) {
                    Outcome::Admitted(a) => a.rank,
                    other => panic!("not admitted: {other:?}"),
                }
            })
            .collect()
    };
    let picks = run(1);
    // On an idle pool the cached prefix makes rank 4 cost 4 − 4 + 0 + 4 = 4 against 8.
    assert_eq!(picks[0], rank(4));
    // Load spreads the rest: no rank takes everything.
    assert!(
        picks
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            >= 4
    );
    assert_eq!(picks, run(1));
}

#[test]
fn the_scheduler_refuses_or_repairs_invalid_selection_settings() {
    use crate::admission::{PoolRole, Scheduler, SchedulerConfig};
    let mut config = SchedulerConfig::new(PoolRole::Aggregated, OWNER);
    config.selection.overlap_credit = f64::NAN;
    let err = Scheduler::try_new(config.clone(), profile()).expect_err("NaN refused");
    assert!(matches!(
        err,
        SelectionConfigError::NotFinite {
            field: "overlap_credit",
            ..
        }
    ));
    let repaired = Scheduler::new(config, profile());
    assert_eq!(
        repaired.ledger().prefill_load_scale(),
        SelectionConfig::default().prefill_load_scale
    );
}
