//! What the ledger shows to `Observe`, metrics and tests: per-rank load, totals, epochs
//! and counters of anomalies (duplicates, unknown ranks, expired reservations).

use super::BookingLedger;
use super::rank::RankSnapshot;
use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LedgerCounters {
    /// A booking under a key already booked (a duplicated peer delta): ignored.
    pub duplicate_books: u64,
    /// A booking or reservation on a rank the pool does not know: ignored.
    pub unknown_rank: u64,
    pub expired_reservations: u64,
    /// Bookings or reservations whose numbers were cut to `MAX_BOOKED` (a peer's nonsense).
    pub clamped: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerSnapshot {
    pub ranks: Vec<RankSnapshot>,
    pub bookings: usize,
    pub reservations: usize,
    pub epoch: u64,
    pub room_epoch: u64,
    pub counters: LedgerCounters,
    /// Room credits bound this ledger (a replica with peers; see `crate::credits`).
    pub room_credits: bool,
}

impl LedgerSnapshot {
    /// True when nothing is booked or reserved anywhere and every counter of load is zero.
    pub fn is_idle(&self) -> bool {
        self.bookings == 0
            && self.reservations == 0
            && self.ranks.iter().all(|r| {
                r.prefill_tokens == 0
                    && r.decode_blocks == 0
                    && r.reserved_blocks == 0
                    && r.requests == 0
            })
    }
}

impl BookingLedger {
    /// Ranks in (worker, dp rank) order.
    pub fn snapshot(&self) -> LedgerSnapshot {
        let mut ranks: Vec<RankSnapshot> = self
            .slots
            .iter()
            .flatten()
            .map(|r| r.snapshot(self.worker_is_overloaded(r.id.worker)))
            .collect();
        ranks.sort_by_key(|r| r.rank);
        LedgerSnapshot {
            ranks,
            bookings: self.bookings.len(),
            reservations: self.reservations.len(),
            epoch: self.epoch,
            room_epoch: self.room_epoch,
            counters: self.counters.clone(),
            room_credits: self.credit_owner.is_some(),
        }
    }

    /// One rank's load, if the rank is in the pool.
    pub fn rank_snapshot(&self, rank: crate::ids::RankId) -> Option<RankSnapshot> {
        let slot = *self.by_rank.get(&rank)?;
        self.rank(slot)
            .map(|r| r.snapshot(self.worker_is_overloaded(r.id.worker)))
    }
}
