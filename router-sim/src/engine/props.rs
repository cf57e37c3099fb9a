//! Property tests: random workloads (submits sharing prefixes, cancels, passes, staged
//! releases and expiries, cache clears) on small engines. After every operation the pool's
//! invariants hold, no misuse was counted, and replaying every emitted KV event into
//! router-core's `ReferenceIndex` yields exactly the pool's cached blocks under the router's
//! own hashes; at the end every request still in the engine finishes with all its tokens.

use super::blocks::BlockPool;
use super::tests::{BS, cfg, engine, events, id, req, run, toks};
use super::*;
use proptest::prelude::*;
use router_core::{KvEventData, RankId, ReferenceIndex, WorkerSpec};
use std::collections::BTreeMap;

struct Replay {
    index: ReferenceIndex,
    rank: RankId,
}

impl Replay {
    fn new(e: &Engine) -> Self {
        let c = e.config();
        let mut spec = WorkerSpec::new(c.worker_id.0, 1, c.total_kv_blocks as u64, 8192);
        spec.block_size = c.block_size as u32;
        let mut index = ReferenceIndex::new();
        index.add_worker(&spec).expect("valid spec");
        let rank = RankId::new(c.worker_id.0, c.dp_rank);
        Self { index, rank }
    }

    fn apply(&mut self, evs: &[KvEvent]) -> Result<(), TestCaseError> {
        for ev in evs {
            let status = self.index.apply(ev);
            prop_assert!(status.is_ok(), "{ev:?} -> {status:?}");
        }
        Ok(())
    }

    /// The index holds exactly the pool's cached blocks, under the router's own hashes.
    fn matches(&self, pool: &BlockPool) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.index.stats().blocks, pool.cached_blocks() as u64);
        for h in pool.cached_hashes() {
            prop_assert_eq!(self.index.holders(h), vec![self.rank]);
        }
        let ids = self.index.stats().event_ids;
        prop_assert_eq!((ids.gaps, ids.out_of_order), (0, 0));
        Ok(())
    }
}

#[test]
fn replayed_events_of_a_busy_run_match_the_pool() -> Result<(), TestCaseError> {
    let mut e = engine(12, 8192, Role::Agg);
    let mut replay = Replay::new(&e);
    let mut now = 0;
    for n in 0..8 {
        e.submit(req(n, toks(n as u32 % 5, 3 * BS + 5), 4))
            .expect("submit");
    }
    let evs = events(&run(&mut e, &mut now));
    assert!(
        evs.iter()
            .any(|e| matches!(e.data, KvEventData::Removed { .. }))
    );
    replay.apply(&evs)?;
    replay.matches(e.pool())?;
    replay.apply(&e.clear_cache())?;
    assert_eq!(e.load().kv_cached_blocks, 0);
    replay.matches(e.pool())
}

#[derive(Debug, Clone)]
enum Op {
    Submit {
        prefix: u8,
        suffix: usize,
        max_tokens: u32,
    },
    Cancel(u8),
    Step,
    Release(u8),
    Expire,
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4, 0usize..70, 1u32..24).prop_map(|(prefix, suffix, max_tokens)| Op::Submit {
            prefix,
            suffix,
            max_tokens
        }),
        1 => any::<u8>().prop_map(Op::Cancel),
        6 => Just(Op::Step),
        1 => any::<u8>().prop_map(Op::Release),
        1 => Just(Op::Expire),
        1 => Just(Op::Clear),
    ]
}

proptest! {
    // No regression files: this module may only write under `src/engine/`; a failure prints
    // its minimal input, which belongs in a named test here.
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn replayed_events_match_the_pool_and_invariants_hold(
        ops in prop::collection::vec(op(), 1..120),
        prefill_role in any::<bool>(),
        blocks in 12usize..40,
    ) {
        let role = if prefill_role { Role::Prefill } else { Role::Agg };
        let mut c = cfg(blocks, 48, role);
        c.max_num_seqs = 6;
        let mut e = Engine::new(c).expect("valid config");
        let mut replay = Replay::new(&e);
        let mut now = 0u64;
        let mut next = 0u128;
        let mut live: BTreeMap<u128, u32> = BTreeMap::new();
        let mut emitted: BTreeMap<u128, u32> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Submit { prefix, suffix, max_tokens } => {
                    let mut t = toks(u32::from(prefix) + 100, 2 * BS);
                    t.extend(toks(next as u32, suffix));
                    next += 1;
                    if e.submit(req(next, t, max_tokens)).is_ok() {
                        let want = if prefill_role { 1 } else { max_tokens };
                        live.insert(next, want);
                    }
                }
                Op::Cancel(k) => {
                    let n = u128::from(k) % (next + 1);
                    if e.cancel(id(n)) {
                        live.remove(&n);
                    }
                }
                Op::Step => {
                    let out = e.step(now);
                    now += out.duration_us.max(1);
                    for (r, k) in &out.tokens {
                        *emitted.entry(r.0.as_u128()).or_default() += k;
                    }
                    replay.apply(&out.kv_events)?;
                }
                Op::Release(k) => {
                    e.release_staged(id(u128::from(k) % (next + 1)));
                }
                Op::Expire => {
                    e.expire_staged(now);
                }
                Op::Clear => replay.apply(&e.clear_cache())?,
            }
            replay.apply(&e.drain_events())?;
            prop_assert_eq!(e.pool().check_invariants(), Ok(()));
            prop_assert_eq!(e.pool().anomalies(), 0);
            prop_assert!(e.pool().used_blocks() <= blocks);
            replay.matches(e.pool())?;
        }
        // Liveness: with staged KV released, everything still in the engine finishes.
        for _ in 0..=next {
            for n in 0..=next {
                e.release_staged(id(n));
            }
            if e.is_idle() {
                break;
            }
            for o in run(&mut e, &mut now) {
                for (r, k) in &o.tokens {
                    *emitted.entry(r.0.as_u128()).or_default() += k;
                }
                replay.apply(&o.kv_events)?;
            }
        }
        prop_assert!(e.is_idle());
        replay.matches(e.pool())?;
        for (n, want) in live {
            prop_assert_eq!(emitted.get(&n).copied().unwrap_or(0), want, "request {}", n);
        }
    }
}
