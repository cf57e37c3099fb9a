//! The paired-pool room view: how a prefill scheduler reads the decode pool's room without
//! sending it a message, counts its own reservations that the decode side has not applied
//! yet, and asks the decode side at most once per class per gate pass.

use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RankId, RouterId};
use crate::ledger::{BestRoom, BookingLedger};
use crate::time::Timestamp;

/// Read access to a decode pool's room. The decode ledger implements it directly (same
/// thread); the actor layer publishes a lock-free snapshot that implements it too.
pub trait DecodeRoomView {
    /// Raised whenever decode room may have grown.
    fn room_epoch(&self) -> u64;
    /// Highest reservation sequence of `owner` the view has applied.
    fn applied_reserve_seq(&self, owner: RouterId) -> u64;
    /// The eligible decode rank with the most room under the class line, after counting
    /// `pending` extra blocks on the ranks named.
    fn best_room(
        &self,
        class: ClassId,
        filter: &Eligibility,
        pending: &[(RankId, u64)],
    ) -> BestRoom;
}

impl DecodeRoomView for BookingLedger {
    fn room_epoch(&self) -> u64 {
        BookingLedger::room_epoch(self)
    }

    fn applied_reserve_seq(&self, owner: RouterId) -> u64 {
        BookingLedger::applied_reserve_seq(self, owner)
    }

    fn best_room(
        &self,
        class: ClassId,
        filter: &Eligibility,
        pending: &[(RankId, u64)],
    ) -> BestRoom {
        self.best_decode_room(class, filter, pending)
    }
}

/// Reservations this scheduler handed out that the decode view may not show yet.
#[derive(Debug, Default)]
pub(crate) struct InflightReservations {
    next_seq: u64,
    entries: Vec<Inflight>,
}

#[derive(Debug, Clone, Copy)]
struct Inflight {
    rank: RankId,
    blocks: u64,
    seq: u64,
    expires_at: Timestamp,
}

impl InflightReservations {
    pub(crate) fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    pub(crate) fn push(&mut self, rank: RankId, blocks: u64, seq: u64, expires_at: Timestamp) {
        self.entries.push(Inflight {
            rank,
            blocks,
            seq,
            expires_at,
        });
    }

    /// Forgets what the view has applied (or what has expired anyway) and returns the rest
    /// as (rank, blocks) for the room query.
    pub(crate) fn unseen(&mut self, applied: u64, now: Timestamp) -> Vec<(RankId, u64)> {
        self.entries
            .retain(|e| e.seq > applied && e.expires_at > now);
        self.entries.iter().map(|e| (e.rank, e.blocks)).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Decode-room answers of one gate pass, per class, for requests without filters. Valid
/// until this pass takes a reservation (which changes the room every class sees).
#[derive(Debug, Default)]
pub(crate) struct PassCache {
    answers: Vec<Option<BestRoom>>,
}

impl PassCache {
    pub(crate) fn clear(&mut self) {
        self.answers.iter_mut().for_each(|a| *a = None);
    }

    pub(crate) fn get(&self, class: ClassId) -> Option<BestRoom> {
        self.answers.get(class.index()).copied().flatten()
    }

    pub(crate) fn put(&mut self, class: ClassId, answer: BestRoom) {
        if self.answers.len() <= class.index() {
            self.answers.resize(class.index() + 1, None);
        }
        self.answers[class.index()] = Some(answer);
    }
}
