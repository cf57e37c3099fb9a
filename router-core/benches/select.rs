//! One request's placement through the scheduler: gate + select + book + release
//! (`arrive` then `release`), aggregated pool, one gated class (prefill fraction 16,
//! decode fraction 0.9, so the gate and the decode-room filter both run), 16 block hashes
//! per request of which the first 8 are a prefix held on 2 ranks (the `overlap` list
//! names them), at 64 / 512 / 4096 one-rank workers (8192 max_num_batched_tokens, 16384
//! KV blocks). `idle`: nothing else booked. `loaded`: a peer holds varied load on every
//! rank, so the load keys differ. Selection runs the fast path (unfiltered, temperature 0).
//!
//! Run: `cargo bench -p router-core --bench select`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use router_core::ledger::Booking;
use router_core::{
    AdmissionRequest, BookingKey, ClassId, Eligibility, Outcome, Phase, PolicyProfile, PoolRole,
    RankId, RequestId, RouterId, Scheduler, SchedulerConfig, SelectionConfig, SelectionRequest,
    Selector, Timestamp, WorkerSpec,
};
use std::hint::black_box;

const PROFILE: &str = r#"
default_class = "interactive"
[[classes]]
name = "interactive"
slo_ms = 1000
quantum = 512
prefill_busy_threshold_frac = 16.0
decode_busy_threshold_frac = 0.9
"#;

const SIZES: [u64; 3] = [64, 512, 4096];
const OWNER: RouterId = RouterId(uuid::Uuid::from_u128(1));
const PEER: RouterId = RouterId(uuid::Uuid::from_u128(2));
/// Distinct shared prefixes requests draw from.
const PREFIXES: u64 = 32;
const PREFIX_BLOCKS: u64 = 8;

fn prefix_hash(prefix: u64, block: u64) -> u64 {
    (prefix + 1) << 40 | block
}

/// The 2 ranks holding a prefix (spread over the pool).
fn holders(prefix: u64, ranks: u64) -> [RankId; 2] {
    let a = (prefix * 7_919) % ranks;
    let b = (a + ranks / 2 + 1) % ranks;
    [RankId::new(a, 0), RankId::new(b, 0)]
}

fn pool(ranks: u64, loaded: bool) -> Scheduler {
    let profile = PolicyProfile::from_toml_str(PROFILE).expect("bench profile");
    let mut config = SchedulerConfig::new(PoolRole::Aggregated, OWNER);
    config.seed = 42;
    let mut s = Scheduler::new(config, profile);
    let mut n = 0u128;
    let mut book = |s: &mut Scheduler, booking: Booking| {
        n += 1;
        s.ledger_mut()
            .book(BookingKey::new(PEER, RequestId::from_u128(n)), booking);
    };
    for w in 0..ranks {
        s.ledger_mut()
            .upsert_worker(WorkerSpec::new(w, 1, 16_384, 8_192))
            .expect("valid worker");
    }
    for prefix in 0..PREFIXES {
        for rank in holders(prefix, ranks) {
            let block_hashes = (0..PREFIX_BLOCKS).map(|b| prefix_hash(prefix, b)).collect();
            book(
                &mut s,
                Booking {
                    rank,
                    block_hashes,
                    prefill_tokens: 0,
                    extra_blocks: 0,
                },
            );
        }
    }
    if loaded {
        for w in 0..ranks {
            let booking = Booking {
                rank: RankId::new(w, 0),
                block_hashes: (0..(w % 97) * 16).map(|b| (w << 20) | b).collect(),
                prefill_tokens: (w * 7_919) % 60_000,
                extra_blocks: w % 13,
            };
            book(&mut s, booking);
        }
    }
    s
}

/// Request `n`: a shared 8-block prefix, then 8 blocks of its own.
fn request(n: u64, ranks: u64) -> AdmissionRequest {
    let mut r = AdmissionRequest::new(
        RequestId::from_u128(u128::from(n) + (1 << 64)),
        ClassId(0),
        Phase::Aggregated,
        Timestamp(n),
    );
    let prefix = (n * 13) % PREFIXES;
    r.block_hashes = (0..16)
        .map(|b| {
            if b < PREFIX_BLOCKS {
                prefix_hash(prefix, b)
            } else {
                (n << 8) | b
            }
        })
        .collect();
    r.prompt_tokens = 256;
    r.overlap = holders(prefix, ranks)
        .into_iter()
        .map(|rank| (rank, PREFIX_BLOCKS as u32))
        .collect();
    r
}

fn select_book_release(c: &mut Criterion) {
    for (name, loaded) in [("idle", false), ("loaded", true)] {
        let mut group = c.benchmark_group(format!("select/aggregated_select_book_release/{name}"));
        for ranks in SIZES {
            let mut s = pool(ranks, loaded);
            let mut n = 0u64;
            group.bench_with_input(BenchmarkId::from_parameter(ranks), &ranks, |b, &ranks| {
                b.iter(|| {
                    n += 1;
                    let out = s.arrive(request(n, ranks), Timestamp(n), None);
                    assert!(matches!(out, Outcome::Admitted(_)), "{out:?}");
                    black_box(s.release(out.request()))
                })
            });
        }
        group.finish();
    }
}

/// Selection alone on the loaded pool: the fast path against the full-scan reference.
fn fast_against_full_scan(c: &mut Criterion) {
    let mut group = c.benchmark_group("select/selection_only/loaded");
    let selector = Selector::new(SelectionConfig::default()).expect("default settings");
    for ranks in SIZES {
        let s = pool(ranks, true);
        let req = request(1, ranks);
        let wanted = SelectionRequest {
            class: req.class,
            block_hashes: &req.block_hashes,
            prompt_tokens: req.prompt_tokens,
            overlap: &req.overlap,
            eligibility: &Eligibility::ANY,
            preferred: None,
            need_room: Some(req.decode_need()),
            need_prefill: None,
        };
        let mut rng = SmallRng::seed_from_u64(7);
        group.bench_with_input(BenchmarkId::new("fast", ranks), &ranks, |b, _| {
            b.iter(|| black_box(selector.select(s.ledger(), &wanted, &mut rng)))
        });
        group.bench_with_input(BenchmarkId::new("full_scan", ranks), &ranks, |b, _| {
            b.iter(|| black_box(selector.select_full_scan(s.ledger(), &wanted, &mut rng)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = select_book_release, fast_against_full_scan
}
criterion_main!(benches);
