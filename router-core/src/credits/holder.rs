//! The holder's side of room credits: what this router holds on each rank's decode and
//! prefill room, how much of it its own reservations and bookings use, and the reports that
//! tell each owner.

use super::{CreditKey, CreditKind};
use crate::ids::{RankId, RouterId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// A holder's statement to a rank's owner: "I hold `held` credits of `kind` on `rank`, and
/// the highest grant of yours I have seen is `seen_grant_seq`". Absolute, so it repairs a
/// lost message; `report_seq` orders statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldReport {
    pub rank: RankId,
    /// Absent in reports from routers before prefill credits: decode.
    #[serde(default)]
    pub kind: CreditKind,
    pub held: u64,
    pub seen_grant_seq: u64,
    pub report_seq: u64,
}

#[derive(Debug, Clone, Default)]
struct HeldRank {
    owner: Option<RouterId>,
    held: u64,
    used: u64,
    seen: u64,
}

impl HeldReport {
    pub fn key(&self) -> CreditKey {
        CreditKey {
            rank: self.rank,
            kind: self.kind,
        }
    }
}

/// One held rank, for `Observe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldRankSnapshot {
    pub rank: RankId,
    pub kind: CreditKind,
    pub owner: Option<RouterId>,
    pub held: u64,
    pub used: u64,
}

/// Credits this router holds, per rank and kind, and how much of them its own bookings and
/// reservations use (as the ledger counts them).
#[derive(Debug, Clone, Default)]
pub struct CreditHolder {
    ranks: FxHashMap<CreditKey, HeldRank>,
    report_seq: u64,
    /// Grants accepted so far.
    grants: u64,
    /// Ranks whose held credits changed since the last `take_changes`.
    changed: Vec<CreditKey>,
}

impl CreditHolder {
    /// Credits held on `rank` that no own request uses.
    pub fn spare(&self, key: impl Into<CreditKey>) -> u64 {
        self.ranks
            .get(&key.into())
            .map_or(0, |r| r.held.saturating_sub(r.used))
    }

    /// Credits held on `rank`, used or not.
    pub fn held(&self, key: impl Into<CreditKey>) -> u64 {
        self.ranks.get(&key.into()).map_or(0, |r| r.held)
    }

    /// Ranks with spare credits, and how many.
    pub fn spares(&self) -> impl Iterator<Item = (CreditKey, u64)> + '_ {
        self.ranks
            .iter()
            .map(|(rank, r)| (*rank, r.held.saturating_sub(r.used)))
            .filter(|(_, spare)| *spare > 0)
    }

    pub fn grants_received(&self) -> u64 {
        self.grants
    }

    pub fn owner(&self, key: impl Into<CreditKey>) -> Option<RouterId> {
        self.ranks.get(&key.into()).and_then(|r| r.owner)
    }

    /// Ranks whose held credits changed since the last call, with what is held now.
    pub fn take_changes(&mut self) -> Vec<(CreditKey, u64)> {
        let mut changed = std::mem::take(&mut self.changed);
        changed.sort_unstable();
        changed.dedup();
        changed.into_iter().map(|r| (r, self.held(r))).collect()
    }

    /// The owner of `rank` is now `owner`: grants are counted afresh in its sequence. Returns
    /// the report to send it when this router holds credits there.
    pub fn set_owner(&mut self, key: impl Into<CreditKey>, owner: RouterId) -> Option<HeldReport> {
        let rank = key.into();
        let entry = self.ranks.entry(rank).or_default();
        if entry.owner == Some(owner) {
            return None;
        }
        entry.owner = Some(owner);
        entry.seen = 0;
        (entry.held > 0).then(|| self.report(rank)).flatten()
    }

    /// A grant from `from`. Accepted only from the rank's owner and in sequence; returns the
    /// acknowledgement to send back.
    pub fn granted(
        &mut self,
        from: RouterId,
        key: impl Into<CreditKey>,
        blocks: u64,
        seq: u64,
    ) -> Option<HeldReport> {
        let rank = key.into();
        let entry = self.ranks.get_mut(&rank)?;
        if entry.owner != Some(from) || seq <= entry.seen {
            return None;
        }
        entry.seen = seq;
        entry.held = entry.held.saturating_add(blocks);
        self.grants += 1;
        self.changed.push(rank);
        self.report(rank)
    }

    /// Own bookings and reservations now take `used` blocks on `rank`. Returns how many
    /// blocks they gave up since the last call (credits that may go back).
    pub fn set_used(&mut self, key: impl Into<CreditKey>, used: u64) -> u64 {
        let rank = key.into();
        let Some(entry) = self.ranks.get_mut(&rank) else {
            return 0;
        };
        let freed = entry.used.saturating_sub(used);
        entry.used = used;
        freed
    }

    /// Ranks (and kinds) this router holds or uses credits on.
    pub fn ranks(&self) -> impl Iterator<Item = CreditKey> + '_ {
        self.ranks
            .iter()
            .filter(|(_, r)| r.held > 0 || r.used > 0)
            .map(|(rank, _)| *rank)
    }

    /// Gives back spare credits on `rank` beyond `keep`; the report tells the owner.
    pub fn give_back(&mut self, key: impl Into<CreditKey>, keep: u64) -> Option<HeldReport> {
        let rank = key.into();
        let entry = self.ranks.get_mut(&rank)?;
        let target = entry.used.saturating_add(keep);
        if entry.held <= target {
            return None;
        }
        entry.held = target;
        self.changed.push(rank);
        self.report(rank)
    }

    /// The current statement for `rank`'s owner (`None` when the rank has no owner yet).
    pub fn report(&mut self, key: impl Into<CreditKey>) -> Option<HeldReport> {
        let key = key.into();
        let entry = self.ranks.get(&key)?;
        entry.owner?;
        self.report_seq += 1;
        Some(HeldReport {
            rank: key.rank,
            kind: key.kind,
            held: entry.held,
            seen_grant_seq: entry.seen,
            report_seq: self.report_seq,
        })
    }

    /// Ranks this router holds credits on, with their owners.
    pub fn held_ranks(&self) -> impl Iterator<Item = (CreditKey, Option<RouterId>)> + '_ {
        self.ranks
            .iter()
            .filter(|(_, r)| r.held > 0)
            .map(|(rank, r)| (*rank, r.owner))
    }

    /// A rank left the pool: its credits (of every kind) are dropped.
    pub fn forget_rank(&mut self, rank: RankId) {
        self.ranks.retain(|key, _| key.rank != rank);
    }

    pub fn snapshot(&self) -> Vec<HeldRankSnapshot> {
        let mut out: Vec<HeldRankSnapshot> = self
            .ranks
            .iter()
            .filter(|(_, r)| r.held > 0 || r.used > 0)
            .map(|(key, r)| HeldRankSnapshot {
                rank: key.rank,
                kind: key.kind,
                owner: r.owner,
                held: r.held,
                used: r.used,
            })
            .collect();
        out.sort_by_key(|s| (s.rank, s.kind));
        out
    }
}
