//! Room credits in the ledger (see `crate::credits`): with credits on, the ledger counts
//! what this router's own bookings and reservations take on each rank, keeps the credits it
//! holds there, and bounds every class headroom by `held - own` (`rank.rs`).

use super::{Booking, BookingLedger};
use crate::ids::{RankId, RouterId};

/// What one booking takes out of its owner's credits: every block whole.
pub(super) fn own_size(booking: &Booking) -> u64 {
    booking.block_hashes.len() as u64 + booking.extra_blocks
}

impl BookingLedger {
    /// Turns room credits on for `owner` (this router): from now on every rank's class
    /// headroom is also bounded by the credits held there less what `owner`'s own bookings
    /// and reservations take, and a rank starts with no credits.
    pub fn enable_credits(&mut self, owner: RouterId) {
        if self.credit_owner == Some(owner) {
            return;
        }
        self.credit_owner = Some(owner);
        let own: Vec<(usize, u64)> = self
            .bookings
            .iter()
            .filter(|(k, _)| k.owner == owner)
            .map(|(_, h)| (h.slot, own_size(&h.booking)))
            .chain(
                self.reservations
                    .iter()
                    .filter(|(k, _)| k.owner == owner)
                    .map(|(_, (r, slot))| (*slot, r.blocks)),
            )
            .collect();
        for slot in 0..self.slots.len() {
            if let Some(rank) = self.slots[slot].as_mut() {
                rank.credit_held = Some(0);
                rank.own_blocks = 0;
            }
        }
        for (slot, blocks) in own {
            self.rank_mut(slot).own_blocks += blocks;
        }
        for slot in 0..self.slots.len() {
            self.refresh(slot);
        }
        self.epoch += 1;
    }

    pub fn credits_enabled(&self) -> bool {
        self.credit_owner.is_some()
    }

    /// The credits this router now holds on `rank` (credits on). Raises the room epoch
    /// when they grew.
    pub fn set_credit_held(&mut self, rank: RankId, held: u64) {
        if self.credit_owner.is_none() {
            return;
        }
        let Some(&slot) = self.by_rank.get(&rank) else {
            return;
        };
        let state = self.rank_mut(slot);
        let before = state.credit_held.unwrap_or(0);
        if state.credit_held == Some(held) {
            return;
        }
        state.credit_held = Some(held);
        self.refresh(slot);
        self.epoch += 1;
        if held > before {
            self.room_epoch += 1;
        }
    }

    /// Blocks this router's own bookings and reservations take on `rank` (credits on).
    pub fn own_blocks(&self, rank: RankId) -> u64 {
        self.by_rank
            .get(&rank)
            .and_then(|slot| self.rank(*slot))
            .map_or(0, |r| r.own_blocks)
    }

    /// Decode room may have grown elsewhere (credits given back to this router as owner):
    /// raise the room epoch so waiting gates look again.
    pub fn raise_room_epoch(&mut self) {
        self.room_epoch += 1;
        self.epoch += 1;
    }
}
