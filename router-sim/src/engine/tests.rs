//! Behaviour tests of the simulated engine, named for what they show, and the helpers the
//! property tests in `props.rs` share.

use super::blocks::BlockPool;
use super::*;
use router_core::hashing::token_sequence_hashes;
use router_core::{KvEventData, SequenceHash};

pub(super) const BS: usize = 16;

pub(super) fn cfg(total_kv_blocks: usize, budget: usize, role: Role) -> EngineConfig {
    EngineConfig {
        worker_id: WorkerId(7),
        dp_rank: 0,
        block_size: BS,
        total_kv_blocks,
        max_num_batched_tokens: budget,
        max_num_seqs: 64,
        speedup: 1.0,
        role,
        staging_timeout_us: 1_000,
        max_loras: 0,
    }
}

pub(super) fn engine(total_kv_blocks: usize, budget: usize, role: Role) -> Engine {
    Engine::new(cfg(total_kv_blocks, budget, role)).expect("valid config")
}

pub(super) fn id(n: u128) -> RequestId {
    RequestId::from_u128(n)
}

pub(super) fn toks(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| seed.wrapping_mul(1_000_003) ^ i)
        .collect()
}

pub(super) fn req(n: u128, tokens: Vec<u32>, max_tokens: u32) -> SeqRequest {
    SeqRequest {
        id: id(n),
        tokens,
        max_tokens,
        scope: BlockScope::default(),
        staged_prefix: None,
    }
}

/// Steps until idle (bounded), advancing virtual time; returns every pass's output.
pub(super) fn run(e: &mut Engine, now: &mut u64) -> Vec<StepOutput> {
    let mut outs = Vec::new();
    for _ in 0..10_000 {
        if e.is_idle() {
            break;
        }
        let out = e.step(*now);
        *now += out.duration_us;
        let worked = out.did_work();
        outs.push(out);
        if !worked {
            break;
        }
    }
    outs
}

pub(super) fn events(outs: &[StepOutput]) -> Vec<KvEvent> {
    outs.iter().flat_map(|o| o.kv_events.clone()).collect()
}

pub(super) fn stored_hashes(evs: &[KvEvent]) -> Vec<u64> {
    evs.iter()
        .flat_map(|e| match &e.data {
            KvEventData::Stored { blocks, .. } => blocks.iter().map(|b| b.hash.0).collect(),
            _ => Vec::new(),
        })
        .collect()
}

pub(super) fn tokens_of(outs: &[StepOutput], r: RequestId) -> u32 {
    outs.iter()
        .flat_map(|o| o.tokens.iter())
        .filter(|(i, _)| *i == r)
        .map(|(_, n)| n)
        .sum()
}

/// router-core's reference index fed with one engine's events.
#[test]
fn prefix_reuse_makes_the_second_identical_prompt_cheaper_and_stores_only_new_blocks() {
    let mut e = engine(256, 8192, Role::Agg);
    let mut now = 0;
    let prompt = toks(1, 10 * BS + 8);
    e.submit(req(1, prompt.clone(), 2)).expect("submit");
    let first = run(&mut e, &mut now);
    assert_eq!(stored_hashes(&events(&first)).len(), 10);

    e.submit(req(2, prompt.clone(), 2)).expect("submit");
    let second = run(&mut e, &mut now);
    assert!(second[0].work.prefill_tokens < first[0].work.prefill_tokens);
    assert!(second[0].duration_us < first[0].duration_us);
    assert!(
        stored_hashes(&events(&second)).is_empty(),
        "all blocks reused"
    );

    let mut longer = prompt.clone();
    longer.extend(toks(2, 2 * BS));
    e.submit(req(3, longer.clone(), 1)).expect("submit");
    let third = run(&mut e, &mut now);
    let evs = events(&third);
    let hashes = token_sequence_hashes(&longer, BS, router_core::HashScope::NONE);
    let stored: Vec<u64> = stored_hashes(&evs);
    assert_eq!(stored, vec![hashes[10].0, hashes[11].0]);
    assert!(matches!(
        &evs[0].data,
        KvEventData::Stored { parent: Some(p), .. } if p.0 == hashes[9].0
    ));
}

#[test]
fn identical_prompts_prefilled_together_store_each_block_once() {
    let mut e = engine(256, 8192, Role::Agg);
    let mut now = 0;
    let prompt = toks(5, 6 * BS);
    e.submit(req(1, prompt.clone(), 2)).expect("submit");
    e.submit(req(2, prompt, 2)).expect("submit");
    let outs = run(&mut e, &mut now);
    assert_eq!(outs[0].first_tokens, vec![id(1), id(2)]);
    assert_eq!(
        stored_hashes(&events(&outs)).len(),
        6,
        "the second copy collapses"
    );
    assert_eq!(e.load().kv_cached_blocks, 6);
    assert_eq!(e.pool().anomalies(), 0);
}

