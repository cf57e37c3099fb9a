//! Gate queries over the incremental per-class indexes: "some eligible rank is not
//! prefill-busy for the class and has decode room for N blocks", the busy counts behind the
//! busy-ratio rule, and the best decode rank with room (the paired-pool check and the
//! reservation target). Unfiltered queries read a tree root; filtered ones (allow-list,
//! LoRA, pin) walk only the ranks they allow.

use super::BookingLedger;
use super::rank::{RankLoad, saturating_i64};
use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RankId};
use crate::policy::{ClassPolicy, Fraction};
use serde::{Deserialize, Serialize};

/// Why a class must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateClosed {
    /// Every eligible rank (or the busy-ratio share of them) is prefill-busy for the class.
    PrefillBusy,
    /// No eligible rank has decode room for the request under the class fraction.
    DecodeFull,
}

/// The answer of a decode-room check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RoomAnswer {
    /// This rank has the most room left under the class line, and enough for the need.
    Room { rank: RankId, headroom: i64 },
    /// No rank is eligible at all: the gate stays open so selection can say why.
    NoRanks,
    /// Eligible ranks exist but none has room.
    Full,
}

/// The best decode room over eligible ranks, before comparing with a need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BestRoom {
    NoRanks,
    Best { rank: RankId, headroom: i64 },
}

/// `busy >= ratio × eligible`, in integers.
pub(crate) fn ratio_reached(busy: u64, eligible: u64, ratio: Fraction) -> bool {
    u128::from(busy) * 1_000_000 >= u128::from(eligible) * u128::from(ratio.floor_of(1_000_000))
}

impl BookingLedger {
    pub fn class_policy(&self, class: ClassId) -> &ClassPolicy {
        &self.classes[class.index()]
    }

    /// The class gate on this pool's own ranks for a request needing `need` decode blocks
    /// and `prefill_need` prompt tokens (counted only against prefill credits, when on).
    /// Open when no rank is eligible at all (selection then reports the precise error).
    pub fn class_gate(
        &self,
        class: ClassId,
        need: u64,
        prefill_need: u64,
        filter: &Eligibility,
    ) -> Result<(), GateClosed> {
        let c = class.index();
        let policy = &self.classes[c];
        if !policy.gated() {
            return Ok(());
        }
        if !filter.is_unfiltered() || self.prefill_credits_enabled() {
            // Prefill credits depend on the need: scan rather than read the busy index.
            return self.class_gate_filtered(c, need, prefill_need, filter);
        }
        let eligible = u64::from(self.eligible_ranks);
        if eligible == 0 {
            return Ok(());
        }
        let need_i = saturating_i64(need);
        match policy.busy_worker_ratio {
            Some(ratio) => {
                if ratio_reached(u64::from(self.busy_counts[c]), eligible, ratio) {
                    return Err(GateClosed::PrefillBusy);
                }
                if policy.has_decode_threshold() && self.room[c].max() < need_i {
                    return Err(GateClosed::DecodeFull);
                }
                Ok(())
            }
            None if self.open[c].max() >= need_i => Ok(()),
            None if u64::from(self.busy_counts[c]) == eligible => Err(GateClosed::PrefillBusy),
            None => Err(GateClosed::DecodeFull),
        }
    }

    fn class_gate_filtered(
        &self,
        c: usize,
        need: u64,
        prefill_need: u64,
        filter: &Eligibility,
    ) -> Result<(), GateClosed> {
        let policy = &self.classes[c];
        let (mut eligible, mut busy, mut open, mut room) = (0u64, 0u64, false, false);
        for slot in self.eligible_slots(filter) {
            let Some(rank) = self.rank(slot) else {
                continue;
            };
            eligible += 1;
            // Busy for this router: above the line, or (prefill credits on) not covered.
            let is_busy = rank.prefill_busy(c) || !rank.prefill_covers(c, prefill_need);
            let has_room = rank.has_room(c, need);
            busy += u64::from(is_busy);
            open |= !is_busy && has_room;
            room |= has_room;
        }
        if eligible == 0 {
            return Ok(());
        }
        match policy.busy_worker_ratio {
            Some(ratio) if ratio_reached(busy, eligible, ratio) => Err(GateClosed::PrefillBusy),
            Some(_) if !room => Err(GateClosed::DecodeFull),
            Some(_) => Ok(()),
            None if open => Ok(()),
            None if busy == eligible => Err(GateClosed::PrefillBusy),
            None => Err(GateClosed::DecodeFull),
        }
    }

