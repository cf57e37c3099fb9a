//! One request's admission through the class gate: gate check + book + release, with
//! queueing on and a decode fraction set, at 64 / 512 / 4096 ranks. Selection is taken out
//! of the picture with a preferred rank (the `select` bench measures it), so this shows
//! what the incremental gate indexes cost. A second group runs the disaggregated prefill
//! gate: its own class gate, the paired decode room, the reservation and its release.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use router_core::ledger::{Booking, Reservation};
use router_core::{
    AdmissionRequest, BookingKey, ClassId, Outcome, Phase, PolicyProfile, PoolRole, RankId,
    RequestId, RouterId, Scheduler, SchedulerConfig, Timestamp, WorkerSpec,
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
[[classes]]
name = "batch"
slo_ms = 60000
quantum = 128
prefill_busy_threshold_frac = 4.0
"#;

const SIZES: [u64; 3] = [64, 512, 4096];
const OWNER: RouterId = RouterId(uuid::Uuid::from_u128(1));
const PEER: RouterId = RouterId(uuid::Uuid::from_u128(2));

/// A pool of `ranks` one-rank workers. With `background`, a peer holds load on every rank:
/// prefill tokens, extra blocks, and up to 1,552 unique block hashes per rank (about 3 M
/// at 4096 ranks, far beyond the CPU caches).
fn pool(role: PoolRole, ranks: u64, background: bool) -> Scheduler {
    let profile = PolicyProfile::from_toml_str(PROFILE).expect("bench profile");
    let mut s = Scheduler::new(SchedulerConfig::new(role, OWNER), profile);
    for w in 0..ranks {
        let spec = WorkerSpec::new(w, 1, 16_384, 8_192);
        s.ledger_mut().upsert_worker(spec).expect("valid worker");
        if !background {
            continue;
        }
        // Background load from a peer so the indexes are not trivially uniform.
        let booking = Booking {
            rank: RankId::new(w, 0),
            block_hashes: (0..(w % 97) * 16).map(|b| (w << 32) | b).collect(),
            prefill_tokens: (w * 7_919) % 60_000,
            extra_blocks: w % 13,
        };
        s.ledger_mut().book(
            BookingKey::new(PEER, RequestId::from_u128(u128::from(w))),
            booking,
        );
    }
    s
}

fn request(n: u64, ranks: u64, phase: Phase) -> AdmissionRequest {
    let mut r = AdmissionRequest::new(
        RequestId::from_u128(u128::from(n) + (1 << 64)),
        ClassId(0),
        phase,
        Timestamp(n),
    );
    r.block_hashes = (0..16).map(|b| (n << 8) | b).collect();
    r.prompt_tokens = 256;
    r.preferred = Some(RankId::new(n % ranks, 0));
    r
}

fn aggregated(c: &mut Criterion) {
    for (name, background) in [("idle", false), ("loaded", true)] {
        aggregated_pool(c, name, background);
    }
}

fn aggregated_pool(c: &mut Criterion, name: &str, background: bool) {
    let mut group = c.benchmark_group(format!("gate/aggregated_gate_book_release/{name}"));
    for ranks in SIZES {
        let mut s = pool(PoolRole::Aggregated, ranks, background);
        let mut n = 0u64;
        group.bench_with_input(BenchmarkId::from_parameter(ranks), &ranks, |b, &ranks| {
            b.iter(|| {
                n += 1;
                let out = s.arrive(request(n, ranks, Phase::Aggregated), Timestamp(n), None);
                assert!(matches!(out, Outcome::Admitted(_)), "{out:?}");
                black_box(s.release(out.request()))
            })
        });
    }
    group.finish();
}

fn prefill_with_paired_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate/prefill_gate_reserve_release");
    for ranks in SIZES {
        let mut prefill = pool(PoolRole::Prefill, ranks, true);
        let mut decode = pool(PoolRole::Decode, ranks, true);
        let mut n = 0u64;
        group.bench_with_input(BenchmarkId::from_parameter(ranks), &ranks, |b, &ranks| {
            b.iter(|| {
                n += 1;
                let out = prefill.arrive(
                    request(n, ranks, Phase::Prefill),
                    Timestamp(n),
                    Some(decode.ledger()),
                );
                let Outcome::Admitted(admission) = &out else {
                    panic!("{out:?}")
                };
                let res = admission.decode_reservation.expect("a decode reservation");
                let hold = Reservation {
                    rank: res.rank,
                    blocks: res.blocks,
                    expires_at: res.expires_at,
                    seq: res.seq,
                };
                decode.ledger_mut().reserve(res.key, hold);
                decode.ledger_mut().unreserve(&res.key);
                black_box(prefill.release(admission.request))
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(3));
    targets = aggregated, prefill_with_paired_decode
}
criterion_main!(benches);
