//! One vLLM-like scheduling pass over running and waiting sequences.
//!
//! A sequence has `num_tokens` tokens that must be in KV before its next token is sampled
//! (prompt + tokens already known) and `computed` tokens that are. Each pass:
//!
//! 1. **Running sequences first**, in admission order, from a budget of
//!    `max_num_batched_tokens`: each schedules `num_tokens − computed` tokens, capped by the
//!    remaining budget (1 token when decoding; the next chunk when partially prefilled). Its
//!    blocks must cover `computed + n` tokens; when the pool cannot provide them the most
//!    recently admitted running sequence is preempted (LIFO; possibly the sequence itself):
//!    its blocks are released, `computed` resets to 0 and it goes to the front of the waiting
//!    queue to be recomputed.
//! 2. **Then waiting sequences are admitted**, FIFO, unless a preemption happened this pass,
//!    while fewer than `max_num_seqs` run and budget remains. The prefix cache match (capped
//!    so at least one token is computed) and any staged prefix are not computed again; the
//!    rest is chunked to the remaining budget. A candidate whose blocks do not fit stops
//!    admission: newcomers never preempt running work.
//! 3. At the end of the pass scheduled tokens are computed, newly full prompt blocks are
//!    registered (`Stored`), and a sequence whose `computed` reaches `num_tokens` emits one
//!    token.
//!
//! With `max_loras` set, a waiting sequence of a LoRA adapter that is not loaded needs a
//! slot: a free one, or one whose adapter no running sequence uses (the least recently
//! used); loading it adds to the pass's time. A sequence whose adapter gets no slot is
//! skipped this pass (the others behind it may be admitted), as vLLM does.
//!
//! Only prompt blocks are registered; blocks holding generated tokens stay private (the mock
//! has no real output tokens, so no later prompt could ever match them).

use super::blocks::BlockPool;
use super::timing::PassWork;
use router_core::{LocalBlockHash, RequestId, SequenceHash};
use std::collections::VecDeque;

/// One request inside the engine.
#[derive(Debug, Clone)]
pub struct Seq {
    pub id: RequestId,
    pub prompt_len: usize,
    /// The prompt's full blocks: (sequence hash, local hash).
    pub blocks: Vec<(SequenceHash, LocalBlockHash)>,
    pub max_tokens: u32,
    /// Tokens this engine emitted.
    pub emitted: u32,
    /// Tokens that must be in KV before the next token is sampled.
    pub num_tokens: usize,
    /// Tokens whose KV exists.
    pub computed: usize,
    /// Leading prompt blocks this sequence references in the pool.
    pub held_full: usize,
    /// Private blocks this sequence owns.
    pub private: usize,
    /// Leading tokens whose KV arrives without compute (a decode leg's transferred prompt).
    pub staged_tokens: usize,
    /// Prompt tokens found in the prefix cache when the sequence was first scheduled
    /// (vLLM's `num_cached_tokens`; a preemption does not change it). `None` until then.
    pub cached_tokens: Option<usize>,
    /// Its LoRA adapter, if any.
    pub lora: Option<std::sync::Arc<str>>,
    /// Admission order, for LIFO preemption.
    admitted: u64,
    /// Tokens scheduled in the current pass.
    scheduled: usize,
}

impl Seq {
    pub fn new(
        id: RequestId,
        prompt_len: usize,
        blocks: Vec<(SequenceHash, LocalBlockHash)>,
        max_tokens: u32,
        num_tokens: usize,
        staged_tokens: usize,
    ) -> Self {
        Self {
            id,
            prompt_len,
            blocks,
            max_tokens,
            emitted: 0,
            num_tokens,
            computed: 0,
            held_full: 0,
            private: 0,
            staged_tokens,
            cached_tokens: None,
            lora: None,
            admitted: 0,
            scheduled: 0,
        }
    }

    fn held_blocks(&self) -> usize {
        self.held_full + self.private
    }

    fn hashes(&self, n: usize) -> Vec<SequenceHash> {
        self.blocks.iter().take(n).map(|b| b.0).collect()
    }