    /// (prefill-busy ranks for the class, eligible ranks), over ranks of workers that are
    /// not overloaded.
    pub fn busy_ranks(&self, class: ClassId) -> (u32, u32) {
        (self.busy_counts[class.index()], self.eligible_ranks)
    }

    /// The eligible rank with the most decode room left under the class line, when it can
    /// take `need` more blocks. `pending` lists blocks already promised on ranks that this
    /// ledger does not show yet (a reader's own in-flight reservations). Ranks of
    /// overloaded workers never count. A class without a decode fraction has room on every
    /// eligible rank.
    pub fn decode_room(
        &self,
        class: ClassId,
        need: u64,
        filter: &Eligibility,
        pending: &[(RankId, u64)],
    ) -> RoomAnswer {
        match self.best_decode_room(class, filter, pending) {
            BestRoom::NoRanks => RoomAnswer::NoRanks,
            BestRoom::Best { rank, headroom } if headroom >= saturating_i64(need) => {
                RoomAnswer::Room { rank, headroom }
            }
            BestRoom::Best { .. } => RoomAnswer::Full,
        }
    }

    /// The eligible rank with the most room under the class line, ignoring room credits:
    /// where asking for credits can help. `None` when no eligible rank has a line.
    pub fn best_room_without_credits(
        &self,
        class: ClassId,
        filter: &Eligibility,
    ) -> Option<(RankId, i64)> {
        let c = class.index();
        let policy = self.classes.get(c)?;
        self.eligible_slots(filter)
            .filter_map(|slot| {
                let rank = self.rank(slot)?;
                let line = policy.decode_room_line(rank.total_kv_blocks)?;
                Some((
                    saturating_i64(line) - saturating_i64(rank.committed_blocks()),
                    rank.id,
                ))
            })
            .max()
            .map(|(room, rank)| (rank, room))
    }

    /// One rank's decode line for the class (`None`: the class has no line there) and the
    /// blocks committed on it (booked and reserved, every router's). `None` for an unknown
    /// rank.
    pub fn rank_decode_room(&self, class: ClassId, rank: RankId) -> Option<(Option<u64>, u64)> {
        let slot = *self.by_rank.get(&rank)?;
        let state = self.rank(slot)?;
        let line = self
            .classes
            .get(class.index())?
            .decode_room_line(state.total_kv_blocks);
        Some((line, state.committed_blocks()))
    }

    /// The eligible rank with the most decode room left under the class line (after
    /// `pending`), whatever the need: callers that check several needs against one answer
    /// (a gate pass) ask once.
    pub fn best_decode_room(
        &self,
        class: ClassId,
        filter: &Eligibility,
        pending: &[(RankId, u64)],
    ) -> BestRoom {
        let c = class.index();
        let pending_on = |rank: RankId| -> i64 {
            pending
                .iter()
                .filter(|(r, _)| *r == rank)
                .map(|(_, b)| saturating_i64(*b))
                .sum()
        };
        let best = if filter.is_unfiltered() && self.classes[c].has_decode_threshold() {
            if self.eligible_ranks == 0 {
                return BestRoom::NoRanks;
            }
            let mut pending_slots: Vec<usize> = pending
                .iter()
                .filter_map(|(r, _)| self.by_rank.get(r).copied())
                .collect();
            pending_slots.sort_unstable();
            pending_slots.dedup();
            let untouched = self.room[c].max_excluding(&pending_slots);
            let touched = pending_slots.iter().filter_map(|&s| {
                let rank = self.rank(s)?;
                let value = self.room[c].get(s);
                (value > i64::MIN).then(|| (value.saturating_sub(pending_on(rank.id)), s))
            });
            untouched.into_iter().chain(touched).fold(None, pick_best)
        } else {
            let mut any = false;
            let best = self
                .eligible_slots(filter)
                .filter_map(|s| {
                    let rank = self.rank(s)?;
                    any = true;
                    Some((rank.headroom(c).saturating_sub(pending_on(rank.id)), s))
                })
                .fold(None, pick_best);
            if !any {
                return BestRoom::NoRanks;
            }
            best
        };
        match best.and_then(|(headroom, slot)| Some((headroom, self.rank(slot)?.id))) {
            Some((headroom, rank)) => BestRoom::Best { rank, headroom },
            None => BestRoom::NoRanks,
        }
    }

