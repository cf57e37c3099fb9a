//! Which ranks may serve a request: an allow-list of workers, a LoRA adapter, a pinned
//! rank. Shared by the gate, the paired decode-room check and selection, so all three
//! agree on the same set.

use crate::ids::{RankId, WorkerId};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eligibility {
    /// Only these workers (e.g. reachable ones, or a migration's exclusions).
    pub allowed_workers: Option<Vec<WorkerId>>,
    /// Prefer workers that serve this adapter. When no eligible worker serves it, the
    /// narrowing falls back to the unnarrowed set (engines may load adapters on demand).
    pub lora: Option<String>,
    /// Exactly this rank.
    pub pinned: Option<RankId>,
}

impl Eligibility {
    pub const ANY: Eligibility = Eligibility {
        allowed_workers: None,
        lora: None,
        pinned: None,
    };

    pub fn pinned(rank: RankId) -> Self {
        Self {
            pinned: Some(rank),
            ..Self::default()
        }
    }

    pub fn lora(name: impl Into<String>) -> Self {
        Self {
            lora: Some(name.into()),
            ..Self::default()
        }
    }

    /// No constraint at all: queries can use the incremental per-class indexes.
    pub fn is_unfiltered(&self) -> bool {
        self.allowed_workers.is_none() && self.lora.is_none() && self.pinned.is_none()
    }

    pub fn allows_worker(&self, worker: WorkerId) -> bool {
        self.allowed_workers
            .as_ref()
            .is_none_or(|a| a.contains(&worker))
    }
}
