//! What other routers did, applied to this pool's ledger, and the room this node's own
//! prefill pool holds on it: pure operations that the actor carries out as messages arrive,
//! each answering whether capacity may have grown (so the actor knows when to drain).

use super::PoolRouter;
use crate::admission::DecodeReservation;
use crate::ids::{BookingKey, RequestId, RouterId};
use crate::ledger::{Booking, BookingDelta, LeasedReservation, Reservation, ReserveResult};
use crate::time::Timestamp;

/// What a change from elsewhere did to the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Nothing changed (an own echo, a duplicate, an unknown request).
    Nothing,
    /// Load was added; no capacity freed.
    Added,
    /// Capacity may have grown: queued requests should be offered again.
    Freed,
}

impl Applied {
    pub fn freed(self) -> bool {
        self == Applied::Freed
    }

    fn freed_if(yes: bool) -> Self {
        if yes {
            Applied::Freed
        } else {
            Applied::Nothing
        }
    }
}

/// One owner's holdings in a ledger, sorted by request (leases as time left).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    pub bookings: Vec<(RequestId, Booking)>,
    pub reservations: Vec<(RequestId, LeasedReservation)>,
}

impl PoolRouter {
    /// Applies a peer's delta under its owner id (`now`: when it arrives, for its lease).
    pub fn apply_peer(&mut self, owner: RouterId, delta: BookingDelta, now: Timestamp) -> Applied {
        if owner == self.scheduler.owner() {
            return Applied::Nothing; // our own echo
        }
        let ledger = self.scheduler.ledger_mut();
        match delta {
            BookingDelta::Book { request, booking } => {
                ledger.book(BookingKey::new(owner, request), booking);
                Applied::Added // a peer's booking never frees capacity
            }
            BookingDelta::PrefillDone { request } => {
                Applied::freed_if(ledger.mark_prefill_done(&BookingKey::new(owner, request)))
            }
            BookingDelta::Release { request } => {
                Applied::freed_if(ledger.release(&BookingKey::new(owner, request)).is_some())
            }
            BookingDelta::Reserve {
                request,
                reservation,
            } => {
                ledger.reserve(BookingKey::new(owner, request), reservation.at(now));
                Applied::Added
            }
            BookingDelta::Unreserve { request } => {
                Applied::freed_if(ledger.unreserve(&BookingKey::new(owner, request)).is_some())
            }
        }
    }

    /// Replaces everything held under a peer's id by its full state (snapshot repair).
    pub fn replace_peer(&mut self, owner: RouterId, state: Holdings, now: Timestamp) -> Applied {
        if owner == self.scheduler.owner() {
            return Applied::Nothing;
        }
        let ledger = self.scheduler.ledger_mut();
        ledger.release_owner(owner);
        for (request, booking) in state.bookings {
            ledger.book(BookingKey::new(owner, request), booking);
        }
        for (request, reservation) in state.reservations {
            ledger.reserve(BookingKey::new(owner, request), reservation.at(now));
        }
        Applied::Freed
    }

    /// A peer stopped heart-beating: everything it held goes.
    pub fn peer_gone(&mut self, owner: RouterId) -> Applied {
        let own = owner == self.scheduler.owner();
        Applied::freed_if(!own && self.scheduler.ledger_mut().release_owner(owner) > 0)
    }

    /// Decode pool: holds room for this node's prefill admission. Returns the delta peers
    /// must see when the room was taken (a duplicate or an unknown rank takes none).
    pub fn hold_reservation(
        &mut self,
        res: DecodeReservation,
        now: Timestamp,
    ) -> Option<BookingDelta> {
        let hold = Reservation {
            rank: res.rank,
            blocks: res.blocks,
            expires_at: res.expires_at,
            seq: res.seq,
        };
        let ledger = self.scheduler.ledger_mut();
        (ledger.reserve(res.key, hold) == ReserveResult::Reserved).then(|| BookingDelta::Reserve {
            request: res.key.request,
            reservation: hold.leased(now),
        })
    }

    /// Decode pool: gives back the room held for `request` (its prefill leg failed or was
    /// cancelled). Returns the delta peers must see when there was one.
    pub fn release_reservation(&mut self, request: RequestId) -> Option<BookingDelta> {
        let key = self.scheduler.key(request);
        self.scheduler
            .ledger_mut()
            .unreserve(&key)
            .map(|_| BookingDelta::Unreserve { request })
    }

    /// Books this router's own in-flight requests again (a restarted router), each with a
    /// lease from `now`; returns those whose rank is not known yet, to book once their worker
    /// is back.
    pub fn restore(
        &mut self,
        bookings: Vec<(RequestId, Booking)>,
        now: Timestamp,
    ) -> Vec<(RequestId, Booking)> {
        let owner = self.scheduler.owner();
        let mut pending = Vec::new();
        for (request, booking) in bookings {
            let ledger = self.scheduler.ledger_mut();
            if ledger.has_rank(booking.rank) {
                ledger.book(BookingKey::new(owner, request), booking);
                self.leases.grant(request, now);
            } else {
                pending.push((request, booking));
            }
        }
        pending
    }

    /// What the ledger holds under `owner` (this router's or a peer's), at `now`.
    pub fn holdings(&self, owner: RouterId, now: Timestamp) -> Holdings {
        let ledger = self.ledger();
        let mut bookings: Vec<(RequestId, Booking)> = ledger
            .keys_of(owner)
            .map(|(k, b)| (k.request, b.clone()))
            .collect();
        bookings.sort_by_key(|(r, _)| *r);
        let mut reservations: Vec<(RequestId, LeasedReservation)> = ledger
            .reservations_of(owner)
            .map(|(k, r)| (k.request, r.leased(now)))
            .collect();
        reservations.sort_by_key(|(r, _)| *r);
        Holdings {
            bookings,
            reservations,
        }
    }
}
