//! KV prefix index on a Mooncake conversation-trace replay.
//!
//! The trace (12,031 requests, `hash_ids` = chained 512-token block ids) is first turned into
//! an op stream per fleet size: each request is looked up, placed on the rank with the longest
//! match (ties by a hash of the request index), and that worker "stores" the blocks it lacked
//! (one Stored event, parent = the last matched block). Each worker models an LRU cache of
//! `CAPACITY_BLOCKS` blocks; what it evicts goes out as one Removed event. The timed part then
//! replays that op stream (events applied + lookups) against a fresh index:
//!
//! - criterion: `replay/<W>w` = the mixed stream, throughput in ops (events + lookups) per second;
//! - printed report, per fleet (8 and 64 workers): the mixed, events-only and lookups-only
//!   rates as median [min-max] of several runs, each in two units: whole ops (one event, however
//!   many blocks it carries, or one lookup) and block-ops (one block stored, removed or looked
//!   up; a lookup counts all its request's blocks); find_matches latency percentiles
//!   (hdrhistogram) during the mixed replay; and lookup latency on a reader thread while a writer
//!   thread applies the event stream as fast as it can, against the same reader alone.
//!
//! Run: `cargo bench -p router-core --bench index` (append `-- none` for the printed report
//! alone, without criterion). `INDEX_BENCH_PROFILE=<events|lookups|mixed>:<workers>` repeats one
//! phase for `INDEX_BENCH_SECS` (5) seconds for a profiler and skips everything else.
//!
//! The trace ships gzipped in `traces/` (see `traces/README.md`).

#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark times itself, reads the trace file and its settings from the \
              environment; router-core's own code does none of that"
)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use hdrhistogram::Histogram;
use router_core::hashing::{LocalBlockHash, SequenceHash, sequence_hashes};
use router_core::{
    ExternalHash, KvEvent, KvEventData, KvIndexReader, KvIndexWriter, ReferenceIndex, StoredBlock,
    WorkerId, WorkerSpec,
};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Blocks (of 512 tokens) one simulated worker caches: 4 M tokens.
const CAPACITY_BLOCKS: usize = 8_192;
const FLEETS: [u64; 2] = [8, 64];
/// Placements that count as a worker's load (roughly the requests in flight).
const LOAD_WINDOW: usize = 64;

#[derive(Deserialize)]
struct TraceLine {
    hash_ids: Vec<u64>,
}

/// The shipped trace, from the crate's manifest directory.
const TRACE: &str = "../traces/conversation_trace.jsonl.gz";

fn trace_path() -> Option<PathBuf> {
    Some(Path::new(env!("CARGO_MANIFEST_DIR")).join(TRACE)).filter(|p| p.is_file())
}

fn load_trace(path: &Path) -> Vec<Vec<u64>> {
    let mut text = String::new();
    let read = std::fs::File::open(path).and_then(|file| {
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(file), &mut text)
    });
    if let Err(e) = read {
        eprintln!("reading {}: {e}", path.display());
        return Vec::new();
    }
    text.lines()
        .filter_map(|l| serde_json::from_str::<TraceLine>(l).ok())
        .map(|l| l.hash_ids)
        .collect()
}

enum Op {
    Event(KvEvent),
    Lookup(usize),
}

struct Workload {
    workers: u64,
    /// Sequence hashes of each request.
    seqs: Vec<Vec<SequenceHash>>,
    ops: Vec<Op>,
    events: usize,
    lookups: usize,
    stored_blocks: usize,
    removed_blocks: usize,
}