#[test]
fn eviction_is_leaf_first_oldest_first_and_emits_removed() {
    let mut pool = BlockPool::new(WorkerId(1), 0, 6);
    let chain = |seed: u32, n: usize| {
        let t = toks(seed, n * BS);
        let locals = router_core::hashing::local_block_hashes(&t, BS, None);
        let seqs = router_core::hashing::sequence_hashes(&locals);
        seqs.into_iter().zip(locals).collect::<Vec<_>>()
    };
    let a = chain(1, 3);
    let b = chain(2, 2);
    for run in [&a, &b] {
        assert!(pool.allocate(run.len()));
        pool.commit(None, run);
        let hashes: Vec<SequenceHash> = run.iter().map(|x| x.0).collect();
        pool.release(&hashes);
    }
    pool.drain_events();
    assert_eq!(pool.cached_blocks(), 5);
    // Room for 3 new blocks on a 6-block pool: 2 must go, A's tail first (A is older).
    assert!(pool.allocate(3));
    let evs = pool.drain_events();
    assert_eq!(evs.len(), 1);
    let KvEventData::Removed { hashes } = &evs[0].data else {
        panic!("expected Removed, got {evs:?}");
    };
    assert_eq!(
        hashes.iter().map(|h| h.0).collect::<Vec<_>>(),
        vec![a[2].0.0, a[1].0.0]
    );
    assert!(pool.contains(a[0].0) && pool.contains(b[0].0) && pool.contains(b[1].0));
    assert_eq!(pool.check_invariants(), Ok(()));
    assert_eq!(pool.anomalies(), 0);
}

#[test]
fn a_sequence_finishes_after_emitting_max_tokens() {
    let mut e = engine(256, 8192, Role::Agg);
    let mut now = 0;
    e.submit(req(1, toks(1, 40), 5)).expect("submit");
    let outs = run(&mut e, &mut now);
    assert_eq!(outs.len(), 5, "one prefill pass + four decode passes");
    assert_eq!(outs[0].first_tokens, vec![id(1)]);
    assert_eq!(tokens_of(&outs, id(1)), 5);
    let finished: Vec<_> = outs.iter().flat_map(|o| o.finished.clone()).collect();
    assert_eq!(finished, vec![id(1)]);
    assert!(outs[4].finished.contains(&id(1)));
    assert!(outs[1..].iter().all(|o| o.work.decode_seqs == 1));
    assert_eq!(e.load().kv_used_blocks, 0);
    assert!(now > 0);
}

#[test]
fn chunked_prefill_respects_the_token_budget() {
    let mut e = engine(256, 64, Role::Agg);
    let mut now = 0;
    e.submit(req(1, toks(1, 200), 3)).expect("submit");
    e.submit(req(2, toks(2, 100), 3)).expect("submit");
    let outs = run(&mut e, &mut now);
    for o in &outs {
        assert!(
            o.work.prefill_tokens + o.work.decode_seqs <= 64,
            "{:?}",
            o.work
        );
    }
    assert_eq!(outs[0].work.prefill_tokens, 64);
    let first_at = outs.iter().position(|o| o.first_tokens.contains(&id(1)));
    assert_eq!(first_at, Some(3), "200 tokens in chunks of 64");
    assert_eq!(tokens_of(&outs, id(1)), 3);
    assert_eq!(tokens_of(&outs, id(2)), 3);
}

#[test]
fn preemption_happens_under_kv_pressure_and_the_preempted_sequence_still_finishes() {
    // 20 blocks of 16 tokens; each request grows to 20 + 150 tokens = 11 blocks.
    let mut e = engine(20, 8192, Role::Agg);
    let mut now = 0;
    for n in 1..=3 {
        e.submit(req(n, toks(n as u32, 20), 150)).expect("submit");
    }
    let outs = run(&mut e, &mut now);
    assert!(e.preemptions() > 0);
    let preempted: Vec<_> = outs.iter().flat_map(|o| o.preempted.clone()).collect();
    assert!(!preempted.is_empty());
    for n in 1..=3 {
        assert_eq!(tokens_of(&outs, id(n)), 150, "request {n}");
    }
    assert!(e.is_idle());
    assert_eq!(e.load().kv_used_blocks, 0);
    assert_eq!(e.pool().anomalies(), 0);
}

#[test]
fn cancel_frees_blocks() {
    let mut e = engine(256, 32, Role::Agg);
    e.submit(req(1, toks(1, 100), 10)).expect("submit");
    e.step(0);
    assert!(e.load().kv_used_blocks > 0);
    assert!(e.cancel(id(1)));
    assert_eq!(e.load().kv_used_blocks, 0);
    assert!(e.is_idle());
    assert!(!e.cancel(id(1)));
    assert_eq!(e.pool().check_invariants(), Ok(()));
}