    /// Whether the pass's tokens for this sequence are a decode step.
    fn is_decode(&self) -> bool {
        self.num_tokens.saturating_sub(self.computed) == 1 && self.computed >= self.prompt_len
    }
}

#[derive(Debug, Clone, Copy)]
pub struct SchedulerConfig {
    pub block_size: usize,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// LoRA adapters loaded at once (0: any number, never loaded).
    pub max_loras: usize,
}

/// What one pass did; finished sequences still hold their blocks.
#[derive(Debug, Default)]
pub struct PassResult {
    pub work: PassWork,
    pub first_tokens: Vec<RequestId>,
    pub tokens: Vec<(RequestId, u32)>,
    pub finished: Vec<Seq>,
    pub preempted: Vec<RequestId>,
}

#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    pub pool: BlockPool,
    pub waiting: VecDeque<Seq>,
    pub running: Vec<Seq>,
    next_admission: u64,
    pub preemptions: u64,
    /// Loaded LoRA adapters, least recently used first.
    pub loaded: Vec<std::sync::Arc<str>>,
    pub lora_loads: u64,
}

fn blocks_for(tokens: usize, block_size: usize) -> usize {
    tokens.div_ceil(block_size)
}

impl Scheduler {
    pub fn new(cfg: SchedulerConfig, pool: BlockPool) -> Self {
        Self {
            cfg,
            pool,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_admission: 0,
            preemptions: 0,
            loaded: Vec::new(),
            lora_loads: 0,
        }
    }

    /// Adapters of running sequences.
    pub fn running_adapters(&self) -> Vec<String> {
        let mut adapters: Vec<String> = self
            .running
            .iter()
            .filter_map(|s| s.lora.as_deref().map(str::to_owned))
            .collect();
        adapters.sort();
        adapters.dedup();
        adapters
    }

    /// Makes `lora` loaded (most recently used); `false` when every slot holds an adapter
    /// a running sequence uses.
    fn load_adapter(&mut self, lora: &std::sync::Arc<str>, out: &mut PassResult) -> bool {
        if self.cfg.max_loras == 0 {
            return true;
        }
        if let Some(at) = self.loaded.iter().position(|l| l == lora) {
            let l = self.loaded.remove(at);
            self.loaded.push(l);
            return true;
        }
        if self.loaded.len() >= self.cfg.max_loras {
            let in_use =
                |l: &std::sync::Arc<str>| self.running.iter().any(|s| s.lora.as_ref() == Some(l));
            let Some(victim) = self.loaded.iter().position(|l| !in_use(l)) else {
                return false;
            };
            self.loaded.remove(victim);
        }
        self.loaded.push(std::sync::Arc::clone(lora));
        self.lora_loads += 1;
        out.work.lora_loads += 1;
        true
    }

    /// Gives back every block `seq` holds.
    pub fn release(&mut self, seq: &mut Seq) {
        let hashes = seq.hashes(seq.held_full);
        self.pool.release(&hashes);
        self.pool.free_private(seq.private);
        seq.held_full = 0;
        seq.private = 0;
    }

    fn preempt(&mut self, mut seq: Seq, out: &mut PassResult) {
        self.release(&mut seq);
        seq.computed = 0;
        seq.staged_tokens = 0;
        seq.scheduled = 0;
        self.preemptions += 1;
        out.preempted.push(seq.id);
        self.waiting.push_front(seq);
    }

