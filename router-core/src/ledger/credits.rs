//! Room credits in the ledger (see `crate::credits`): with credits on, the ledger counts
//! what this router's own bookings and reservations take on each rank (decode blocks, and in
//! an aggregated or prefill pool prompt tokens still in prefill), keeps the credits it holds
//! there, and bounds every class headroom by `held - own` (`rank.rs`) and every prefill
//! placement by the prefill credits left (`gate.rs`, selection).

use super::{Booking, BookingLedger};
use crate::credits::{CreditKey, CreditKind};
use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RankId, RouterId};

/// What one booking takes out of its owner's credits: every block whole.
pub(super) fn own_size(booking: &Booking) -> u64 {
    booking.block_hashes.len() as u64 + booking.extra_blocks
}

impl BookingLedger {
    /// Turns room credits on for `owner` (this router): from now on every rank's class
    /// headroom is also bounded by the credits held there less what `owner`'s own bookings
    /// and reservations take, and a rank starts with no credits. With `prefill`, prompt
    /// tokens are booked only out of prefill credits as well.
    pub fn enable_credits(&mut self, owner: RouterId, prefill: bool) {
        if self.credit_owner == Some(owner) && self.prefill_credits == prefill {
            return;
        }
        self.credit_owner = Some(owner);
        self.prefill_credits = prefill;
        let own: Vec<(usize, u64, u64)> = self
            .bookings
            .iter()
            .filter(|(k, _)| k.owner == owner)
            .map(|(_, h)| (h.slot, own_size(&h.booking), h.booking.prefill_tokens))
            .chain(
                self.reservations
                    .iter()
                    .filter(|(k, _)| k.owner == owner)
                    .map(|(_, (r, slot))| (*slot, r.blocks, 0)),
            )
            .collect();
        for slot in 0..self.slots.len() {
            if let Some(rank) = self.slots[slot].as_mut() {
                rank.credit_held = Some(0);
                rank.own_blocks = 0;
                rank.prefill_credit_held = prefill.then_some(0);
                rank.own_prefill = 0;
            }
        }
        for (slot, blocks, tokens) in own {
            let rank = self.rank_mut(slot);
            rank.own_blocks += blocks;
            rank.own_prefill += tokens;
        }
        for slot in 0..self.slots.len() {
            self.refresh(slot);
        }
        self.epoch += 1;
    }

    /// Turns room credits off again (a router alone in its pool): the lines alone bound the
    /// room, as without credits. True when credits were on (the room may have grown).
    pub fn disable_credits(&mut self) -> bool {
        if self.credit_owner.take().is_none() {
            return false;
        }
        self.prefill_credits = false;
        for slot in 0..self.slots.len() {
            if let Some(rank) = self.slots[slot].as_mut() {
                rank.credit_held = None;
                rank.own_blocks = 0;
                rank.prefill_credit_held = None;
                rank.own_prefill = 0;
            }
            self.refresh(slot);
        }
        self.epoch += 1;
        self.room_epoch += 1;
        true
    }

    pub fn credits_enabled(&self) -> bool {
        self.credit_owner.is_some()
    }

    /// Whether prompt tokens are booked out of prefill credits.
    pub fn prefill_credits_enabled(&self) -> bool {
        self.credit_owner.is_some() && self.prefill_credits
    }

    /// The credits this router now holds on `key` (credits on). Raises the room epoch
    /// when they grew.
    pub fn set_credit_held(&mut self, key: impl Into<CreditKey>, held: u64) {
        let key = key.into();
        if self.credit_owner.is_none() {
            return;
        }
        let Some(&slot) = self.by_rank.get(&key.rank) else {
            return;
        };
        let state = self.rank_mut(slot);
        let slot_held = match key.kind {
            CreditKind::Decode => &mut state.credit_held,
            CreditKind::Prefill if state.prefill_credit_held.is_some() => {
                &mut state.prefill_credit_held
            }
            CreditKind::Prefill => return,
        };
        let before = slot_held.unwrap_or(0);
        if *slot_held == Some(held) {
            return;
        }
        *slot_held = Some(held);
        self.refresh(slot);
        self.epoch += 1;
        if held > before {
            self.room_epoch += 1;
        }
    }

    /// Blocks this router's own bookings and reservations take on `rank` (credits on).
    pub fn own_blocks(&self, rank: RankId) -> u64 {
        self.own_use(CreditKey::decode(rank))
    }

    /// What this router's own requests take of `key`'s room: decode blocks, or prompt tokens
    /// still in prefill.
    pub fn own_use(&self, key: CreditKey) -> u64 {
        let Some(rank) = self.by_rank.get(&key.rank).and_then(|s| self.rank(*s)) else {
            return 0;
        };
        match key.kind {
            CreditKind::Decode => rank.own_blocks,
            CreditKind::Prefill => rank.own_prefill,
        }
    }

    /// One rank's prefill line for the class (`None`: the class has no prefill line) and the
    /// prompt tokens booked there (every router's). `None` for an unknown rank.
    pub fn rank_prefill_room(&self, class: ClassId, rank: RankId) -> Option<(Option<u64>, u64)> {
        let slot = *self.by_rank.get(&rank)?;
        let state = self.rank(slot)?;
        let line = state.lines.get(class.index())?.prefill_busy;
        Some(((line != u64::MAX).then_some(line), state.prefill_tokens))
    }

    /// Eligible ranks open for the class whatever this router's credits (not prefill-busy,
    /// decode room for `need` blocks under the line), with their booked prompt tokens:
    /// where an aggregated pool may ask for prefill and decode credits together.
    pub fn open_ranks_without_credits<'a>(
        &'a self,
        class: ClassId,
        need: u64,
        filter: &'a Eligibility,
    ) -> impl Iterator<Item = (RankId, u64)> + 'a {
        let c = class.index();
        let policy = self.classes.get(c);
        self.eligible_slots(filter)
            .filter_map(|slot| self.rank(slot))
            .filter(move |rank| {
                let Some(policy) = policy else {
                    return false;
                };
                let room = policy
                    .decode_room_line(rank.total_kv_blocks)
                    .is_none_or(|line| rank.committed_blocks().saturating_add(need) <= line);
                !rank.prefill_busy(c) && room
            })
            .map(|rank| (rank.id, rank.prefill_tokens))
    }

    /// Decode room may have grown elsewhere (credits given back to this router as owner):
    /// raise the room epoch so waiting gates look again.
    pub fn raise_room_epoch(&mut self) {
        self.room_epoch += 1;
        self.epoch += 1;
    }

    /// Prefill credits this router has spare on `rank` (`i64::MAX` with them off).
    pub fn prefill_credit_room(&self, rank: RankId) -> i64 {
        self.by_rank
            .get(&rank)
            .and_then(|s| self.rank(*s))
            .map_or(0, |r| r.prefill_credit_room())
    }
}
