//! Applying what other routers did: their deltas under their owner id, a full snapshot
//! replacing everything held under it, and dropping a silent peer. A decode pool also takes
//! reservations from the node's own prefill pool here.

use super::state::RouterState;
use crate::wire::BookingDelta;
use router_core::ledger::{Booking, Reservation};
use router_core::{BookingKey, DecodeReservation, RequestId, RouterId, Timestamp};

impl RouterState {
    pub(super) fn apply_peer(&mut self, owner: RouterId, delta: BookingDelta) {
        if owner == self.owner() {
            return; // our own echo
        }
        let now = self.clock().now();
        let ledger = self.router.scheduler_mut().ledger_mut();
        let grew = match delta {
            BookingDelta::Book { request, booking } => {
                ledger.book(BookingKey::new(owner, request), booking);
                false // a peer's booking never frees capacity
            }
            BookingDelta::PrefillDone { request } => {
                ledger.mark_prefill_done(&BookingKey::new(owner, request))
            }
            BookingDelta::Release { request } => {
                ledger.release(&BookingKey::new(owner, request)).is_some()
            }
            BookingDelta::Reserve {
                request,
                reservation,
            } => {
                let reservation = lease_from_wire(reservation, now);
                ledger.reserve(BookingKey::new(owner, request), reservation);
                false
            }
            BookingDelta::Unreserve { request } => {
                ledger.unreserve(&BookingKey::new(owner, request)).is_some()
            }
        };
        if grew {
            self.drain();
        }
    }

    pub(super) fn replace_peer(
        &mut self,
        owner: RouterId,
        bookings: Vec<(RequestId, Booking)>,
        reservations: Vec<(RequestId, Reservation)>,
    ) {
        if owner == self.owner() {
            return;
        }
        let ledger = self.router.scheduler_mut().ledger_mut();
        ledger.release_owner(owner);
        for (request, booking) in bookings {
            ledger.book(BookingKey::new(owner, request), booking);
        }
        let now = self.clock().now();
        let ledger = self.router.scheduler_mut().ledger_mut();
        for (request, reservation) in reservations {
            ledger.reserve(
                BookingKey::new(owner, request),
                lease_from_wire(reservation, now),
            );
        }
        self.drain();
    }

    pub(super) fn peer_gone(&mut self, owner: RouterId) {
        if owner != self.owner()
            && self
                .router
                .scheduler_mut()
                .ledger_mut()
                .release_owner(owner)
                > 0
        {
            self.drain();
        }
    }

    /// Decode pool: hold room for the node's prefill admission, and tell peers.
    pub(super) fn reserve(&mut self, res: DecodeReservation) {
        let hold = Reservation {
            rank: res.rank,
            blocks: res.blocks,
            expires_at: res.expires_at,
            seq: res.seq,
        };
        let ledger = self.router.scheduler_mut().ledger_mut();
        if ledger.reserve(res.key, hold) == router_core::ledger::ReserveResult::Reserved {
            let reservation = lease_to_wire(hold, self.clock().now());
            self.emit(BookingDelta::Reserve {
                request: res.key.request,
                reservation,
            });
        }
    }

    pub(super) fn unreserve(&mut self, request: RequestId) {
        let key = self.router.scheduler().key(request);
        if self
            .router
            .scheduler_mut()
            .ledger_mut()
            .unreserve(&key)
            .is_some()
        {
            self.emit(BookingDelta::Unreserve { request });
            self.drain();
        }
    }
}

/// On the wire a reservation's `expires_at` is the lease time left (µs), not an instant:
/// every node keeps its own clock.
pub(super) fn lease_to_wire(mut reservation: Reservation, now: Timestamp) -> Reservation {
    reservation.expires_at = Timestamp(reservation.expires_at.0.saturating_sub(now.0));
    reservation
}

/// A peer's reservation in this node's clock.
pub(super) fn lease_from_wire(mut reservation: Reservation, now: Timestamp) -> Reservation {
    reservation.expires_at = now + std::time::Duration::from_micros(reservation.expires_at.0);
    reservation
}
