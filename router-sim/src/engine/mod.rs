//! The simulated engine: a deterministic, clock-free model of one data-parallel rank of an
//! LLM engine, faithful enough for routing experiments (see the reference's "mocker").
//!
//! Time never comes from a clock: [`Engine::step`] is given the pass's start time in
//! microseconds and returns how long the pass takes; the caller (a discrete-event loop, or
//! later `worker --sim` with a real clock) calls it again once that time has passed.
//!
//! - [`blocks`]: the KV block pool (prefix reuse, leaf-first LRU eviction, KV events).
//! - [`scheduler`]: one vLLM-like pass (decode first, chunked prefill, LIFO preemption).
//! - [`timing`]: how long a pass takes.
//!
//! Roles: `Agg` runs whole requests. `Prefill` ends each request after its first token and
//! keeps its KV *staged* (blocks held) until [`Engine::release_staged`] (the decode side
//! pulled it) or until `staging_timeout_us` passes, when [`Engine::expire_staged`] frees it
//! and counts it as stranded. `Decode` runs requests whose prompt KV arrives as a
//! [`SeqRequest::staged_prefix`]: those tokens take blocks but no compute.

pub mod blocks;
pub mod scheduler;
pub mod timing;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use blocks::BlockPool;
use router_core::HashScope;
use router_core::hashing::sequence_hashes;
use router_core::{KvEvent, RequestId, WorkerId};
use scheduler::{Scheduler, SchedulerConfig, Seq};
use std::collections::BTreeMap;
pub use timing::PassWork;

/// What part of disaggregated serving this engine plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Agg,
    Prefill,
    Decode,
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub worker_id: WorkerId,
    pub dp_rank: u32,
    pub block_size: usize,
    pub total_kv_blocks: usize,
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    /// Divides every modeled duration; not a positive finite number means 1.
    pub speedup: f64,
    pub role: Role,
    /// How long a prefill engine keeps a finished request's KV for the decode side.
    pub staging_timeout_us: u64,
    /// LoRA adapters loaded at once (0: any number, loaded for free).
    pub max_loras: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("request {0} has an empty prompt")]
    EmptyPrompt(RequestId),
    #[error("request {0} asks for no tokens")]
    NoTokens(RequestId),
    #[error("request {0} is already in the engine")]
    Duplicate(RequestId),
    #[error("request {id} needs {needed} KV blocks, the engine has {capacity}")]
    TooLarge {
        id: RequestId,
        needed: usize,
        capacity: usize,
    },
}

/// What a request's block hashes depend on besides its tokens ([`HashScope`], owned).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockScope {
    pub lora: Option<String>,
    pub salt: Option<String>,
}

impl BlockScope {
    pub fn hash_scope(&self) -> HashScope<'_> {
        HashScope::new(self.lora.as_deref(), self.salt.as_deref())
    }
}

/// One request for the engine.
#[derive(Debug, Clone)]
pub struct SeqRequest {
    pub id: RequestId,
    pub tokens: Vec<u32>,
    pub max_tokens: u32,
    /// LoRA adapter and cache salt: the block hashes are scoped exactly as the router's.
    pub scope: BlockScope,
    /// Leading prompt tokens whose KV was pulled from a prefill engine (decode legs). When
    /// it covers the whole prompt, the prefill engine's first token counts as known too, so
    /// the first pass is a decode step.
    pub staged_prefix: Option<usize>,
}

/// What one pass did. The pass starts at the `now_us` given to [`Engine::step`] and ends
/// `duration_us` later: its tokens, first tokens and finishes belong to the end, while its KV
/// events may be published at once (the reference makes a pass's events visible at its start).
#[derive(Debug, Clone, Default)]
pub struct StepOutput {
    pub duration_us: u64,
    pub work: PassWork,
    /// Requests whose first token came out of this pass.
    pub first_tokens: Vec<RequestId>,
    /// Tokens emitted per request in this pass.
    pub tokens: Vec<(RequestId, u32)>,
    /// Requests done (for a prefill engine: prefilled, KV now staged).
    pub finished: Vec<RequestId>,
    /// Per finished request, its prompt tokens that were in the prefix cache when it was
    /// first scheduled (what `usage.prompt_tokens_details.cached_tokens` reports).
    pub cached_tokens: Vec<(RequestId, usize)>,
    /// Requests preempted back to the waiting queue (they will be recomputed).
    pub preempted: Vec<RequestId>,
    pub kv_events: Vec<KvEvent>,
}

