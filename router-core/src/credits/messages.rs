//! What a replica's credit agent says and shows: the messages replicas trade on the credits
//! subject ([`CreditMsg`], addressed as [`CreditOut`]), its counters and its `Observe`
//! snapshot.

use super::{CreditKind, HeldRankSnapshot, HeldReport, OwnedRankSnapshot};
use crate::ids::{ClassId, RankId, RouterId};
use crate::ledger::MAX_BOOKED;
use serde::{Deserialize, Serialize};

/// What replicas say to each other about credits (the body of the credits subject).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreditMsg {
    /// Holder → owner: credits for `need` (blocks or tokens, by `kind`) on `rank`, under
    /// `class`'s line.
    Ask {
        rank: RankId,
        class: ClassId,
        need: u64,
        #[serde(default)]
        kind: CreditKind,
        /// Spare credits the holder already has there and puts into the same request.
        #[serde(default)]
        using: u64,
    },
    /// Owner → holder.
    Grant {
        rank: RankId,
        blocks: u64,
        seq: u64,
        #[serde(default)]
        kind: CreditKind,
    },
    /// Owner → holder: not now (no room, settling, or not the owner).
    Deny {
        rank: RankId,
        #[serde(default)]
        kind: CreditKind,
    },
    /// Holder → owner: what it holds (acknowledgement, give-back or periodic report).
    Held(HeldReport),
}

impl CreditMsg {
    /// The message with its amounts cut to [`MAX_BOOKED`]: a peer's nonsense (a report of
    /// `u64::MAX` blocks held) must not overflow the owner's sums.
    pub(super) fn clamped(self) -> Self {
        match self {
            Self::Ask {
                rank,
                class,
                need,
                kind,
                using,
            } => Self::Ask {
                rank,
                class,
                need: need.min(MAX_BOOKED),
                kind,
                using: using.min(MAX_BOOKED),
            },
            Self::Grant {
                rank,
                blocks,
                seq,
                kind,
            } => Self::Grant {
                rank,
                blocks: blocks.min(MAX_BOOKED),
                seq,
                kind,
            },
            Self::Held(report) => Self::Held(HeldReport {
                held: report.held.min(MAX_BOOKED),
                ..report
            }),
            deny @ Self::Deny { .. } => deny,
        }
    }
}

/// A message for one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditOut {
    pub to: RouterId,
    pub msg: CreditMsg,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreditCounters {
    pub asks_sent: u64,
    pub grants_received: u64,
    pub denials_received: u64,
    pub local_grants: u64,
    pub grants_given: u64,
    pub denials_given: u64,
    pub blocks_given_back: u64,
    pub tokens_given_back: u64,
}

/// The agent's state, for `Observe`.
#[derive(Debug, Clone, Serialize)]
pub struct CreditSnapshot {
    pub members: Vec<RouterId>,
    pub held: Vec<HeldRankSnapshot>,
    pub owned: Vec<OwnedRankSnapshot>,
    pub asking: usize,
    pub counters: CreditCounters,
}
