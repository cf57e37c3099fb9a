//! What travels between router replicas about a ledger: one change to an owner's bookings
//! ([`BookingDelta`]) and reservations whose lease is given as time left
//! ([`LeasedReservation`]), since every node keeps its own clock. The actor layer puts these
//! in its wire envelopes unchanged; [`PoolRouter`](crate::PoolRouter) applies them.

use super::{Booking, Reservation};
use crate::ids::{RankId, RequestId};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Time left on a reservation's lease, in whole microseconds (its wire form).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseLeft(u64);

impl LeaseLeft {
    /// The lease left at `now` on a lease ending at `expires_at` (zero once it ended).
    pub fn until(expires_at: Timestamp, now: Timestamp) -> Self {
        Self(expires_at.0.saturating_sub(now.0))
    }

    pub fn from_duration(left: Duration) -> Self {
        Self(u64::try_from(left.as_micros()).unwrap_or(u64::MAX))
    }

    pub fn as_duration(self) -> Duration {
        Duration::from_micros(self.0)
    }

    /// The instant the lease ends, in the clock of the node that reads it at `now`.
    pub fn ends_at(self, now: Timestamp) -> Timestamp {
        now + self.as_duration()
    }
}

/// A reservation as another node sees it: the same room, with the lease as time left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedReservation {
    pub rank: RankId,
    pub blocks: u64,
    pub lease_left: LeaseLeft,
    /// The owner's reservation sequence (see [`Reservation::seq`]).
    pub seq: u64,
}

impl Reservation {
    /// This reservation for another node, at `now` in this node's clock.
    pub fn leased(&self, now: Timestamp) -> LeasedReservation {
        LeasedReservation {
            rank: self.rank,
            blocks: self.blocks,
            lease_left: LeaseLeft::until(self.expires_at, now),
            seq: self.seq,
        }
    }
}

impl LeasedReservation {
    /// The reservation in the clock of the node that receives it at `now`.
    pub fn at(&self, now: Timestamp) -> Reservation {
        Reservation {
            rank: self.rank,
            blocks: self.blocks,
            expires_at: self.lease_left.ends_at(now),
            seq: self.seq,
        }
    }
}

/// One change to a router's own bookings, keyed by its request (the owner is the sender).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BookingDelta {
    Book {
        request: RequestId,
        booking: Booking,
    },
    PrefillDone {
        request: RequestId,
    },
    Release {
        request: RequestId,
    },
    Reserve {
        request: RequestId,
        reservation: LeasedReservation,
    },
    Unreserve {
        request: RequestId,
    },
}

impl BookingDelta {
    pub fn request(&self) -> RequestId {
        match self {
            Self::Book { request, .. }
            | Self::PrefillDone { request }
            | Self::Release { request }
            | Self::Reserve { request, .. }
            | Self::Unreserve { request } => *request,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_crosses_clocks_as_time_left() {
        let held = Reservation {
            rank: RankId::new(1, 0),
            blocks: 8,
            expires_at: Timestamp(5_000_000),
            seq: 3,
        };
        // Sent at 1 s on the owner's clock: 4 s left; received at 10 s on another clock.
        let sent = held.leased(Timestamp(1_000_000));
        assert_eq!(sent.lease_left.as_duration(), Duration::from_secs(4));
        let there = sent.at(Timestamp(10_000_000));
        assert_eq!(there.expires_at, Timestamp(14_000_000));
        assert_eq!((there.rank, there.blocks, there.seq), (held.rank, 8, 3));
        // Past its end a lease has nothing left (never a wrap-around).
        assert_eq!(
            held.leased(Timestamp(9_000_000)).lease_left,
            LeaseLeft::default()
        );
    }
}