    /// Slots a filtered request may use, without ranks of overloaded workers. A pin wins
    /// over the LoRA narrowing; a narrowing that leaves nothing falls back to the allowed
    /// set.
    pub(crate) fn eligible_slots<'a>(
        &'a self,
        filter: &'a Eligibility,
    ) -> impl Iterator<Item = usize> + 'a {
        let pinned = filter.pinned.and_then(|rank| {
            (filter.allows_worker(rank.worker) && !self.worker_is_overloaded(rank.worker))
                .then(|| self.by_rank.get(&rank).copied())
                .flatten()
        });
        let lora_served = filter.lora.as_deref().is_some_and(|lora| {
            self.workers
                .values()
                .any(|w| filter.allows_worker(w.spec.id) && w.spec.serves_lora(lora))
        });
        let unpinned = filter.pinned.is_none();
        let workers = self.workers.values().filter(move |w| {
            unpinned
                && filter.allows_worker(w.spec.id)
                && !w.overloaded()
                && (!lora_served
                    || filter
                        .lora
                        .as_deref()
                        .is_some_and(|l| w.spec.serves_lora(l)))
        });
        pinned
            .into_iter()
            .chain(workers.flat_map(|w| w.slots.iter().copied()))
    }
}

/// Keeps the larger headroom, the lower slot on ties.
fn pick_best(best: Option<(i64, usize)>, next: (i64, usize)) -> Option<(i64, usize)> {
    match best {
        Some(b) if b.0 > next.0 || (b.0 == next.0 && b.1 < next.1) => Some(b),
        _ => Some(next),
    }
}

impl BookingLedger {
    /// Ranks a request may use (overloaded workers excluded), with their load.
    pub fn eligible_ranks<'a>(
        &'a self,
        filter: &'a Eligibility,
    ) -> impl Iterator<Item = RankLoad<'a>> + 'a {
        self.eligible_slots(filter)
            .filter_map(|s| self.rank(s))
            .map(RankLoad::of)
    }

    /// One rank's load, if the rank is in the pool.
    pub fn rank_load(&self, rank: RankId) -> Option<RankLoad<'_>> {
        self.by_rank
            .get(&rank)
            .and_then(|s| self.rank(*s))
            .map(RankLoad::of)
    }

    /// Whether the filter would allow some rank if no worker were overloaded: tells "all
    /// eligible workers are overloaded" apart from "no worker can serve this".
    pub fn any_rank_ignoring_overload(&self, filter: &Eligibility) -> bool {
        match filter.pinned {
            Some(rank) => filter.allows_worker(rank.worker) && self.by_rank.contains_key(&rank),
            None => self
                .workers
                .values()
                .any(|w| filter.allows_worker(w.spec.id) && !w.slots.is_empty()),
        }
    }
}

impl BookingLedger {
    /// Up to `k` eligible ranks with the most decode room for the class, best first (ties
    /// by slot). What a published room snapshot carries so readers on other threads can
    /// answer `best_decode_room` without the ledger: exact as long as a reader's own
    /// unapplied reservations touch fewer than `k` ranks.
    pub fn top_decode_rooms(
        &self,
        class: ClassId,
        filter: &Eligibility,
        k: usize,
    ) -> Vec<(RankId, i64)> {
        let c = class.index();
        if filter.is_unfiltered() && self.classes[c].has_decode_threshold() {
            let mut excluded: Vec<usize> = Vec::with_capacity(k);
            let mut out = Vec::with_capacity(k);
            while out.len() < k {
                let Some((headroom, slot)) = self.room[c].max_excluding(&excluded) else {
                    break;
                };
                let Some(rank) = self.rank(slot) else { break };
                out.push((rank.id, headroom));
                let at = excluded.partition_point(|&s| s < slot);
                excluded.insert(at, slot);
            }
            return out;
        }
        let mut all: Vec<(i64, usize, RankId)> = self
            .eligible_slots(filter)
            .filter_map(|s| self.rank(s).map(|r| (r.headroom(c), s, r.id)))
            .collect();
        all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        all.into_iter().take(k).map(|(h, _, id)| (id, h)).collect()
    }

    /// Adapters served by at least one worker of the pool.
    pub fn served_loras(&self) -> Vec<String> {
        let mut loras: Vec<String> = self
            .workers
            .values()
            .flat_map(|w| w.spec.loras.iter().cloned())
            .collect();
        loras.sort();
        loras.dedup();
        loras
    }
}
