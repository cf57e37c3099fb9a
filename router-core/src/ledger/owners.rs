//! What one owner (a router) holds in the ledger: its bookings and reservations listed for
//! digests and snapshots, and all of them released at once (a peer that died, a router
//! rebuilding its own state).

use super::{Booking, BookingLedger, Reservation};
use crate::ids::{BookingKey, RouterId};

impl BookingLedger {
    /// Releases every booking and reservation `owner` holds (a peer that died or a router
    /// rebuilding its own state). Returns how many were dropped.
    pub fn release_owner(&mut self, owner: RouterId) -> usize {
        let booked: Vec<BookingKey> = self
            .bookings
            .keys()
            .filter(|k| k.owner == owner)
            .copied()
            .collect();
        let reserved: Vec<BookingKey> = self
            .reservations
            .keys()
            .filter(|k| k.owner == owner)
            .copied()
            .collect();
        for key in booked.iter().chain(&reserved) {
            self.release(key);
        }
        self.applied_seq.remove(&owner);
        booked.len() + reserved.len()
    }

    /// Every live booking key of `owner` (for digests and snapshots).
    /// Every live reservation of `owner`.
    pub fn reservations_of(
        &self,
        owner: RouterId,
    ) -> impl Iterator<Item = (&BookingKey, &Reservation)> {
        self.reservations
            .iter()
            .filter(move |(k, _)| k.owner == owner)
            .map(|(k, (r, _))| (k, r))
    }

    pub fn keys_of(&self, owner: RouterId) -> impl Iterator<Item = (&BookingKey, &Booking)> {
        self.bookings
            .iter()
            .filter(move |(k, _)| k.owner == owner)
            .map(|(k, h)| (k, &h.booking))
    }
}
