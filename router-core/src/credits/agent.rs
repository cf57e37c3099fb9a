//! One replica's room-credit agent for one pool: the holder and owner sides together with
//! the membership that decides who owns which rank. The router actor feeds it events
//! (membership, ranks, wants from a gate, own bookings and reservations, messages from
//! peers, ticks) and sends the [`CreditOut`] messages it returns; messages to itself never
//! leave it.

use super::owner_of;
use super::{Ask, CreditHolder, CreditKey, CreditKind, CreditOwner, GrantDecision};
use super::{CreditCounters, CreditMsg, CreditOut, CreditSnapshot, HeldReport};
use crate::admission::RoomWant;
use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RankId, RouterId};
use crate::ledger::BookingLedger;
use crate::time::Timestamp;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use std::time::Duration;

/// An ask without an answer is asked again after this long.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(500);
/// Spare credits nobody asked for within this long go back to their owner.
pub const SPARE_HOLD: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct CreditAgent {
    me: RouterId,
    members: BTreeSet<RouterId>,
    /// Ever had a peer: a rank taken while alone is settled at once only before that.
    had_peers: bool,
    ranks: BTreeSet<RankId>,
    holder: CreditHolder,
    owner: CreditOwner,
    asking: FxHashMap<CreditKey, Timestamp>,
    last_want: Option<Timestamp>,
    /// Owned ranks settling at the last tick (a settle that ended is a room signal: asks
    /// were denied meanwhile).
    settling: usize,
    /// Rises when room this replica can use may have grown (a grant, credits given back to
    /// it as owner): a room signal for the prefill gate.
    version: u64,
    /// This replica's bus is up. While it is down, messages to peers are lost: credits from
    /// other owners are kept when own requests end instead of given back (their owners still
    /// count them, so they are a safe local share) and nothing is asked of other owners.
    connected: bool,
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
            connected: true,
            counters: CreditCounters::default(),
        }
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether this replica's bus is up (see the `connected` field).
    pub fn set_connected(&mut self, connected: bool) {
        self.connected = connected;
    }

    /// Credits on `key` may go back now: always to this replica as owner, to another owner
    /// only while the bus carries the report.
    fn may_give_back(&self, key: CreditKey) -> bool {
        self.connected || self.holder.owner(key) == Some(self.me)
    }

    /// Credits held on `key` that no own request uses.
    pub fn spare(&self, key: impl Into<CreditKey>) -> u64 {
        self.holder.spare(key)
    }

    pub fn spares(&self) -> impl Iterator<Item = (CreditKey, u64)> + '_ {
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
            self.asking.retain(|key, _| key.rank != *gone);
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
        let mut out = Vec::new();
        for kind in CreditKind::ALL {
            let key = CreditKey { rank, kind };
            self.asking.remove(&key);
            if let Some(report) = self.holder.set_owner(key, owner) {
                out.extend(self.send_held(owner, report));
            }
        }
        out
    }

    /// A gate has a request of `want.class` waiting for room: decode room, or (with
    /// `prefill_need`) prefill room, with decode room on the same rank where the ledger has
    /// decode lines (an aggregated pool; a prefill pool's ledger has none).
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
        let Some(prefill_need) = want.prefill_need else {
            let need = i64::try_from(want.need).unwrap_or(i64::MAX);
            return match ledger.best_room_without_credits(want.class, &filter) {
                Some((rank, room)) if room >= need => {
                    self.ask(CreditKey::decode(rank), want.class, want.need, ledger, now)
                }
                // The pool itself is full as far as this replica can see: wait for room.
                _ => Vec::new(),
            };
        };
        // Both credits on one rank: the least prefill-loaded open rank, preferring one this
        // replica already holds credits on (so they do not scatter over the pool).
        let holder = &self.holder;
        let Some(rank) = ledger
            .open_ranks_without_credits(want.class, want.need, &filter)
            .min_by_key(|(rank, prefill)| {
                let spare = holder.spare(CreditKey::prefill(*rank))
                    + holder.spare(CreditKey::decode(*rank));
                (spare == 0, *prefill, *rank)
            })
            .map(|(rank, _)| rank)
        else {
            // No rank is open as far as this replica can see: wait for room.
            return Vec::new();
        };
        let mut out = self.ask(
            CreditKey::prefill(rank),
            want.class,
            prefill_need,
            ledger,
            now,
        );
        if matches!(
            ledger.rank_decode_room(want.class, rank),
            Some((Some(_), _))
        ) {
            out.extend(self.ask(CreditKey::decode(rank), want.class, want.need, ledger, now));
        }
        out
    }

    /// Asks `key`'s owner for what spare credits there do not cover of `need` (granting
    /// at once when this replica owns the rank).
    fn ask(
        &mut self,
        key: CreditKey,
        class: ClassId,
        need: u64,
        ledger: &BookingLedger,
        now: Timestamp,
    ) -> Vec<CreditOut> {
        self.holder.set_used(key, ledger.own_use(key));
        let spare = self.holder.spare(key);
        let missing = need.saturating_sub(spare);
        let ask = Ask {
            need: missing,
            using: spare.min(need),
        };
        if missing == 0 {
            return Vec::new();
        }
        if self
            .asking
            .get(&key)
            .is_some_and(|at| now.saturating_since(*at) < ASK_TIMEOUT)
        {
            return Vec::new();
        }
        let Some(owner) = self.holder.owner(key) else {
            return Vec::new();
        };
        if owner != self.me && !self.connected {
            // The ask would be lost: make do with the credits held.
            return Vec::new();
        }
        if owner == self.me {
            if let GrantDecision::Granted { blocks, seq } =
                self.decide(key, self.me, class, ask, ledger, now)
                && let Some(ack) = self.holder.granted(self.me, key, blocks, seq)
            {
                self.owner.held(self.me, ack);
                self.counters.local_grants += 1;
                self.version += 1;
            }
            return Vec::new();
        }
        self.asking.insert(key, now);
        self.counters.asks_sent += 1;
        vec![CreditOut {
            to: owner,
            msg: CreditMsg::Ask {
                rank: key.rank,
                class,
                need: missing,
                kind: key.kind,
                using: ask.using,
            },
        }]
    }

    /// The owner's decision on an ask, under the class's line on the rank.
    fn decide(
        &mut self,
        key: CreditKey,
        holder: RouterId,
        class: ClassId,
        ask: Ask,
        ledger: &BookingLedger,
        now: Timestamp,
    ) -> GrantDecision {
        let room = match key.kind {
            CreditKind::Decode => ledger.rank_decode_room(class, key.rank),
            CreditKind::Prefill => ledger.rank_prefill_room(class, key.rank),
        };
        match room {
            Some((Some(line), committed)) => {
                let members = self.members.len();
                self.owner.grant_ask(
                    key.rank, key.kind, holder, ask, line, committed, members, now,
                )
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
            CreditMsg::Ask {
                rank,
                class,
                need,
                kind,
                using,
            } => {
                let key = CreditKey { rank, kind };
                let ask = Ask { need, using };
                let answer = match self.decide(key, from, class, ask, ledger, now) {
                    GrantDecision::Granted { blocks, seq } => {
                        self.counters.grants_given += 1;
                        CreditMsg::Grant {
                            rank,
                            blocks,
                            seq,
                            kind,
                        }
                    }
                    _ => {
                        self.counters.denials_given += 1;
                        CreditMsg::Deny { rank, kind }
                    }
                };
                vec![CreditOut {
                    to: from,
                    msg: answer,
                }]
            }
            CreditMsg::Grant {
                rank,
                blocks,
                seq,
                kind,
            } => {
                let key = CreditKey { rank, kind };
                self.asking.remove(&key);
                let Some(ack) = self.holder.granted(from, key, blocks, seq) else {
                    return Vec::new();
                };
                self.counters.grants_received += 1;
                self.version += 1;
                vec![CreditOut {
                    to: from,
                    msg: CreditMsg::Held(ack),
                }]
            }
            CreditMsg::Deny { rank, kind } => {
                self.asking.remove(&CreditKey { rank, kind });
                self.counters.denials_received += 1;
                Vec::new()
            }
            CreditMsg::Held(report) => {
                let before = self.owner.outstanding(report.rank, report.kind);
                self.owner.held(from, report);
                if self.owner.outstanding(report.rank, report.kind) < before {
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
        let keys: Vec<CreditKey> = self.holder.ranks().collect();
        let mut out = Vec::new();
        for key in keys {
            let spare_before = self.holder.spare(key);
            if self.holder.set_used(key, ledger.own_use(key)) > 0 && self.may_give_back(key) {
                out.extend(self.give_back(key, spare_before));
            }
        }
        out
    }

    /// When the agent needs a tick: the end of the next settle period.
    pub fn next_deadline(&self, now: Timestamp) -> Option<Timestamp> {
        self.owner.next_settled(now)
    }

    /// Every rank's held credits (for a ledger built afresh).
    pub fn all_held(&self) -> Vec<(CreditKey, u64)> {
        self.holder
            .held_ranks()
            .map(|(key, _)| (key, self.holder.held(key)))
            .collect()
    }

    /// Ranks whose held credits changed since the last call, with what is held now (for
    /// the ledger, whose headroom they bound).
    pub fn take_held_changes(&mut self) -> Vec<(CreditKey, u64)> {
        self.holder.take_changes()
    }

    /// Gives back spare credits on `key` beyond `keep`.
    fn give_back(&mut self, key: CreditKey, keep: u64) -> Vec<CreditOut> {
        let before = self.holder.held(key);
        let Some(report) = self.holder.give_back(key, keep) else {
            return Vec::new();
        };
        if key.kind == CreditKind::Decode {
            self.counters.blocks_given_back += before.saturating_sub(report.held);
        } else {
            self.counters.tokens_given_back += before.saturating_sub(report.held);
        }
        match self.holder.owner(key) {
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
            let spare: Vec<CreditKey> = self
                .holder
                .spares()
                .map(|(k, _)| k)
                .filter(|k| self.may_give_back(*k))
                .collect();
            for key in spare {
                out.extend(self.give_back(key, 0));
            }
        }
        if !self.connected {
            // Reports would be lost; the first tick after the bus is back sends them.
            return out;
        }
        let held: Vec<(CreditKey, RouterId)> = self
            .holder
            .held_ranks()
            .filter_map(|(rank, owner)| Some((rank, owner?)))
            .filter(|(_, owner)| *owner != self.me)
            .collect();
        for (key, owner) in held {
            if let Some(report) = self.holder.report(key) {
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