#[test]
fn staged_kv_that_nobody_releases_is_expired_and_counted_as_stranded() {
    let mut e = engine(256, 8192, Role::Prefill);
    let mut now = 0;
    e.submit(req(1, toks(1, 64), 50)).expect("submit");
    e.submit(req(2, toks(2, 64), 50)).expect("submit");
    let outs = run(&mut e, &mut now);
    assert_eq!(
        outs.len(),
        1,
        "a prefill engine stops after the first token"
    );
    assert_eq!(outs[0].finished, vec![id(1), id(2)]);
    assert_eq!(e.load().staged, 2);
    assert!(e.load().kv_used_blocks > 0);
    assert!(e.release_staged(id(1)));
    assert!(e.expire_staged(now).is_empty(), "deadline not reached");
    assert_eq!(e.expire_staged(now + 1_000), vec![id(2)]);
    assert_eq!(e.stranded(), 1);
    assert_eq!(e.load().kv_used_blocks, 0);
    assert_eq!(e.load().staged, 0);
}

#[test]
fn a_decode_leg_with_a_staged_prompt_starts_decoding_without_prefill() {
    let mut e = engine(256, 8192, Role::Decode);
    let mut now = 0;
    let prompt = toks(3, 4 * BS);
    let mut r = req(1, prompt.clone(), 3);
    r.staged_prefix = Some(prompt.len());
    e.submit(r).expect("submit");
    let outs = run(&mut e, &mut now);
    assert_eq!(outs.len(), 3);
    assert_eq!(outs[0].work.prefill_tokens, 0);
    assert_eq!(outs[0].work.decode_seqs, 1);
    assert_eq!(outs[0].first_tokens, vec![id(1)]);
    assert_eq!(
        stored_hashes(&events(&outs)).len(),
        4,
        "transferred blocks are cached"
    );
}

#[test]
fn event_ids_increase_by_one() {
    let mut e = engine(12, 8192, Role::Agg);
    let mut now = 0;
    for n in 0..8 {
        e.submit(req(n, toks(n as u32, 3 * BS + 5), 4))
            .expect("submit");
    }
    let evs = events(&run(&mut e, &mut now));
    assert!(
        evs.iter()
            .any(|e| matches!(e.data, KvEventData::Removed { .. }))
    );
    for (i, ev) in evs.iter().enumerate() {
        assert_eq!(ev.event_id, i as u64);
        assert_eq!((ev.worker, ev.dp_rank), (WorkerId(7), 0));
    }
}

#[test]
fn bad_configs_and_requests_are_rejected() {
    let mut c = cfg(8, 64, Role::Agg);
    c.block_size = 0;
    assert!(Engine::new(c).is_err());
    let mut e = engine(8, 64, Role::Agg);
    assert!(e.submit(req(1, Vec::new(), 1)).is_err());
    assert!(e.submit(req(1, toks(1, 8), 0)).is_err());
    assert!(matches!(
        e.submit(req(1, toks(1, 8 * BS), 1)),
        Err(SubmitError::TooLarge { .. })
    ));
    e.submit(req(1, toks(1, 8), 1)).expect("submit");
    assert_eq!(
        e.submit(req(1, toks(1, 8), 1)),
        Err(SubmitError::Duplicate(id(1)))
    );
}

#[test]
fn an_adapter_without_a_slot_waits_for_one_and_a_load_takes_time() {
    let mut e = Engine::new(EngineConfig {
        max_loras: 1,
        ..cfg(4096, 8192, Role::Agg)
    })
    .expect("valid config");
    let with = |n: u128, lora: &str| SeqRequest {
        scope: BlockScope {
            lora: Some(lora.to_owned()),
            salt: None,
        },
        ..req(n, toks(n as u32, 64), 4)
    };
    e.submit(with(1, "sql")).expect("submit");
    e.submit(with(2, "chat")).expect("submit");
    e.submit(with(3, "sql")).expect("submit");
    let mut now = 0;
    let outs = run(&mut e, &mut now);
    let first_at = |id_: RequestId| outs.iter().position(|o| o.first_tokens.contains(&id_));
    let (one, two, three) = (first_at(id(1)), first_at(id(2)), first_at(id(3)));
    // `sql` takes the one slot; its second request joins it; `chat` waits until no running
    // request uses `sql`, then loads.
    assert_eq!(one, three, "the same adapter runs together");
    assert!(two > one, "{one:?} then {two:?}");
    let loads: u64 = outs.iter().map(|o| o.work.lora_loads).sum();
    assert_eq!(loads, 2);
    assert!(outs[0].duration_us >= (timing::LORA_LOAD_MS * 1000.0) as u64);
    assert!(e.is_idle());
}
