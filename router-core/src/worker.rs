//! What a worker announces about itself: its data-parallel ranks and their capacities,
//! and the LoRA adapters it can serve. Validated once at the edge so the ledger can
//! trust it.

use crate::ids::{RankId, WorkerId};
use serde::{Deserialize, Serialize};

/// Used when a worker does not say how many tokens one batch may hold: such a rank
/// practically never counts as prefill-busy (same convention as the reference router).
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: u64 = 10_000_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub id: WorkerId,
    /// First data-parallel rank; the worker owns `dp_start .. dp_start + dp_size`.
    #[serde(default)]
    pub dp_start: u32,
    pub dp_size: u32,
    /// KV blocks per rank. `None`: unknown, the rank never counts as decode-full.
    pub total_kv_blocks: Option<u64>,
    /// Token budget of one engine step per rank. `None`: [`DEFAULT_MAX_NUM_BATCHED_TOKENS`].
    pub max_num_batched_tokens: Option<u64>,
    /// Tokens per KV block.
    pub block_size: u32,
    /// The base model it serves, as its engine names it (`/v1/models`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// LoRA adapters this worker can serve.
    #[serde(default)]
    pub loras: Vec<String>,
    /// Whether the worker publishes KV events. A router in events mode learns the prefixes
    /// of a worker that does not from its own placements (the approximate index).
    #[serde(default = "publishes_events")]
    pub kv_events: bool,
    /// The longest sequence (prompt and output) the engine takes, in tokens, when it says
    /// (vLLM's `max_model_len`): the frontend's prompt limit follows it.
    #[serde(default)]
    pub max_model_len: Option<u64>,
}

fn publishes_events() -> bool {
    true
}

/// The most data-parallel ranks one worker may announce.
pub const MAX_DP_SIZE: u32 = 1024;

/// The most LoRA adapters one worker may announce.
pub const MAX_LORAS: usize = 4096;

/// The longest model or adapter name a worker may announce, in bytes.
pub const MAX_MODEL_NAME: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerSpecError {
    #[error("{worker}: dp_size must be at least 1")]
    NoRanks { worker: WorkerId },
    #[error("{worker}: dp_start + dp_size overflows")]
    RankOverflow { worker: WorkerId },
    /// More ranks than any engine runs: each rank costs the router memory and gate work, so
    /// an announcement may not ask for millions of them.
    #[error("{worker}: dp_size {dp_size} is above {MAX_DP_SIZE}")]
    TooManyRanks { worker: WorkerId, dp_size: u32 },
    #[error("{worker}: block_size must be at least 1")]
    ZeroBlockSize { worker: WorkerId },
    #[error("{worker}: max_num_batched_tokens must be at least 1")]
    ZeroBatchTokens { worker: WorkerId },
    #[error("{worker}: max_model_len must be at least 1")]
    ZeroModelLen { worker: WorkerId },
    #[error("{worker}: {loras} LoRA adapters is above {MAX_LORAS}")]
    TooManyLoras { worker: WorkerId, loras: usize },
    #[error("{worker}: a model or adapter name must be 1 to {MAX_MODEL_NAME} bytes")]
    BadModelName { worker: WorkerId },
}

impl WorkerSpec {
    /// A worker with `dp_size` ranks starting at 0.
    pub fn new(id: u64, dp_size: u32, total_kv_blocks: u64, max_num_batched_tokens: u64) -> Self {
        Self {
            id: WorkerId(id),
            dp_start: 0,
            dp_size,
            total_kv_blocks: Some(total_kv_blocks),
            max_num_batched_tokens: Some(max_num_batched_tokens),
            block_size: 16,
            model: None,
            loras: Vec::new(),
            kv_events: true,
            max_model_len: None,
        }
    }

    pub fn validate(&self) -> Result<(), WorkerSpecError> {
        let worker = self.id;
        if self.dp_size == 0 {
            return Err(WorkerSpecError::NoRanks { worker });
        }
        if self.dp_start.checked_add(self.dp_size).is_none() {
            return Err(WorkerSpecError::RankOverflow { worker });
        }
        if self.dp_size > MAX_DP_SIZE {
            return Err(WorkerSpecError::TooManyRanks {
                worker,
                dp_size: self.dp_size,
            });
        }
        if self.block_size == 0 {
            return Err(WorkerSpecError::ZeroBlockSize { worker });
        }
        if self.max_num_batched_tokens == Some(0) {
            return Err(WorkerSpecError::ZeroBatchTokens { worker });
        }
        if self.max_model_len == Some(0) {
            return Err(WorkerSpecError::ZeroModelLen { worker });
        }
        if self.loras.len() > MAX_LORAS {
            return Err(WorkerSpecError::TooManyLoras {
                worker,
                loras: self.loras.len(),
            });
        }
        let bad_name = |n: &String| n.is_empty() || n.len() > MAX_MODEL_NAME;
        if self.model.iter().chain(&self.loras).any(bad_name) {
            return Err(WorkerSpecError::BadModelName { worker });
        }
        Ok(())
    }

    pub fn ranks(&self) -> impl Iterator<Item = RankId> + '_ {
        (self.dp_start..self.dp_start.saturating_add(self.dp_size)).map(|dp_rank| RankId {
            worker: self.id,
            dp_rank,
        })
    }

    pub fn batch_tokens(&self) -> u64 {
        self.max_num_batched_tokens
            .unwrap_or(DEFAULT_MAX_NUM_BATCHED_TOKENS)
    }

    pub fn serves_lora(&self, lora: &str) -> bool {
        self.loras.iter().any(|l| l == lora)
    }
}
