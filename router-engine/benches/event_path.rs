//! The engine event path: vLLM KV event batches (msgpack, as a vLLM 0.32 publisher writes
//! them: tagged maps, 32-token blocks, integer hashes) decoded, translated into fleet events
//! with the router's own block hashes computed from the blocks' tokens, and applied to a
//! pool's index, with one lookup per stored run, on one core.
//!
//! The stream: 2,000 prompts of 16 blocks over 8 workers (shared 4-block system prefixes across
//! prompts, so later runs attach under a parent), each worker evicting its oldest run once it
//! holds 64 runs (one `BlockRemoved` per block, as vLLM sends them).
//!
//! - `decode_translate`: the link's share: payload bytes to `KvEvent`s;
//! - `apply_lookup`: the index's share: those events applied plus one lookup per run;
//! - `whole_path`: both.
//!
//! Throughput is in block operations (a block stored, removed or looked up).
//!
//! Run: `cargo bench -p router-engine --bench event_path`.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use rmp::encode as mp;
use router_core::hashing::token_sequence_hashes;
use router_core::{KvEvent, SharedKvIndex, WorkerId, WorkerSpec};
use router_engine::events::{Translator, decode_batch};
use std::collections::VecDeque;

const BLOCK: usize = 32;
const WORKERS: u64 = 8;
const PROMPTS: u64 = 2_000;
const BLOCKS_PER_PROMPT: usize = 16;
const RUNS_KEPT: usize = 64;

fn tokens(seed: u64, n: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 32_000) as u32
        })
        .collect()
}

fn stored(b: &mut Vec<u8>, first_hash: u64, parent: Option<u64>, tokens: &[u32]) {
    let blocks = tokens.len() / BLOCK;
    mp::write_map_len(b, 7).expect("encode");
    mp::write_str(b, "type").expect("encode");
    mp::write_str(b, "BlockStored").expect("encode");
    mp::write_str(b, "block_hashes").expect("encode");
    mp::write_array_len(b, blocks as u32).expect("encode");
    for i in 0..blocks as u64 {
        mp::write_uint(b, first_hash + i).expect("encode");
    }
    mp::write_str(b, "parent_block_hash").expect("encode");
    match parent {
        Some(p) => mp::write_uint(b, p).map(drop).expect("encode"),
        None => mp::write_nil(b).expect("encode"),
    }
    mp::write_str(b, "token_ids").expect("encode");
    mp::write_array_len(b, tokens.len() as u32).expect("encode");
    for t in tokens {
        mp::write_uint(b, u64::from(*t)).expect("encode");
    }
    mp::write_str(b, "block_size").expect("encode");
    mp::write_uint(b, BLOCK as u64).expect("encode");
    mp::write_str(b, "medium").expect("encode");
    mp::write_str(b, "GPU").expect("encode");
    mp::write_str(b, "group_idx").expect("encode");
    mp::write_uint(b, 0).expect("encode");
}

fn removed(b: &mut Vec<u8>, hash: u64) {
    mp::write_map_len(b, 4).expect("encode");
    mp::write_str(b, "type").expect("encode");
    mp::write_str(b, "BlockRemoved").expect("encode");
    mp::write_str(b, "block_hashes").expect("encode");
    mp::write_array_len(b, 1).expect("encode");
    mp::write_uint(b, hash).expect("encode");
    mp::write_str(b, "medium").expect("encode");
    mp::write_str(b, "GPU").expect("encode");
    mp::write_str(b, "group_idx").expect("encode");
    mp::write_uint(b, 0).expect("encode");
}

/// One worker's batches, and every prompt's tokens (for lookups), and the block ops total.
struct Stream {
    batches: Vec<(WorkerId, Vec<u8>)>,
    prompts: Vec<Vec<u32>>,
    block_ops: u64,
}

fn stream() -> Stream {
    let mut batches = Vec::new();
    let mut prompts = Vec::new();
    let mut block_ops = 0;
    let mut kept: Vec<VecDeque<Vec<u64>>> = vec![VecDeque::new(); WORKERS as usize];
    let mut next_hash = 1u64;
    for p in 0..PROMPTS {
        let worker = p % WORKERS;
        let mut prompt = tokens(p % 50, 4 * BLOCK);
        prompt.extend(tokens(1_000 + p, (BLOCKS_PER_PROMPT - 4) * BLOCK));
        let mut b = Vec::new();
        let runs = &mut kept[worker as usize];
        let evict = runs.len() >= RUNS_KEPT;
        let evicted = if evict { runs.pop_front() } else { None };
        mp::write_array_len(&mut b, 3).expect("encode");
        mp::write_f64(&mut b, 1.7e9).expect("encode");
        let events = evicted.as_ref().map_or(0, Vec::len) + 1;
        mp::write_array_len(&mut b, events as u32).expect("encode");
        for hash in evicted.iter().flatten() {
            removed(&mut b, *hash);
            block_ops += 1;
        }
        let first = next_hash;
        next_hash += BLOCKS_PER_PROMPT as u64;
        stored(&mut b, first, None, &prompt);
        block_ops += BLOCKS_PER_PROMPT as u64 * 2; // stored, then looked up
        mp::write_uint(&mut b, 0).expect("encode");
        runs.push_back((first..first + BLOCKS_PER_PROMPT as u64).collect());
        batches.push((WorkerId(worker), b));
        prompts.push(prompt);
    }
    Stream {
        batches,
        prompts,
        block_ops,
    }
}

fn translate_all(stream: &Stream) -> Vec<Vec<KvEvent>> {
    let mut translators: Vec<Translator> = (0..WORKERS)
        .map(|w| Translator::new(WorkerId(w), BLOCK as u32))
        .collect();
    stream
        .batches
        .iter()
        .map(|(worker, payload)| {
            let batch = decode_batch(payload).expect("decodes");
            translators[worker.0 as usize].translate(batch).events
        })
        .collect()
}

fn index() -> SharedKvIndex {
    let index = SharedKvIndex::default();
    for w in 0..WORKERS {
        let mut spec = WorkerSpec::new(w, 1, 1 << 20, 8192);
        spec.block_size = BLOCK as u32;
        index.add_worker(&spec).expect("spec");
    }
    index
}

fn apply_lookup(
    index: &SharedKvIndex,
    events: &[Vec<KvEvent>],
    lookups: &[Vec<router_core::SequenceHash>],
) -> u64 {
    let mut found = 0;
    for (batch, hashes) in events.iter().zip(lookups) {
        index.apply_all(batch);
        found += index.find_matches(hashes).len() as u64;
    }
    found
}

fn bench(c: &mut Criterion) {
    let stream = stream();
    let lookups: Vec<_> = stream
        .prompts
        .iter()
        .map(|p| token_sequence_hashes(p, BLOCK, router_core::HashScope::NONE))
        .collect();
    let events = translate_all(&stream);
    let mut group = c.benchmark_group("event_path");
    group.throughput(Throughput::Elements(stream.block_ops));
    group.sample_size(20);
    group.bench_function("decode_translate", |b| b.iter(|| translate_all(&stream)));
    group.bench_function("apply_lookup", |b| {
        b.iter_batched(
            index,
            |index| apply_lookup(&index, &events, &lookups),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("whole_path", |b| {
        b.iter_batched(
            index,
            |index| apply_lookup(&index, &translate_all(&stream), &lookups),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
