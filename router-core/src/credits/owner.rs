//! The owner's side of room credits: what each holder has of one rank's decode and prefill
//! room, and whether a new grant still fits under the requesting class's line.

use super::{CreditKind, GRANT_TTL, HeldReport};
use crate::ids::{RankId, RouterId};
use crate::time::Timestamp;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::time::Duration;

/// What a holder asks for: `need` more, on top of `using` spare credits it already holds and
/// puts into the same request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub need: u64,
    pub using: u64,
}

/// The answer to a holder asking for credits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "decision")]
pub enum GrantDecision {
    /// `blocks` credits, under this owner's grant sequence `seq` (the holder acknowledges it).
    Granted { blocks: u64, seq: u64 },
    /// The line leaves `free` (blocks or tokens), fewer than the need.
    NoRoom { free: u64 },
    /// Ownership is new: holders' reports are still arriving.
    Settling,
    /// This router does not own the rank (membership views differ for a moment).
    NotOwned,
}

#[derive(Debug, Clone, Default)]
struct HolderEntry {
    /// What the holder last said it holds.
    reported: u64,
    /// The holder's sequence of that report (older reports are ignored).
    report_seq: u64,
    /// Grants the holder had not seen when it reported: (seq, blocks, granted at).
    unacked: Vec<(u64, u64, Timestamp)>,
}

impl HolderEntry {
    fn counted(&self) -> u64 {
        self.reported
            .saturating_add(self.unacked.iter().map(|u| u.1).sum::<u64>())
    }
}

#[derive(Debug, Clone)]
struct OwnedRank {
    settled_at: Timestamp,
    holders: FxHashMap<(RouterId, CreditKind), HolderEntry>,
}

impl OwnedRank {
    fn outstanding(&self, kind: CreditKind) -> u64 {
        self.holders
            .iter()
            .filter(|((_, k), _)| *k == kind)
            .map(|(_, e)| e.counted())
            .sum()
    }
}

/// One owned rank, for `Observe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnedRankSnapshot {
    pub rank: RankId,
    /// Decode credits out (blocks).
    pub outstanding: u64,
    /// Prefill credits out (tokens).
    pub prefill_outstanding: u64,
    pub holders: usize,
    pub settling: bool,
}

/// The ranks this router owns and the credits it has out on each.
#[derive(Debug, Clone)]
pub struct CreditOwner {
    settle: Duration,
    ranks: FxHashMap<RankId, OwnedRank>,
    next_seq: u64,
}

impl CreditOwner {
    /// `settle`: how long a newly owned rank grants nothing while holders report.
    pub fn new(settle: Duration) -> Self {
        Self {
            settle,
            ranks: FxHashMap::default(),
            next_seq: 0,
        }
    }

    pub fn owns(&self, rank: RankId) -> bool {
        self.ranks.contains_key(&rank)
    }