/// One simulated engine cache: LRU over block ids.
#[derive(Default)]
struct EngineCache {
    by_touch: BTreeMap<u64, u64>,
    touched: FxHashMap<u64, u64>,
    next_event_id: u64,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn fresh_index(workers: u64) -> KvIndexWriter {
    let mut ix = KvIndexWriter::with_capacity(workers as usize * CAPACITY_BLOCKS);
    for w in 0..workers {
        let spec = WorkerSpec::new(w, 1, CAPACITY_BLOCKS as u64, 8_192);
        if let Err(e) = ix.add_worker(&spec) {
            eprintln!("worker {w} refused: {e}");
        }
    }
    ix
}

impl Workload {
    fn build(trace: &[Vec<u64>], workers: u64) -> Self {
        let seqs: Vec<Vec<SequenceHash>> = trace
            .iter()
            .map(|ids| {
                sequence_hashes(&ids.iter().map(|&id| LocalBlockHash(id)).collect::<Vec<_>>())
            })
            .collect();
        let mut ix = fresh_index(workers);
        let mut caches: Vec<EngineCache> = (0..workers).map(|_| EngineCache::default()).collect();
        let mut tick = 0u64;
        let mut load = vec![0usize; workers as usize];
        let mut recent = std::collections::VecDeque::new();
        let mut ops = Vec::with_capacity(trace.len() * 3);
        let (mut events, mut stored_blocks, mut removed_blocks) = (0, 0, 0);
        for (i, ids) in trace.iter().enumerate() {
            ops.push(Op::Lookup(i));
            let scores = ix.find_matches(&seqs[i]);
            // Cost = blocks to compute + blocks recently placed (a stand-in for load), the
            // cheapest wins, ties by a hash of the request index.
            let cost = |w: u64| {
                let depth = scores.get(router_core::RankId::new(w, 0)) as usize;
                ids.len() - depth.min(ids.len()) + load[w as usize]
            };
            let best = (0..workers).map(cost).min().unwrap_or(0);
            let ties: Vec<u64> = (0..workers).filter(|&w| cost(w) == best).collect();
            let w = ties[(splitmix(i as u64) % ties.len() as u64) as usize];
            let depth = scores.get(router_core::RankId::new(w, 0));
            load[w as usize] += ids.len();
            recent.push_back((w, ids.len()));
            if recent.len() > LOAD_WINDOW
                && let Some((old_w, n)) = recent.pop_front()
            {
                load[old_w as usize] -= n;
            }
            let cache = &mut caches[w as usize];
            let depth = depth as usize;
            let mut apply = |ix: &mut KvIndexWriter, cache: &mut EngineCache, data| {
                let ev = KvEvent {
                    worker: WorkerId(w),
                    dp_rank: 0,
                    event_id: cache.next_event_id,
                    data,
                };
                cache.next_event_id += 1;
                ix.apply(&ev);
                ops.push(Op::Event(ev));
                events += 1;
            };
            if depth < ids.len() {
                let blocks: Vec<StoredBlock> = ids[depth..]
                    .iter()
                    .map(|&id| StoredBlock {
                        hash: ExternalHash(id),
                        local: LocalBlockHash(id),
                    })
                    .collect();
                stored_blocks += blocks.len();
                let parent = depth.checked_sub(1).map(|p| ExternalHash(ids[p]));
                apply(&mut ix, cache, KvEventData::Stored { parent, blocks });
            }
            // Touch deepest first so prefixes are always more recent than their extensions
            // and the LRU evicts leaves before their parents.
            for &id in ids.iter().rev() {
                tick += 1;
                if let Some(old) = cache.touched.insert(id, tick) {
                    cache.by_touch.remove(&old);
                }
                cache.by_touch.insert(tick, id);
            }
            let mut evicted = Vec::new();
            while cache.touched.len() > CAPACITY_BLOCKS {
                let Some((_, id)) = cache.by_touch.pop_first() else {
                    break;
                };
                cache.touched.remove(&id);
                evicted.push(ExternalHash(id));
            }
            if !evicted.is_empty() {
                removed_blocks += evicted.len();
                apply(&mut ix, cache, KvEventData::Removed { hashes: evicted });
            }
        }
        let stats = ix.stats();
        assert_eq!(
            stats.statuses.ok, events as u64,
            "the generated stream is clean: {stats:?}"
        );
        Self {
            workers,
            lookups: trace.len(),
            seqs,
            ops,
            events,
            stored_blocks,
            removed_blocks,
        }
    }

    fn replay(&self, ix: &mut KvIndexWriter, reader: &KvIndexReader) {
        for op in &self.ops {
            match op {
                Op::Event(ev) => {
                    black_box(ix.apply(ev));
                }
                Op::Lookup(i) => {
                    black_box(reader.find_matches(&self.seqs[*i]));
                }
            }
        }
    }

    fn apply_events(&self, ix: &mut KvIndexWriter) {
        for op in &self.ops {
            if let Op::Event(ev) = op {
                black_box(ix.apply(ev));
            }
        }
    }

    fn ops(&self) -> usize {
        self.events + self.lookups
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

fn fmt_hist(h: &Histogram<u64>) -> String {
    format!(
        "p50 {} ns, p90 {} ns, p99 {} ns, p99.9 {} ns, max {} ns (n = {})",
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.90),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        h.len()
    )
}

/// Median, min and max of a set of rates.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Self {
            median: v[v.len() / 2],
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// The same spread scaled (e.g. ops/s to block-ops/s).
    fn scaled(&self, k: f64) -> Self {
        Self {
            median: self.median * k,
            min: self.min * k,
            max: self.max * k,
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} M/s [{:.2}-{:.2}]",
            self.median / 1e6,
            self.min / 1e6,
            self.max / 1e6
        )
    }
}

