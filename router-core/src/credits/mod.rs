//! Room credits: how several router replicas admit against one decode pool as one gate.
//!
//! Every replica sees the others' bookings only after peer sync delivers them, so a burst
//! that reaches all replicas at once can be admitted by each against a view without the
//! others' reservations: overshoot grows with the number of replicas. Credits bound it by
//! construction instead of by sync speed:
//!
//! - Each decode rank has one **owner** among the live replicas of the pool: the member with
//!   the highest rendezvous score for the rank ([`owner_of`]). Every replica computes the same
//!   owner from the same membership.
//! - A replica may reserve decode blocks on a rank only out of **credits** it holds for that
//!   rank ([`CreditHolder`]). Credits come from the rank's owner ([`CreditOwner`]), which
//!   grants a request's need only while the credits it has out, plus the need, stay under the
//!   requesting class's line (`decode_busy_threshold_frac × total_kv_blocks`). So the sum of
//!   what all replicas reserve on a rank never passes the line, whatever the sync lag.
//! - A holder gives credits back when its reservation or booking ends, and states what it
//!   holds in every `Held` report (absolute, sequenced), which repairs a lost message.
//!   Grants the holder has not acknowledged count against the line until it does, or until
//!   [`GRANT_TTL`] passes (only a grant lost on the wire stays unacknowledged that long).
//! - When membership changes, a rank's new owner starts with nothing counted: it grants
//!   nothing on that rank for a settle period, while the holders' reports of what they hold
//!   (sent to the new owner at once) fill its table.
//!
//! The same credits bound the **prefill** line ([`CreditKind::Prefill`]) of an aggregated
//! pool or a disaggregated fleet's prefill pool: prompt tokens a replica books on a rank come
//! out of prefill credits from the rank's owner, who grants only while the rank is not
//! prefill-busy counting every holder's credits. Each pool runs its own agents: a prefill
//! pool's ranks are owned among its prefill routers, the decode pool's among its decode
//! routers.
//!
//! A replica that owns a rank grants to itself without a message, so a single replica pays
//! no round trip. A replica cut off from its peers keeps the credits it holds (a safe local
//! share, never N × the room) and gets new ones only for ranks it owns.
//!
//! Pure: time comes in as [`Timestamp`]s, decisions come back as values.

mod agent;
mod holder;
mod messages;
mod owner;

#[cfg(test)]
mod agent_tests;
#[cfg(test)]
mod prefill_pool_tests;
#[cfg(test)]
mod prefill_tests;
#[cfg(test)]
mod test_replica;
#[cfg(test)]
mod tests;

pub use agent::{ASK_TIMEOUT, CreditAgent, SPARE_HOLD};
pub use holder::{CreditHolder, HeldRankSnapshot, HeldReport};
pub use messages::{CreditCounters, CreditMsg, CreditOut, CreditSnapshot};
pub use owner::{Ask, CreditOwner, GrantDecision, OwnedRankSnapshot};

use crate::ids::{RankId, RouterId};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use xxhash_rust::xxh3::xxh3_64;

/// Which room of a rank credits are for.
///
/// - `Decode`: KV blocks under the class's decode line (`decode_busy_threshold_frac ×
///   total_kv_blocks`). A grant must fit under the line.
/// - `Prefill`: prompt tokens under the class's prefill line (`prefill_busy_threshold(_frac)`
///   of the rank's batch). A rank is prefill-busy only once its load is above the line, so
///   the owner grants while what it has out is at or under the line, and the last grant may
///   cross it by one request, as one router admits one request onto a rank not yet busy.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum CreditKind {
    #[default]
    Decode,
    Prefill,
}

impl CreditKind {
    pub const ALL: [CreditKind; 2] = [CreditKind::Decode, CreditKind::Prefill];
}

/// One rank's room of one kind: what credits are counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CreditKey {
    pub rank: RankId,
    pub kind: CreditKind,
}

impl CreditKey {
    pub fn decode(rank: RankId) -> Self {
        Self {
            rank,
            kind: CreditKind::Decode,
        }
    }

    pub fn prefill(rank: RankId) -> Self {
        Self {
            rank,
            kind: CreditKind::Prefill,
        }
    }
}

impl From<RankId> for CreditKey {
    /// A bare rank means its decode room.
    fn from(rank: RankId) -> Self {
        Self::decode(rank)
    }
}

/// How long a grant may stay unacknowledged before the owner stops counting it.
pub const GRANT_TTL: Duration = Duration::from_secs(10);

/// The owner of `rank` among `members`: the highest rendezvous score, so a membership change
/// moves only the ranks of the member that came or went. `None` when `members` is empty.
pub fn owner_of<'a>(
    rank: RankId,
    members: impl IntoIterator<Item = &'a RouterId>,
) -> Option<RouterId> {
    members
        .into_iter()
        .map(|m| (score(rank, *m), *m))
        .max()
        .map(|(_, m)| m)
}

fn score(rank: RankId, member: RouterId) -> u64 {
    let mut bytes = [0u8; 28];
    bytes[..8].copy_from_slice(&rank.worker.0.to_le_bytes());
    bytes[8..12].copy_from_slice(&rank.dp_rank.to_le_bytes());
    bytes[12..].copy_from_slice(member.0.as_bytes());
    xxh3_64(&bytes)
}