    pub fn owned(&self) -> impl Iterator<Item = RankId> + '_ {
        self.ranks.keys().copied()
    }

    /// Takes ownership of `rank` (a no-op when already owned). `settled`: grant at once
    /// (this router is alone, so no holder can hold credits it does not know of).
    pub fn own(&mut self, rank: RankId, now: Timestamp, settled: bool) {
        let settle = if settled { Duration::ZERO } else { self.settle };
        self.ranks.entry(rank).or_insert_with(|| OwnedRank {
            settled_at: now + settle,
            holders: FxHashMap::default(),
        });
    }

    /// A replica joined and may hold credits on `rank` this owner does not know of: grant
    /// nothing there until its report has had time to arrive.
    pub fn resettle(&mut self, rank: RankId, now: Timestamp) {
        let settle = self.settle;
        if let Some(owned) = self.ranks.get_mut(&rank) {
            owned.settled_at = owned.settled_at.max(now + settle);
        }
    }

    pub fn disown(&mut self, rank: RankId) {
        self.ranks.remove(&rank);
    }

    /// Credits of `kind` out on `rank`: what holders reported plus grants they have not
    /// acknowledged.
    pub fn outstanding(&self, rank: RankId, kind: CreditKind) -> u64 {
        self.ranks.get(&rank).map_or(0, |r| r.outstanding(kind))
    }

    /// Decides a holder's ask for `need` of `kind` on `rank` under a class `line`.
    /// `committed` is what this router's own ledger shows committed there (decode: blocks
    /// booked and reserved; prefill: prompt tokens booked; its peers' included): load nobody
    /// holds credits for (a class without a line) still counts.
    ///
    /// While room is plentiful the grant is a chunk bigger than the need (a share of the
    /// free room: `free / (2 × members)`), so a replica admits many requests per round trip;
    /// as room runs short, grants shrink to the need itself. A decode grant must fit under
    /// the line; a prefill grant needs only the rank not to be busy (taken ≤ line), so it may
    /// cross the line by one need (see [`CreditKind`]).
    #[allow(clippy::too_many_arguments)]
    pub fn grant(
        &mut self,
        rank: RankId,
        kind: CreditKind,
        holder: RouterId,
        need: u64,
        line: u64,
        committed: u64,
        members: usize,
        now: Timestamp,
    ) -> GrantDecision {
        let ask = Ask { need, using: 0 };
        self.grant_ask(rank, kind, holder, ask, line, committed, members, now)
    }

    /// [`CreditOwner::grant`] for an ask that also puts `ask.using` spare credits the holder
    /// already has into the same request. Those count as taken for a decode grant (they are
    /// part of what the request commits), but not when judging whether a rank is prefill-busy
    /// before the request: one router looks at the load before it admits.
    #[allow(clippy::too_many_arguments)]
    pub fn grant_ask(
        &mut self,
        rank: RankId,
        kind: CreditKind,
        holder: RouterId,
        ask: Ask,
        line: u64,
        committed: u64,
        members: usize,
        now: Timestamp,
    ) -> GrantDecision {
        let Ask { need, using } = ask;
        let Some(owned) = self.ranks.get_mut(&rank) else {
            return GrantDecision::NotOwned;
        };
        if now < owned.settled_at {
            return GrantDecision::Settling;
        }
        for entry in owned.holders.values_mut() {
            entry
                .unacked
                .retain(|&(_, _, at)| now.saturating_since(at) < GRANT_TTL);
        }
        let outstanding = owned.outstanding(kind);
        let taken = outstanding.max(committed);
        let free = line.saturating_sub(taken);
        // The holder's own spare, as far as this owner counts it.
        let using = using.min(
            owned
                .holders
                .get(&(holder, kind))
                .map_or(0, HolderEntry::counted),
        );
        let fits = match kind {
            CreditKind::Decode => need <= free,
            CreditKind::Prefill => (outstanding - using).max(committed) <= line,
        };
        if !fits || need == 0 {
            return GrantDecision::NoRoom { free };
        }
        let share = free / (2 * members.max(1) as u64);
        let blocks = need.max(share.min(free));
        self.next_seq += 1;
        let seq = self.next_seq;
        owned
            .holders
            .entry((holder, kind))
            .or_default()
            .unacked
            .push((seq, blocks, now));
        debug_assert!(match kind {
            CreditKind::Decode => owned.outstanding(kind) <= line.max(committed),
            CreditKind::Prefill => {
                owned.outstanding(kind) <= line.max(committed) + using + need.max(free)
            }
        });
        GrantDecision::Granted { blocks, seq }
    }

    /// A holder's statement of what it holds on `rank` (after a grant, a give-back, or
    /// periodically). Older statements than the last one applied are ignored.
    pub fn held(&mut self, holder: RouterId, report: HeldReport) {
        let Some(owned) = self.ranks.get_mut(&report.rank) else {
            return;
        };
        let entry = owned.holders.entry((holder, report.kind)).or_default();
        if report.report_seq <= entry.report_seq {
            return;
        }
        entry.report_seq = report.report_seq;
        entry.reported = report.held;
        entry
            .unacked
            .retain(|&(seq, _, _)| seq > report.seen_grant_seq);
        if entry.reported == 0 && entry.unacked.is_empty() {
            owned.holders.remove(&(holder, report.kind));
        }
    }

    /// When the next owned rank ends its settle period (after `now`).
    pub fn next_settled(&self, now: Timestamp) -> Option<Timestamp> {
        self.ranks
            .values()
            .map(|r| r.settled_at)
            .filter(|at| *at > now)
            .min()
    }

    /// Owned ranks still settling at `now`.
    pub fn settling(&self, now: Timestamp) -> usize {
        self.ranks.values().filter(|r| now < r.settled_at).count()
    }

    /// A holder left the pool (its lease ran out or it said goodbye): its credits are free.
    pub fn holder_gone(&mut self, holder: RouterId) {
        for owned in self.ranks.values_mut() {
            owned.holders.retain(|(h, _), _| *h != holder);
        }
    }

    pub fn snapshot(&self, now: Timestamp) -> Vec<OwnedRankSnapshot> {
        let mut out: Vec<OwnedRankSnapshot> = self
            .ranks
            .iter()
            .map(|(rank, owned)| OwnedRankSnapshot {
                rank: *rank,
                outstanding: owned.outstanding(CreditKind::Decode),
                prefill_outstanding: owned.outstanding(CreditKind::Prefill),
                holders: owned.holders.len(),
                settling: now < owned.settled_at,
            })
            .collect();
        out.sort_by_key(|s| s.rank);
        out
    }
}
