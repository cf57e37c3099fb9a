//! What a frontend hands the pool router for one request. The class is already resolved
//! (the frontend resolves it once, before any hop); the arrival time is stamped by whoever
//! delivers the request (the actor handle), so it is not part of the request.

use crate::admission::Phase;
use crate::eligibility::Eligibility;
use crate::hashing::HashScope;
use crate::ids::{ClassId, RankId, RequestId};
use serde::{Deserialize, Serialize};

/// The prompt as token ids, or as precomputed chained block hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prompt {
    Tokens(Vec<u32>),
    Hashes {
        block_hashes: Vec<u64>,
        prompt_tokens: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteRequest {
    pub id: RequestId,
    /// The policy class, resolved by the caller (`PolicyProfile::resolve`).
    pub class: ClassId,
    pub phase: Phase,
    pub prompt: Prompt,
    /// LoRA adapter: narrows eligible workers and namespaces the block hashes.
    pub lora: Option<String>,
    /// Cache salt: namespaces the block hashes (tenants that must not share prefixes).
    pub cache_salt: Option<String>,
    /// Expected output tokens (decode blocks held beyond the prompt).
    pub expected_output_tokens: u64,
    /// Allow-list and pin (the LoRA field above takes precedence over `eligibility.lora`).
    pub eligibility: Eligibility,
    pub preferred: Option<RankId>,
    pub do_not_queue: bool,
}

impl Prompt {
    /// `tokens` hashed once, as a router of `block_size` would (under the request's adapter
    /// and salt, [`HashScope`]): what a frontend sends, so the router's single actor does no
    /// hashing and no leg carries the tokens.
    pub fn hashed(tokens: &[u32], block_size: u32, scope: HashScope<'_>) -> Self {
        let hashes = scope.sequence_hashes(tokens, block_size.max(1) as usize);
        Self::Hashes {
            block_hashes: hashes.into_iter().map(|h| h.0).collect(),
            prompt_tokens: tokens.len() as u64,
        }
    }

    /// The prompt's length in tokens.
    pub fn tokens(&self) -> u64 {
        match self {
            Self::Tokens(tokens) => tokens.len() as u64,
            Self::Hashes { prompt_tokens, .. } => *prompt_tokens,
        }
    }
}

impl RouteRequest {
    pub fn new(id: RequestId, class: ClassId, phase: Phase, prompt: Prompt) -> Self {
        Self {
            id,
            class,
            phase,
            prompt,
            lora: None,
            cache_salt: None,
            expected_output_tokens: 0,
            eligibility: Eligibility::default(),
            preferred: None,
            do_not_queue: false,
        }
    }

    /// What the prompt's hashes depend on besides its tokens: the adapter and the salt.
    pub fn scope(&self) -> HashScope<'_> {
        HashScope::new(self.lora.as_deref(), self.cache_salt.as_deref())
    }
}
