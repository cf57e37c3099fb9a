//! One replica's room-credit agent for its decode pool: the holder and owner sides together
//! with the membership that decides who owns which rank. The decode actor feeds it events
//! (membership, ranks, wants from the prefill gate, own reservations, messages from peers,
//! ticks) and sends the [`CreditOut`] messages it returns; messages to itself never leave it.

use super::{CreditHolder, CreditOwner, GrantDecision, HeldRankSnapshot, HeldReport};
use super::{OwnedRankSnapshot, owner_of};
use crate::admission::RoomWant;
use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RankId, RouterId};
use crate::ledger::{BookingLedger, MAX_BOOKED};
use crate::time::Timestamp;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// An ask without an answer is asked again after this long.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(500);
/// Spare credits nobody asked for within this long go back to their owner.
pub const SPARE_HOLD: Duration = Duration::from_millis(500);

/// What replicas say to each other about credits (the body of the credits subject).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreditMsg {
    /// Holder → owner: credits for `need` blocks on `rank`, under `class`'s line.
    Ask {
        rank: RankId,
        class: ClassId,
        need: u64,
    },
    /// Owner → holder.
    Grant { rank: RankId, blocks: u64, seq: u64 },
    /// Owner → holder: not now (no room, settling, or not the owner).
    Deny { rank: RankId },
    /// Holder → owner: what it holds (acknowledgement, give-back or periodic report).
    Held(HeldReport),
}