/// Mixed, events-only and lookups-only rates, and per-lookup latency during a mixed replay.
fn single_thread_report(wl: &Workload) {
    const RUNS: usize = 9;
    let mut mixed = Vec::new();
    let mut evs = Vec::new();
    let mut looks = Vec::new();
    for _ in 0..RUNS {
        let mut ix = fresh_index(wl.workers);
        let reader = ix.reader();
        let t = Instant::now();
        wl.replay(&mut ix, &reader);
        mixed.push(wl.ops() as f64 / t.elapsed().as_secs_f64());
        drop((ix, reader));

        let mut ix = fresh_index(wl.workers);
        let t = Instant::now();
        wl.apply_events(&mut ix);
        evs.push(wl.events as f64 / t.elapsed().as_secs_f64());

        // Lookups of every request against the final state.
        let reader = ix.reader();
        let t = Instant::now();
        for s in &wl.seqs {
            black_box(reader.find_matches(s));
        }
        looks.push(wl.lookups as f64 / t.elapsed().as_secs_f64());
    }
    // The single-threaded reference (plain maps, naive per-rank lookup), for comparison.
    let mut reference = ReferenceIndex::new();
    for w in 0..wl.workers {
        let _ = reference.add_worker(&WorkerSpec::new(w, 1, CAPACITY_BLOCKS as u64, 8_192));
    }
    let t = Instant::now();
    for op in &wl.ops {
        if let Op::Event(ev) = op {
            black_box(reference.apply(ev));
        }
    }
    let ref_events = wl.events as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for s in &wl.seqs {
        black_box(reference.find_matches(s));
    }
    let ref_lookups = wl.lookups as f64 / t.elapsed().as_secs_f64();

    let mut lat = histogram();
    let mut ix = fresh_index(wl.workers);
    let reader = ix.reader();
    for op in &wl.ops {
        match op {
            Op::Event(ev) => {
                ix.apply(ev);
            }
            Op::Lookup(i) => {
                let t = Instant::now();
                black_box(reader.find_matches(&wl.seqs[*i]));
                let _ = lat.record(t.elapsed().as_nanos() as u64);
            }
        }
    }
    let stats = ix.stats();
    println!(
        "== index replay, {} workers (capacity {} blocks each) ==",
        wl.workers, CAPACITY_BLOCKS
    );
    println!(
        "  stream: {} events ({} blocks stored, {} removed) + {} lookups = {} ops; final index {} blocks, {} rank-blocks",
        wl.events,
        wl.stored_blocks,
        wl.removed_blocks,
        wl.lookups,
        wl.ops(),
        stats.blocks,
        stats.rank_blocks
    );
    let probed: usize = wl.seqs.iter().map(Vec::len).sum();
    let event_blocks = wl.stored_blocks + wl.removed_blocks;
    let block_ops = event_blocks + probed;
    let (mixed, evs, looks) = (Spread::of(mixed), Spread::of(evs), Spread::of(looks));
    println!(
        "  (rates: median [min-max] of {RUNS} runs; one op = one whole event or one lookup; one block-op = one block stored, removed or looked up)"
    );
    println!(
        "  mixed replay:   {} ops (events + lookups) = {} block-ops",
        mixed,
        mixed.scaled(block_ops as f64 / wl.ops() as f64)
    );
    println!(
        "  events only:    {} events = {} block-ops",
        evs,
        evs.scaled(event_blocks as f64 / wl.events as f64)
    );
    println!(
        "  lookups only (final state): {} lookups = {} block-ops (request blocks)",
        looks,
        looks.scaled(probed as f64 / wl.lookups as f64)
    );
    println!(
        "  reference index (single-threaded, naive lookup), one run: {:.2} M events/s, {:.2} M lookups/s",
        ref_events / 1e6,
        ref_lookups / 1e6
    );
    println!(
        "  find_matches latency during mixed replay: {}",
        fmt_hist(&lat)
    );
}

