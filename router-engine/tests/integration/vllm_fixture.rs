//! The event path and the metrics reader against what a real vLLM 0.32 (CPU build, block size
//! 32, 72 KV blocks) published and exported: stored runs sharing a prefix, removals under
//! eviction and a clear, captured off its ZMQ publisher, and one `/metrics` scrape.

use router_core::hashing::token_sequence_hashes;
use router_core::{RankId, SharedKvIndex, WorkerId, WorkerSpec};
use router_engine::events::{EngineEvent, SeqCheck, SeqStep, Translator, decode_batch};
use router_engine::load::{Capacity, EngineKind, read_metrics};

/// `(seq, payload)` per captured message.
fn captured() -> Vec<(u64, Vec<u8>)> {
    let text = include_str!("../fixtures/vllm-0.32-cpu/kv-events.hex");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 3, "topic seq payload: {line}");
            assert_eq!(hex(parts[0]), b"kv-events");
            let seq = u64::from_be_bytes(hex(parts[1]).try_into().expect("8-byte seq"));
            (seq, hex(parts[2]))
        })
        .collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn every_captured_batch_decodes_with_whole_blocks() {
    let mut kinds = (0, 0, 0);
    let mut seqs = SeqCheck::default();
    for (seq, payload) in captured() {
        assert_eq!(seqs.observe(seq), SeqStep::InOrder, "captured in order");
        let batch = decode_batch(&payload).expect("a real vLLM batch decodes");
        assert!(batch.ts > 1.0e9, "a Unix timestamp");
        for event in batch.events {
            match event {
                EngineEvent::Stored {
                    hashes,
                    token_ids,
                    block_size,
                    ..
                } => {
                    kinds.0 += 1;
                    assert_eq!(block_size, 32);
                    assert!(!hashes.is_empty());
                    assert_eq!(token_ids.len(), hashes.len() * 32);
                }
                EngineEvent::Removed { hashes, .. } => {
                    kinds.1 += 1;
                    assert!(!hashes.is_empty());
                }
                EngineEvent::Cleared => kinds.2 += 1,
                EngineEvent::Unknown { tag } => panic!("unknown event {tag}"),
            }
        }
    }
    assert!(kinds.0 >= 2, "stored runs: {kinds:?}");
    assert!(kinds.1 >= 1, "removals: {kinds:?}");
    assert_eq!(kinds.2, 1, "one clear: {kinds:?}");
}

#[test]
fn translated_events_index_the_engines_blocks_under_the_routers_hashes() {
    let worker = WorkerId(7);
    let index = SharedKvIndex::default();
    index
        .add_worker(&WorkerSpec {
            block_size: 32,
            ..WorkerSpec::new(7, 1, 72, 2048)
        })
        .expect("spec");
    let rank = RankId { worker, dp_rank: 0 };
    let mut translator = Translator::new(worker, 32);
    let batches: Vec<_> = captured()
        .into_iter()
        .map(|(_, payload)| decode_batch(&payload).expect("decodes"))
        .collect();
    let stored_tokens = |i: usize| match &batches[i].events[0] {
        EngineEvent::Stored { token_ids, .. } => token_ids.clone(),
        other => panic!("batch {i} starts with {other:?}"),
    };
    // Batch 0: a 6-block prompt. Batch 1: a prompt sharing its first 4 blocks, whose 2 new
    // blocks the engine stored under the 4th (its `parent_block_hash`).
    let first = stored_tokens(0);
    let mut second = first[..4 * 32].to_vec();
    second.extend(stored_tokens(1));
    let depth = |index: &SharedKvIndex, tokens: &[u32]| {
        index
            .find_matches(&token_sequence_hashes(
                tokens,
                32,
                router_core::HashScope::NONE,
            ))
            .get(rank)
    };
    for (i, batch) in batches.iter().enumerate() {
        let translated = translator.translate(batch.clone());
        assert_eq!(translated.skipped.total(), 0, "nothing skipped");
        assert_eq!(
            index.apply_all(&translated.events),
            0,
            "the index takes every translated event of batch {i}"
        );
        match i {
            0 => assert_eq!(depth(&index, &first), 6, "the stored run, whole"),
            1 => {
                assert_eq!(
                    depth(&index, &second),
                    6,
                    "chained under the engine's parent"
                );
                assert_eq!(depth(&index, &first), 6);
            }
            7 => assert_eq!(
                depth(&index, &first),
                0,
                "its first block was evicted: the prompt no longer matches"
            ),
            _ => {}
        }
    }
    // Batch 8: the engine's cache was reset, then one new block stored.
    assert_eq!(index.stats().blocks, 1);
    assert_eq!(depth(&index, &second), 0);
}

#[test]
fn metrics_give_capacity_block_size_and_load() {
    let report = read_metrics(
        EngineKind::Vllm,
        include_str!("../fixtures/vllm-0.32-cpu/metrics.txt"),
    );
    assert_eq!(
        report.capacity,
        Some(Capacity {
            block_size: 32,
            blocks: 71
        }),
        "72 blocks, one of them vLLM's null block"
    );
    assert_eq!(report.unreadable, 0);
    let rank0 = report.ranks.get(&0).expect("engine 0's load");
    assert_eq!((rank0.running, rank0.waiting), (0, 0));
    assert!(rank0.kv_usage >= 0.0 && rank0.kv_usage <= 1.0);
    // `vllm:prompt_tokens_total` (and not the `_by_source` or `_cached` counters).
    assert_eq!(report.prompt_tokens, Some(2830));
}
