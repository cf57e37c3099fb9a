//! What a frontend hands the pool router for one request, and the errors that are the
//! caller's fault (an unknown class is a 400, never a silent fallback).

use crate::admission::Phase;
use crate::eligibility::Eligibility;
use crate::ids::{RankId, RequestId};
use crate::policy::UnknownClass;
use crate::time::Timestamp;
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
    /// The class name from the request (header); `None` or empty: the default class.
    pub class: Option<String>,
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
    pub arrival: Timestamp,
}

impl RouteRequest {
    pub fn new(id: RequestId, phase: Phase, prompt: Prompt, arrival: Timestamp) -> Self {
        Self {
            id,
            class: None,
            phase,
            prompt,
            lora: None,
            cache_salt: None,
            expected_output_tokens: 0,
            eligibility: Eligibility::default(),
            preferred: None,
            do_not_queue: false,
            arrival,
        }
    }

    /// The hashing namespace: adapter and salt, so neither shares prefixes with the other.
    pub(crate) fn namespace(&self) -> Option<String> {
        match (&self.lora, &self.cache_salt) {
            (None, None) => None,
            (lora, salt) => Some(format!(
                "lora={}\u{1f}salt={}",
                lora.as_deref().unwrap_or(""),
                salt.as_deref().unwrap_or("")
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum RouteError {
    #[error(transparent)]
    UnknownClass(#[from] UnknownClass),
}