/// A reader thread looks requests up while (a) nothing else runs, (b) a writer thread applies
/// the event stream over and over on the same index.
fn concurrent_report(wl: &Workload) {
    let run = |with_writer: bool| -> (Histogram<u64>, f64, f64) {
        let mut ix = fresh_index(wl.workers);
        wl.apply_events(&mut ix); // a populated index to start from
        let reader = ix.reader();
        let stop = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            let writer = s.spawn({
                let stop = Arc::clone(&stop);
                move || {
                    let mut applied = 0usize;
                    let t = Instant::now();
                    while with_writer && !stop.load(Ordering::Relaxed) {
                        for w in 0..wl.workers {
                            ix.remove_worker(WorkerId(w));
                            let _ = ix.add_worker(&WorkerSpec::new(
                                w,
                                1,
                                CAPACITY_BLOCKS as u64,
                                8_192,
                            ));
                        }
                        wl.apply_events(&mut ix);
                        applied += wl.events;
                    }
                    applied as f64 / t.elapsed().as_secs_f64()
                }
            });
            let mut lat = histogram();
            let start = Instant::now();
            let deadline = start + Duration::from_secs(2);
            'outer: loop {
                for s in &wl.seqs {
                    let t = Instant::now();
                    black_box(reader.find_matches(s));
                    let _ = lat.record(t.elapsed().as_nanos() as u64);
                    if lat.len().is_multiple_of(1024) && Instant::now() > deadline {
                        break 'outer;
                    }
                }
            }
            let lookup_rate = lat.len() as f64 / start.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            let writer_rate = writer.join().unwrap_or(0.0);
            (lat, lookup_rate, writer_rate)
        })
    };
    let (alone, alone_rate, _) = run(false);
    let (busy, busy_rate, writer_rate) = run(true);
    println!(
        "  reader thread alone ({:.2} M lookups/s): {}",
        alone_rate / 1e6,
        fmt_hist(&alone)
    );
    println!(
        "  reader thread while a writer thread applies events ({:.2} M lookups/s): {}",
        busy_rate / 1e6,
        fmt_hist(&busy)
    );
    println!(
        "  writer thread meanwhile: {:.2} M events/s (each round removes and re-adds every worker, then applies the whole stream); both threads together: {:.2} M ops/s",
        writer_rate / 1e6,
        (writer_rate + busy_rate) / 1e6
    );
}

/// `INDEX_BENCH_PROFILE=<events|lookups|mixed>:<workers>`: repeats one phase for about five
/// seconds and skips the rest, for a profiler (`perf record`, `valgrind --tool=callgrind`).
fn profile_loop(trace: &[Vec<u64>], spec: &str) {
    let (phase, workers) = spec.split_once(':').unwrap_or((spec, "8"));
    let workers: u64 = workers.parse().unwrap_or(8);
    let secs: f64 = std::env::var("INDEX_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let wl = Workload::build(trace, workers);
    let mut final_ix = fresh_index(workers);
    wl.apply_events(&mut final_ix);
    let start = Instant::now();
    let mut rounds = Vec::new();
    while start.elapsed().as_secs_f64() < secs {
        match phase {
            "events" => {
                let mut ix = fresh_index(workers);
                let t = Instant::now();
                wl.apply_events(&mut ix);
                rounds.push(t.elapsed().as_secs_f64());
            }
            "lookups" => {
                let reader = final_ix.reader();
                let t = Instant::now();
                for s in &wl.seqs {
                    black_box(reader.find_matches(s));
                }
                rounds.push(t.elapsed().as_secs_f64());
            }
            _ => {
                let mut ix = fresh_index(workers);
                let reader = ix.reader();
                let t = Instant::now();
                wl.replay(&mut ix, &reader);
                rounds.push(t.elapsed().as_secs_f64());
            }
        }
    }
    let n = rounds.len();
    let per_round = Spread::of(rounds);
    println!(
        "profile {phase}:{workers}: {n} rounds, {:.3} ms per round (median; min {:.3}, max {:.3})",
        per_round.median * 1e3,
        per_round.min * 1e3,
        per_round.max * 1e3
    );
}

fn bench_index(c: &mut Criterion) {
    let Some(path) = trace_path() else {
        eprintln!(
            "index bench skipped: the Mooncake conversation trace is not at {TRACE} relative to {}",
            env!("CARGO_MANIFEST_DIR")
        );
        return;
    };
    let trace = load_trace(&path);
    if trace.is_empty() {
        eprintln!(
            "index bench skipped: {} holds no parsable lines",
            path.display()
        );
        return;
    }
    if let Ok(spec) = std::env::var("INDEX_BENCH_PROFILE") {
        profile_loop(&trace, &spec);
        return;
    }
    let workloads: Vec<Workload> = FLEETS.iter().map(|&w| Workload::build(&trace, w)).collect();
    for wl in &workloads {
        single_thread_report(wl);
        concurrent_report(wl);
    }
    let mut group = c.benchmark_group("replay");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    for wl in &workloads {
        group.throughput(Throughput::Elements(wl.ops() as u64));
        group.bench_function(format!("{}w", wl.workers), |b| {
            b.iter_batched(
                || {
                    let ix = fresh_index(wl.workers);
                    let reader = ix.reader();
                    (ix, reader)
                },
                |(mut ix, reader)| {
                    wl.replay(&mut ix, &reader);
                    (ix, reader)
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, bench_index);
criterion_main!(benches);