impl CreditMsg {
    /// The message with its block counts cut to [`MAX_BOOKED`]: a peer's nonsense (a report
    /// of `u64::MAX` blocks held) must not overflow the owner's sums.
    fn clamped(self) -> Self {
        match self {
            Self::Ask { rank, class, need } => Self::Ask {
                rank,
                class,
                need: need.min(MAX_BOOKED),
            },
            Self::Grant { rank, blocks, seq } => Self::Grant {
                rank,
                blocks: blocks.min(MAX_BOOKED),
                seq,
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

#[derive(Debug, Clone)]
pub struct CreditAgent {
    me: RouterId,
    members: BTreeSet<RouterId>,
    /// Ever had a peer: a rank taken while alone is settled at once only before that.
    had_peers: bool,
    ranks: BTreeSet<RankId>,
    holder: CreditHolder,
    owner: CreditOwner,
    asking: FxHashMap<RankId, Timestamp>,
    last_want: Option<Timestamp>,
    /// Owned ranks settling at the last tick (a settle that ended is a room signal: asks
    /// were denied meanwhile).
    settling: usize,
    /// Rises when room this replica can use may have grown (a grant, credits given back to
    /// it as owner): a room signal for the prefill gate.
    version: u64,
    counters: CreditCounters,
}

impl CreditAgent {
    /// `settle`: how long a rank whose ownership moved here grants nothing while holders
    /// report (two peer heartbeats is plenty).
    pub fn new(me: RouterId, settle: Duration) -> Self {
        Self {
            me,
            members: BTreeSet::from([me]),
            had_peers: false,
            ranks: BTreeSet::new(),
            holder: CreditHolder::default(),
            owner: CreditOwner::new(settle),
            asking: FxHashMap::default(),
            last_want: None,
            settling: 0,
            version: 0,
            counters: CreditCounters::default(),
        }
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Credits held on `rank` that no own request uses.
    pub fn spare(&self, rank: RankId) -> u64 {
        self.holder.spare(rank)
    }

    pub fn spares(&self) -> impl Iterator<Item = (RankId, u64)> + '_ {
        self.holder.spares()
    }

    /// The live replicas of the pool are now `peers` and this one.
    pub fn set_peers(
        &mut self,
        peers: impl IntoIterator<Item = RouterId>,
        now: Timestamp,
    ) -> Vec<CreditOut> {
        let mut members: BTreeSet<RouterId> = peers.into_iter().collect();
        members.insert(self.me);
        if members == self.members {
            return Vec::new();
        }
        // A replica seeing peers for the first time took its ranks while alone: others may
        // hold credits on them from their owners before it came. It settles them.
        let first_peers = !self.had_peers && members.len() > 1;
        for gone in self.members.difference(&members) {
            self.owner.holder_gone(*gone);
            self.version += 1;
        }
        self.members = members;
        if self.members.len() > 1 {
            self.had_peers = true;
        }
        let ranks: Vec<RankId> = self.ranks.iter().copied().collect();
        let mut out = Vec::new();
        for rank in ranks {
            if first_peers {
                self.owner.resettle(rank, now);
                self.settling = self.owner.settling(now);
            }
            out.extend(self.assign(rank, now));
        }
        out
    }

    /// The pool's ranks are now `ranks` (after a worker came or went).
    pub fn set_ranks(
        &mut self,
        ranks: impl IntoIterator<Item = RankId>,
        now: Timestamp,
    ) -> Vec<CreditOut> {
        let ranks: BTreeSet<RankId> = ranks.into_iter().collect();
        for gone in self.ranks.difference(&ranks) {
            self.holder.forget_rank(*gone);
            self.owner.disown(*gone);
            self.asking.remove(gone);
        }
        let new: Vec<RankId> = ranks.difference(&self.ranks).copied().collect();
        self.ranks = ranks;
        new.into_iter().flat_map(|r| self.assign(r, now)).collect()
    }

    /// Points `rank` at its owner under the current membership.
    fn assign(&mut self, rank: RankId, now: Timestamp) -> Vec<CreditOut> {
        let Some(owner) = owner_of(rank, &self.members) else {
            return Vec::new();
        };
        if owner == self.me {
            let alone = self.members.len() == 1 && !self.had_peers;
            self.owner.own(rank, now, alone);
            self.settling = self.owner.settling(now);
        } else {
            self.owner.disown(rank);
        }
        let report = self.holder.set_owner(rank, owner);
        self.asking.remove(&rank);
        report
            .into_iter()
            .flat_map(|r| self.send_held(owner, r))
            .collect()
    }

    /// The prefill gate has a request of `want.class` waiting for decode room.
    pub fn want(
        &mut self,
        want: &RoomWant,
        ledger: &BookingLedger,
        now: Timestamp,
    ) -> Vec<CreditOut> {
        self.last_want = Some(now);
        let filter = match &want.lora {
            Some(lora) => Eligibility::lora(lora.clone()),
            None => Eligibility::ANY,
        };
        let need = i64::try_from(want.need).unwrap_or(i64::MAX);
        let rank = match ledger.best_room_without_credits(want.class, &filter) {
            Some((rank, room)) if room >= need => rank,
            // The pool itself is full as far as this replica can see: wait for room.
            _ => return Vec::new(),
        };
        self.holder.set_used(rank, ledger.own_blocks(rank));
        let missing = want.need.saturating_sub(self.holder.spare(rank));
        if missing == 0 {
            return Vec::new();
        }
        if self
            .asking
            .get(&rank)
            .is_some_and(|at| now.saturating_since(*at) < ASK_TIMEOUT)
        {
            return Vec::new();
        }
        let Some(owner) = self.holder.owner(rank) else {
            return Vec::new();
        };
        if owner == self.me {
            if let GrantDecision::Granted { blocks, seq } =
                self.decide(rank, self.me, want.class, missing, ledger, now)
                && let Some(ack) = self.holder.granted(self.me, rank, blocks, seq)
            {
                self.owner.held(self.me, ack);
                self.counters.local_grants += 1;
                self.version += 1;
            }
            return Vec::new();
        }
        self.asking.insert(rank, now);
        self.counters.asks_sent += 1;
        vec![CreditOut {
            to: owner,
            msg: CreditMsg::Ask {
                rank,
                class: want.class,
                need: missing,
            },
        }]
    }

    /// The owner's decision on an ask, under the class's line on the rank.
    fn decide(
        &mut self,
        rank: RankId,
        holder: RouterId,
        class: ClassId,
        need: u64,
        ledger: &BookingLedger,
        now: Timestamp,
    ) -> GrantDecision {
        match ledger.rank_decode_room(class, rank) {
            Some((Some(line), committed)) => {
                let members = self.members.len();
                self.owner
                    .grant(rank, holder, need, line, committed, members, now)
            }
            // No line for the class there (or an unknown rank): nothing to hold back, but
            // nothing to count either.
            _ => GrantDecision::NoRoom { free: 0 },
        }
    }

    /// A message from peer `from`.
    pub fn receive(
        &mut self,
        from: RouterId,
        msg: CreditMsg,
        ledger: &BookingLedger,
        now: Timestamp,
    ) -> Vec<CreditOut> {
        match msg.clamped() {
            CreditMsg::Ask { rank, class, need } => {
                let answer = match self.decide(rank, from, class, need, ledger, now) {
                    GrantDecision::Granted { blocks, seq } => {
                        self.counters.grants_given += 1;
                        CreditMsg::Grant { rank, blocks, seq }
                    }
                    _ => {
                        self.counters.denials_given += 1;
                        CreditMsg::Deny { rank }
                    }
                };
                vec![CreditOut {
                    to: from,
                    msg: answer,
                }]
            }
            CreditMsg::Grant { rank, blocks, seq } => {
                self.asking.remove(&rank);
                let Some(ack) = self.holder.granted(from, rank, blocks, seq) else {
                    return Vec::new();
                };
                self.counters.grants_received += 1;
                self.version += 1;
                vec![CreditOut {
                    to: from,
                    msg: CreditMsg::Held(ack),
                }]
            }
            CreditMsg::Deny { rank } => {
                self.asking.remove(&rank);
                self.counters.denials_received += 1;
                Vec::new()
            }
            CreditMsg::Held(report) => {
                let before = self.owner.outstanding(report.rank);
                self.owner.held(from, report);
                if self.owner.outstanding(report.rank) < before {
                    self.version += 1;
                }
                Vec::new()
            }
        }
    }

    /// Follows what own bookings and reservations take on each rank with credits (the
    /// ledger counts it), and gives back the credits of those that ended (released,
    /// cancelled, expired) at once; spare credits from before stay for the next request.
    pub fn reconcile(&mut self, ledger: &BookingLedger) -> Vec<CreditOut> {
        let ranks: Vec<RankId> = self.holder.ranks().collect();
        let mut out = Vec::new();
        for rank in ranks {
            let spare_before = self.holder.spare(rank);
            if self.holder.set_used(rank, ledger.own_blocks(rank)) > 0 {
                out.extend(self.give_back(rank, spare_before));
            }
        }
        out
    }

    /// When the agent needs a tick: the end of the next settle period.
    pub fn next_deadline(&self, now: Timestamp) -> Option<Timestamp> {
        self.owner.next_settled(now)
    }

    /// Every rank's held credits (for a ledger built afresh).
    pub fn all_held(&self) -> Vec<(RankId, u64)> {
        self.holder
            .held_ranks()
            .map(|(rank, _)| (rank, self.holder.held(rank)))
            .collect()
    }

    /// Ranks whose held credits changed since the last call, with what is held now (for
    /// the ledger, whose headroom they bound).
    pub fn take_held_changes(&mut self) -> Vec<(RankId, u64)> {
        self.holder.take_changes()
    }

    /// Gives back spare credits on `rank` beyond `keep`.
    fn give_back(&mut self, rank: RankId, keep: u64) -> Vec<CreditOut> {
        let before = self.holder.held(rank);
        let Some(report) = self.holder.give_back(rank, keep) else {
            return Vec::new();
        };
        self.counters.blocks_given_back += before.saturating_sub(report.held);
        match self.holder.owner(rank) {
            Some(owner) => self.send_held(owner, report),
            None => Vec::new(),
        }
    }

    fn send_held(&mut self, owner: RouterId, report: HeldReport) -> Vec<CreditOut> {
        if owner == self.me {
            self.owner.held(self.me, report);
            self.version += 1;
            return Vec::new();
        }
        vec![CreditOut {
            to: owner,
            msg: CreditMsg::Held(report),
        }]
    }

    /// Periodic work: spare credits nobody wanted lately go back, every held rank is reported
    /// to its owner (repairing any lost message), and unanswered asks are forgotten.
    pub fn tick(&mut self, now: Timestamp) -> Vec<CreditOut> {
        self.asking
            .retain(|_, at| now.saturating_since(*at) < ASK_TIMEOUT);
        let settling = self.owner.settling(now);
        if settling < self.settling {
            // Ranks that refused asks while settling grant again: let the gates look.
            self.version += 1;
        }
        self.settling = settling;
        let idle = self
            .last_want
            .is_none_or(|at| now.saturating_since(at) >= SPARE_HOLD);
        let mut out = Vec::new();
        if idle {
            let spare: Vec<RankId> = self.holder.spares().map(|(r, _)| r).collect();
            for rank in spare {
                out.extend(self.give_back(rank, 0));
            }
        }
        let held: Vec<(RankId, RouterId)> = self
            .holder
            .held_ranks()
            .filter_map(|(rank, owner)| Some((rank, owner?)))
            .filter(|(_, owner)| *owner != self.me)
            .collect();
        for (rank, owner) in held {
            if let Some(report) = self.holder.report(rank) {
                out.extend(self.send_held(owner, report));
            }
        }
        out
    }

    pub fn snapshot(&self, now: Timestamp) -> CreditSnapshot {
        CreditSnapshot {
            members: self.members.iter().copied().collect(),
            held: self.holder.snapshot(),
            owned: self.owner.snapshot(now),
            asking: self.asking.len(),
            counters: self.counters.clone(),
        }
    }
}
