//! Booking leases: every booking this router makes (admitted, or restored after a restart)
//! holds a lease of one fixed term from the time it was booked. The frontend releases a
//! booking long before its lease ends (a request never outlives its deadline), so a lease that
//! runs out marks a booking nobody will release: a lost release or a path that forgot its
//! guard. [`super::PoolRouter::expire_leases`] releases those, so no leak outlives the term.
//!
//! Only this router's own bookings are leased: a peer's are its own to expire (its release
//! comes as a delta), and everything a peer held goes when it stops heart-beating.

use crate::ids::RequestId;
use crate::time::Timestamp;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use std::time::Duration;

/// The leases of one router's own bookings.
#[derive(Debug, Default)]
pub(super) struct Leases {
    /// How long a booking may live; `None`: bookings are never leased.
    term: Option<Duration>,
    ends: BTreeSet<(Timestamp, RequestId)>,
    by_request: FxHashMap<RequestId, Timestamp>,
}

impl Leases {
    pub(super) fn new(term: Option<Duration>) -> Self {
        Self {
            term: term.filter(|t| !t.is_zero()),
            ..Self::default()
        }
    }

    /// `request` was booked at `now`: its lease runs one term from now (a booking booked
    /// again, as after a restart, starts a new term).
    pub(super) fn grant(&mut self, request: RequestId, now: Timestamp) {
        let Some(term) = self.term else {
            return;
        };
        self.end(request);
        let until = now + term;
        self.ends.insert((until, request));
        self.by_request.insert(request, until);
    }

    /// The booking of `request` ended: its lease goes with it.
    pub(super) fn end(&mut self, request: RequestId) {
        if let Some(until) = self.by_request.remove(&request) {
            self.ends.remove(&(until, request));
        }
    }

    /// Takes the requests whose lease ended at or before `now`.
    pub(super) fn take_due(&mut self, now: Timestamp) -> Vec<RequestId> {
        let mut due = Vec::new();
        while let Some(&(until, request)) = self.ends.first() {
            if until > now {
                break;
            }
            self.ends.remove(&(until, request));
            self.by_request.remove(&request);
            due.push(request);
        }
        due
    }

    /// When the next lease ends, so an actor can arm one timer.
    pub(super) fn next_end(&self) -> Option<Timestamp> {
        self.ends.first().map(|(until, _)| *until)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_request.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERM: Duration = Duration::from_secs(60);

    #[test]
    fn a_lease_ends_one_term_after_its_booking_and_an_ended_booking_holds_none() {
        let mut leases = Leases::new(Some(TERM));
        let (a, b) = (RequestId::from_u128(1), RequestId::from_u128(2));
        leases.grant(a, Timestamp::from_millis(0));
        leases.grant(b, Timestamp::from_millis(10));
        assert_eq!(leases.next_end(), Some(Timestamp::from_millis(60_000)));
        leases.end(a);
        assert_eq!(leases.take_due(Timestamp::from_millis(60_009)), vec![]);
        assert_eq!(leases.take_due(Timestamp::from_millis(60_010)), vec![b]);
        assert_eq!(leases.len(), 0);
        assert_eq!(leases.next_end(), None);
    }

    #[test]
    fn booking_again_starts_a_new_term_and_no_term_leases_nothing() {
        let mut leases = Leases::new(Some(TERM));
        let a = RequestId::from_u128(1);
        leases.grant(a, Timestamp::from_millis(0));
        leases.grant(a, Timestamp::from_millis(30_000));
        assert_eq!(leases.take_due(Timestamp::from_millis(60_000)), vec![]);
        assert_eq!(leases.take_due(Timestamp::from_millis(90_000)), vec![a]);
        for term in [None, Some(Duration::ZERO)] {
            let mut none = Leases::new(term);
            none.grant(a, Timestamp::ZERO);
            assert_eq!(none.next_end(), None);
            assert_eq!(none.take_due(Timestamp(u64::MAX)), vec![]);
        }
    }
}