impl StepOutput {
    /// Whether the pass scheduled anything. A pass that did not takes no time: the caller
    /// should wait for a submit, cancel, release or staging expiry before stepping again.
    pub fn did_work(&self) -> bool {
        self.work.prefill_tokens > 0 || self.work.decode_seqs > 0
    }
}

/// A load snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Load {
    /// Blocks referenced by running or staged requests.
    pub kv_used_blocks: usize,
    /// Registered (prefix-cached) blocks, in use or not.
    pub kv_cached_blocks: usize,
    pub kv_total_blocks: usize,
    pub waiting: usize,
    pub running: usize,
    pub staged: usize,
    /// LoRA adapters of running requests.
    pub running_adapters: Vec<String>,
}

#[derive(Debug)]
struct Staged {
    seq: Seq,
    deadline_us: u64,
}

/// The simulated engine of one rank.
#[derive(Debug)]
pub struct Engine {
    cfg: EngineConfig,
    sched: Scheduler,
    staged: BTreeMap<RequestId, Staged>,
    stranded: u64,
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Result<Self, ConfigError> {
        for (v, name) in [
            (cfg.block_size, "block_size"),
            (cfg.total_kv_blocks, "total_kv_blocks"),
            (cfg.max_num_batched_tokens, "max_num_batched_tokens"),
            (cfg.max_num_seqs, "max_num_seqs"),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        let pool = BlockPool::new(cfg.worker_id, cfg.dp_rank, cfg.total_kv_blocks);
        let sched = Scheduler::new(
            SchedulerConfig {
                block_size: cfg.block_size,
                max_num_batched_tokens: cfg.max_num_batched_tokens,
                max_num_seqs: cfg.max_num_seqs,
                max_loras: cfg.max_loras,
            },
            pool,
        );
        Ok(Self {
            cfg,
            sched,
            staged: BTreeMap::new(),
            stranded: 0,
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    fn contains(&self, id: RequestId) -> bool {
        self.staged.contains_key(&id)
            || self.sched.running.iter().any(|s| s.id == id)
            || self.sched.waiting.iter().any(|s| s.id == id)
    }

    /// Queues a request; it is admitted by a later [`Engine::step`].
    pub fn submit(&mut self, req: SeqRequest) -> Result<(), SubmitError> {
        let id = req.id;
        if req.tokens.is_empty() {
            return Err(SubmitError::EmptyPrompt(id));
        }
        if req.max_tokens == 0 {
            return Err(SubmitError::NoTokens(id));
        }
        if self.contains(id) {
            return Err(SubmitError::Duplicate(id));
        }
        let prompt_len = req.tokens.len();
        let max_tokens = match self.cfg.role {
            Role::Prefill => 1,
            Role::Agg | Role::Decode => req.max_tokens,
        };
        let staged = req.staged_prefix.unwrap_or(0).min(prompt_len);
        // A fully transferred prompt comes with the prefill engine's first token.
        let num_tokens = prompt_len + usize::from(staged == prompt_len);
        let needed = (num_tokens + max_tokens as usize).div_ceil(self.cfg.block_size);
        if needed > self.cfg.total_kv_blocks {
            return Err(SubmitError::TooLarge {
                id,
                needed,
                capacity: self.cfg.total_kv_blocks,
            });
        }
        let locals = req
            .scope
            .hash_scope()
            .local_hashes(&req.tokens, self.cfg.block_size, true);
        let blocks = sequence_hashes(&locals).into_iter().zip(locals).collect();
        let mut seq = Seq::new(id, prompt_len, blocks, max_tokens, num_tokens, staged);
        seq.lora = req.scope.lora.as_deref().map(std::sync::Arc::from);
        self.sched.waiting.push_back(seq);
        Ok(())
    }

    /// Runs one pass starting at `now_us`.
    pub fn step(&mut self, now_us: u64) -> StepOutput {
        let pass = self.sched.pass();
        let duration_us = timing::pass_duration_us(pass.work, self.cfg.speedup);
        let mut finished = Vec::with_capacity(pass.finished.len());
        let mut cached_tokens = Vec::with_capacity(pass.finished.len());
        for mut seq in pass.finished {
            finished.push(seq.id);
            cached_tokens.push((seq.id, seq.cached_tokens.unwrap_or(0)));
            match self.cfg.role {
                Role::Prefill => {
                    let deadline_us = now_us
                        .saturating_add(duration_us)
                        .saturating_add(self.cfg.staging_timeout_us);
                    self.staged.insert(seq.id, Staged { seq, deadline_us });
                }
                Role::Agg | Role::Decode => self.sched.release(&mut seq),
            }
        }
        StepOutput {
            duration_us,
            work: pass.work,
            first_tokens: pass.first_tokens,
            tokens: pass.tokens,
            finished,
            cached_tokens,
            preempted: pass.preempted,
            kv_events: self.sched.pool.drain_events(),
        }
    }

    /// Drops a request wherever it is, freeing its blocks. False when it is unknown.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if let Some(pos) = self.sched.waiting.iter().position(|s| s.id == id) {
            if let Some(mut seq) = self.sched.waiting.remove(pos) {
                self.sched.release(&mut seq);
            }
            return true;
        }
        if let Some(pos) = self.sched.running.iter().position(|s| s.id == id) {
            let mut seq = self.sched.running.remove(pos);
            self.sched.release(&mut seq);
            return true;
        }
        self.release_staged(id)
    }

    /// The decode side has pulled a staged request's KV: free it. False when not staged.
    pub fn release_staged(&mut self, id: RequestId) -> bool {
        match self.staged.remove(&id) {
            Some(mut st) => {
                self.sched.release(&mut st.seq);
                true
            }
            None => false,
        }
    }

    /// Frees staged KV whose deadline is at or before `now_us`; those requests are counted as
    /// stranded and returned.
    pub fn expire_staged(&mut self, now_us: u64) -> Vec<RequestId> {
        let due: Vec<RequestId> = self
            .staged
            .iter()
            .filter(|(_, st)| st.deadline_us <= now_us)
            .map(|(id, _)| *id)
            .collect();
        for id in &due {
            self.release_staged(*id);
        }
        self.stranded += due.len() as u64;
        due
    }

    /// KV events produced outside [`Engine::step`] (none today: cancellation only releases
    /// blocks, it never evicts), for callers that publish between passes.
    pub fn drain_events(&mut self) -> Vec<KvEvent> {
        self.sched.pool.drain_events()
    }

    /// Drops every cached block nobody uses (`Cleared` when nothing is in use).
    pub fn clear_cache(&mut self) -> Vec<KvEvent> {
        self.sched.pool.clear_inactive();
        self.sched.pool.drain_events()
    }

    pub fn load(&self) -> Load {
        let pool = &self.sched.pool;
        Load {
            kv_used_blocks: pool.active_blocks(),
            kv_cached_blocks: pool.cached_blocks(),
            kv_total_blocks: pool.capacity(),
            waiting: self.sched.waiting.len(),
            running: self.sched.running.len(),
            staged: self.staged.len(),
            running_adapters: self.sched.running_adapters(),
        }
    }

    /// Nothing to run: a step would do nothing (staged KV may still be held).
    pub fn is_idle(&self) -> bool {
        self.sched.waiting.is_empty() && self.sched.running.is_empty()
    }

    /// Staged requests that expired without being released.
    pub fn stranded(&self) -> u64 {
        self.stranded
    }

    pub fn preemptions(&self) -> u64 {
        self.sched.preemptions
    }

    /// LoRA adapters loaded into a slot since the engine started.
    pub fn lora_loads(&self) -> u64 {
        self.sched.lora_loads
    }

    /// The block pool, for inspection.
    pub fn pool(&self) -> &BlockPool {
        &self.sched.pool
    }
}