    /// Runs one pass (see the module docs).
    pub fn pass(&mut self) -> PassResult {
        let mut out = PassResult::default();
        let mut budget = self.cfg.max_num_batched_tokens;
        let bs = self.cfg.block_size;

        let mut i = 0;
        while i < self.running.len() {
            let (n, need) = {
                let s = &self.running[i];
                let n = s.num_tokens.saturating_sub(s.computed).min(budget);
                let need = blocks_for(s.computed + n, bs).saturating_sub(s.held_blocks());
                (n, need)
            };
            if n == 0 {
                i += 1;
                continue;
            }
            let mut scheduled = true;
            while !self.pool.allocate(need) {
                let Some(victim) = self.running.pop() else {
                    scheduled = false;
                    break;
                };
                let was_self = self.running.len() == i;
                self.preempt(victim, &mut out);
                if was_self {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            let s = &mut self.running[i];
            s.private += need;
            s.scheduled = n;
            budget -= n;
            i += 1;
        }

        if out.preempted.is_empty() {
            let mut skipped = Vec::new();
            while budget > 0 && self.running.len() < self.cfg.max_num_seqs {
                let Some(mut s) = self.waiting.pop_front() else {
                    break;
                };
                if let Some(lora) = s.lora.clone()
                    && !self.load_adapter(&lora, &mut out)
                {
                    skipped.push(s);
                    continue;
                }
                match self.admit(&mut s, budget) {
                    Some(n) => {
                        budget -= n;
                        s.admitted = self.next_admission;
                        self.next_admission += 1;
                        self.running.push(s);
                    }
                    None => {
                        self.waiting.push_front(s);
                        break;
                    }
                }
            }
            // Skipped for want of an adapter slot: back in front, in their order.
            for s in skipped.into_iter().rev() {
                self.waiting.push_front(s);
            }
        }

        let capacity = self.pool.capacity().max(1);
        out.work.active_fraction = self.pool.active_blocks() as f64 / capacity as f64;
        for s in &self.running {
            if s.scheduled == 0 {
                continue;
            }
            if s.is_decode() {
                out.work.decode_seqs += 1;
            } else {
                out.work.prefill_tokens += s.scheduled as u64;
            }
        }
        self.finish_pass(&mut out);
        out
    }

    /// Takes blocks for a waiting sequence and schedules its first chunk; `None` (nothing
    /// taken) when it does not fit.
    fn admit(&mut self, s: &mut Seq, budget: usize) -> Option<usize> {
        let bs = self.cfg.block_size;
        let max_cached = s.num_tokens.saturating_sub(1);
        let all: Vec<SequenceHash> = s.hashes(s.blocks.len());
        let matched = self.pool.match_prefix(&all).min(max_cached / bs);
        let start = (matched * bs).max(s.staged_tokens.min(max_cached));
        let n = s.num_tokens.saturating_sub(start).min(budget);
        if n == 0 {
            return None;
        }
        let need = blocks_for(start + n, bs).saturating_sub(matched);
        let reuse = all.get(..matched).unwrap_or_default();
        if !self.pool.can_take(reuse, need) {
            return None;
        }
        self.pool.acquire(reuse);
        if !self.pool.allocate(need) {
            self.pool.release(reuse);
            return None;
        }
        s.held_full = matched;
        s.private = need;
        s.computed = start;
        s.scheduled = n;
        s.cached_tokens.get_or_insert(matched * bs);
        Some(n)
    }

    /// Computes the scheduled tokens, registers full prompt blocks, emits tokens and takes
    /// finished sequences out of `running`.
    fn finish_pass(&mut self, out: &mut PassResult) {
        let bs = self.cfg.block_size;
        let mut still = Vec::with_capacity(self.running.len());
        for mut s in std::mem::take(&mut self.running) {
            if s.scheduled > 0 {
                s.computed += s.scheduled;
                s.scheduled = 0;
                let upto = (s.computed / bs).min(s.blocks.len());
                if upto > s.held_full {
                    let parent = s
                        .held_full
                        .checked_sub(1)
                        .and_then(|p| s.blocks.get(p))
                        .map(|b| b.0);
                    let run = s.blocks.get(s.held_full..upto).unwrap_or_default();
                    self.pool.commit(parent, run);
                    s.private = s.private.saturating_sub(upto - s.held_full);
                    s.held_full = upto;
                }
                if s.computed >= s.num_tokens {
                    s.emitted += 1;
                    s.num_tokens += 1;
                    if s.emitted == 1 {
                        out.first_tokens.push(s.id);
                    }
                    out.tokens.push((s.id, 1));
                    if s.emitted >= s.max_tokens {
                        out.finished.push(s);
                        continue;
                    }
                }
            }
            still.push(s);
        }
        still.sort_by_key(|s| s.admitted);
        self.running = still;
    }
}
