//! The booking ledger of one pool: what every router (this one and its peers) has booked
//! and reserved on every rank, kept incrementally so the admission gate never scans ranks.
//!
//! Operations are idempotent and keyed by (owner router, request): a peer's duplicate
//! delta is a no-op, a release of something unknown is a no-op. Decode load is the number
//! of unique blocks per rank (a shared prefix counts once). Pending-decode reservations
//! hold room for a request whose decode leg has not booked yet; booking the same key
//! converts the reservation. `room_epoch` rises whenever decode room may have grown, which
//! is what `RoomChanged` carries.
//!
//! A booking's prompt tokens and private blocks, and a reservation's blocks, are clamped to
//! [`MAX_BOOKED`] when they are taken (and counted as `clamped`): a peer's delta may carry any
//! `u64`, and the per-rank sums must never overflow. What is released is what was taken.

mod credits;
mod delta;
mod gate;
mod load_index;
mod owners;
mod rank;
mod reference;
mod snapshot;
mod tree;
mod workers;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

pub use delta::{BookingDelta, LeaseLeft, LeasedReservation};
pub use gate::{BestRoom, GateClosed, RoomAnswer};
pub use rank::{RankLoad, RankSnapshot};
pub use reference::ReferenceGate;
pub use snapshot::{LedgerCounters, LedgerSnapshot};

use crate::ids::{BookingKey, RankId, RouterId, WorkerId};
use crate::policy::{ClassPolicy, PolicyProfile, RejectThresholds};
use crate::time::Timestamp;
use crate::worker::WorkerSpec;
use credits::own_size;
use load_index::LoadIndex;
use rank::RankState;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use tree::MaxTree;
use workers::WorkerEntry;

/// The most prompt tokens, private blocks or reserved blocks one booking or reservation may
/// put on a rank (2^32: far above any engine's context or KV, far below where the per-rank
/// sums of `u64` could overflow).
pub const MAX_BOOKED: u64 = 1 << 32;

/// What a booking puts on a rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    pub rank: RankId,
    /// Sequence hashes of the prompt's blocks, shared with other bookings on the rank.
    pub block_hashes: Vec<u64>,
    /// Prompt tokens still to prefill; dropped at `mark_prefill_done`.
    pub prefill_tokens: u64,
    /// Blocks with no hash (expected output, or a prompt booked by size only).
    pub extra_blocks: u64,
}

/// Decode room held for a request between its prefill admission and its decode booking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub rank: RankId,
    pub blocks: u64,
    pub expires_at: Timestamp,
    /// Per-owner sequence, so the owner can tell when the ledger it reads has applied it.
    pub seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BookResult {
    Booked {
        converted_reservation: bool,
    },
    /// Same key already booked: nothing changed.
    AlreadyBooked,
    /// The rank is not in the pool (yet): nothing changed.
    UnknownRank,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReserveResult {
    Reserved,
    AlreadyReserved,
    /// The decode leg booked first: nothing to hold.
    AlreadyBooked,
    UnknownRank,
}

#[derive(Debug)]
struct Held {
    booking: Booking,
    slot: usize,
}

#[derive(Debug)]
pub struct BookingLedger {
    classes: Vec<ClassPolicy>,
    /// Classes whose gate can close: the only ones the `open` trees are kept for.
    gated: Vec<usize>,
    /// Classes with a decode fraction: the only ones the `room` trees are kept for.
    decode_gated: Vec<usize>,
    thresholds: RejectThresholds,
    slots: Vec<Option<RankState>>,
    free_slots: Vec<usize>,
    by_rank: FxHashMap<RankId, usize>,
    workers: FxHashMap<WorkerId, WorkerEntry>,
    bookings: FxHashMap<BookingKey, Held>,
    reservations: FxHashMap<BookingKey, (Reservation, usize)>,
    expiries: BTreeSet<(Timestamp, BookingKey)>,
    applied_seq: FxHashMap<RouterId, u64>,
    /// Room credits on: this router's own bookings and reservations are counted per rank
    /// against the credits it holds there (`crate::credits`).
    credit_owner: Option<RouterId>,
    /// Prefill credits on too (an aggregated pool): prompt tokens are booked out of them.
    prefill_credits: bool,
    /// Per class: a rank's headroom where it is eligible and not prefill-busy, else MIN.
    open: Vec<MaxTree<i64>>,
    /// Per class: a rank's headroom where it is eligible (prefill load ignored), else MIN.
    room: Vec<MaxTree<i64>>,
    busy_counts: Vec<u32>,
    eligible_ranks: u32,
    counted: Vec<bool>,
    room_epoch: u64,
    epoch: u64,
    counters: LedgerCounters,
    /// Placement indexes: ordered load of eligible ranks, holders of first blocks.
    load: LoadIndex,
}

impl BookingLedger {
    /// A ledger whose class gates check both fractions on its own ranks (an aggregated or
    /// a decode pool).
    pub fn new(profile: &PolicyProfile) -> Self {
        Self::with_classes(profile, profile.classes().to_vec())
    }

    /// A ledger for a prefill pool: class decode fractions do not apply to its ranks (they
    /// are checked on the paired decode pool instead).
    pub fn without_decode_lines(profile: &PolicyProfile) -> Self {
        let classes = profile
            .classes()
            .iter()
            .map(|c| ClassPolicy {
                decode_busy_threshold_frac: None,
                ..c.clone()
            })
            .collect();
        Self::with_classes(profile, classes)
    }

    fn with_classes(profile: &PolicyProfile, classes: Vec<ClassPolicy>) -> Self {
        let gated = classes
            .iter()
            .filter(|c| c.gated())
            .map(|c| c.id.index())
            .collect();
        let decode_gated = classes
            .iter()
            .filter(|c| c.has_decode_threshold())
            .map(|c| c.id.index())
            .collect();
        let n = classes.len();
        Self {
            classes,
            gated,
            decode_gated,
            thresholds: profile.reject_thresholds().clone(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            by_rank: FxHashMap::default(),
            workers: FxHashMap::default(),
            bookings: FxHashMap::default(),
            reservations: FxHashMap::default(),
            expiries: BTreeSet::new(),
            applied_seq: FxHashMap::default(),
            credit_owner: None,
            prefill_credits: false,
            open: (0..n).map(|_| MaxTree::new(1, i64::MIN)).collect(),
            room: (0..n).map(|_| MaxTree::new(1, i64::MIN)).collect(),
            busy_counts: vec![0; n],
            eligible_ranks: 0,
            counted: Vec::new(),
            room_epoch: 0,
            epoch: 0,
            counters: LedgerCounters::default(),
            load: LoadIndex::new(crate::select::SelectionConfig::default().prefill_load_scale),
        }
    }

    /// Raised whenever decode room may have grown (release, unreserve, expiry, capacity or
    /// membership change). `RoomChanged` carries it.
    pub fn room_epoch(&self) -> u64 {
        self.room_epoch
    }

    /// Raised on every change.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn counters(&self) -> &LedgerCounters {
        &self.counters
    }

    pub fn booking(&self, key: &BookingKey) -> Option<&Booking> {
        self.bookings.get(key).map(|h| &h.booking)
    }

    pub fn reservation(&self, key: &BookingKey) -> Option<&Reservation> {
        self.reservations.get(key).map(|(r, _)| r)
    }

    pub fn booking_count(&self) -> usize {
        self.bookings.len()
    }

    pub fn reservation_count(&self) -> usize {
        self.reservations.len()
    }

    /// Highest reservation sequence of `owner` applied here.
    pub fn applied_reserve_seq(&self, owner: RouterId) -> u64 {
        self.applied_seq.get(&owner).copied().unwrap_or(0)
    }

    /// Books a request on a rank. A reservation under the same key becomes this booking.
    pub fn book(&mut self, key: BookingKey, mut booking: Booking) -> BookResult {
        if booking.prefill_tokens > MAX_BOOKED || booking.extra_blocks > MAX_BOOKED {
            self.counters.clamped += 1;
            booking.prefill_tokens = booking.prefill_tokens.min(MAX_BOOKED);
            booking.extra_blocks = booking.extra_blocks.min(MAX_BOOKED);
        }
        if self.bookings.contains_key(&key) {
            self.counters.duplicate_books += 1;
            return BookResult::AlreadyBooked;
        }
        let Some(&slot) = self.by_rank.get(&booking.rank) else {
            self.counters.unknown_rank += 1;
            return BookResult::UnknownRank;
        };
        let converted = self.drop_reservation(&key).is_some();
        let own = self.credit_owner == Some(key.owner);
        let rank = self.rank_mut(slot);
        if own {
            rank.own_blocks += own_size(&booking);
            rank.own_prefill += booking.prefill_tokens;
        }
        rank.add_blocks(&booking.block_hashes);
        rank.prefill_tokens += booking.prefill_tokens;
        rank.private_blocks += booking.extra_blocks;
        rank.requests += 1;
        self.load.hold_first(&booking.block_hashes, slot);
        self.bookings.insert(key, Held { booking, slot });
        self.refresh(slot);
        self.epoch += 1;
        if converted {
            // The booking may need fewer blocks than were held (shared prefix).
            self.room_epoch += 1;
        }
        BookResult::Booked {
            converted_reservation: converted,
        }
    }

    /// Drops the prompt tokens of a booking whose first token arrived. Idempotent.
    pub fn mark_prefill_done(&mut self, key: &BookingKey) -> bool {
        let Some(held) = self.bookings.get_mut(key) else {
            return false;
        };
        let tokens = std::mem::take(&mut held.booking.prefill_tokens);
        if tokens == 0 {
            return false;
        }
        let slot = held.slot;
        let own = self.credit_owner == Some(key.owner);
        let rank = self.rank_mut(slot);
        rank.prefill_tokens -= tokens;
        if own {
            rank.own_prefill -= tokens;
        }
        self.refresh(slot);
        self.epoch += 1;
        true
    }

    /// Releases a booking, or a reservation that never became one. Idempotent.
    pub fn release(&mut self, key: &BookingKey) -> Option<RankId> {
        if let Some(held) = self.bookings.remove(key) {
            let slot = held.slot;
            let own = self.credit_owner == Some(key.owner);
            let rank = self.rank_mut(slot);
            if own {
                rank.own_blocks -= own_size(&held.booking);
                rank.own_prefill -= held.booking.prefill_tokens;
            }
            rank.remove_blocks(&held.booking.block_hashes);
            rank.prefill_tokens -= held.booking.prefill_tokens;
            rank.private_blocks -= held.booking.extra_blocks;
            rank.requests -= 1;
            self.load.drop_first(&held.booking.block_hashes, slot);
            self.refresh(slot);
            self.epoch += 1;
            self.room_epoch += 1;
            return Some(held.booking.rank);
        }
        self.unreserve(key)
    }

    /// Holds `blocks` of decode room on a rank until the decode leg books (converting it),
    /// the request fails (`unreserve`) or the lease runs out (`expire_reservations`).
    pub fn reserve(&mut self, key: BookingKey, mut reservation: Reservation) -> ReserveResult {
        if reservation.blocks > MAX_BOOKED {
            self.counters.clamped += 1;
            reservation.blocks = MAX_BOOKED;
        }
        let seen = self.applied_seq.entry(key.owner).or_insert(0);
        *seen = (*seen).max(reservation.seq);
        self.epoch += 1;
        if self.bookings.contains_key(&key) {
            return ReserveResult::AlreadyBooked;
        }
        if self.reservations.contains_key(&key) {
            return ReserveResult::AlreadyReserved;
        }
        let Some(&slot) = self.by_rank.get(&reservation.rank) else {
            self.counters.unknown_rank += 1;
            return ReserveResult::UnknownRank;
        };
        let own = self.credit_owner == Some(key.owner);
        let rank = self.rank_mut(slot);
        rank.reserved_blocks += reservation.blocks;
        if own {
            rank.own_blocks += reservation.blocks;
        }
        self.expiries.insert((reservation.expires_at, key));
        self.reservations.insert(key, (reservation, slot));
        self.refresh(slot);
        ReserveResult::Reserved
    }

    /// Gives back a reservation. Idempotent.
    pub fn unreserve(&mut self, key: &BookingKey) -> Option<RankId> {
        let rank = self.drop_reservation(key)?;
        self.epoch += 1;
        self.room_epoch += 1;
        Some(rank)
    }

    /// Drops every reservation whose lease ended at or before `now`.
    pub fn expire_reservations(&mut self, now: Timestamp) -> Vec<BookingKey> {
        let mut expired = Vec::new();
        while let Some(&(at, key)) = self.expiries.first() {
            if at > now {
                break;
            }
            self.drop_reservation(&key);
            expired.push(key);
        }
        if !expired.is_empty() {
            self.counters.expired_reservations += expired.len() as u64;
            self.epoch += 1;
            self.room_epoch += 1;
        }
        expired
    }

    /// When the next reservation lease ends, so an actor can arm one timer.
    pub fn next_reservation_expiry(&self) -> Option<Timestamp> {
        self.expiries.first().map(|(at, _)| *at)
    }

    fn drop_reservation(&mut self, key: &BookingKey) -> Option<RankId> {
        let (res, slot) = self.reservations.remove(key)?;
        self.expiries.remove(&(res.expires_at, *key));
        let own = self.credit_owner == Some(key.owner);
        let rank = self.rank_mut(slot);
        rank.reserved_blocks -= res.blocks;
        if own {
            rank.own_blocks -= res.blocks;
        }
        self.refresh(slot);
        Some(res.rank)
    }

    fn rank_mut(&mut self, slot: usize) -> &mut RankState {
        match self.slots[slot].as_mut() {
            Some(rank) => rank,
            None => unreachable!("slot {slot} is referenced by a booking but empty"),
        }
    }

    fn rank(&self, slot: usize) -> Option<&RankState> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    /// Recomputes one rank's router-wide overload state, then its gate indexes (and those
    /// of its worker's other ranks when the worker's overload flips).
    fn refresh(&mut self, slot: usize) {
        let Some(rank) = self.slots[slot].as_mut() else {
            return;
        };
        let over = rank.over_thresholds(&self.thresholds);
        if over != rank.over {
            rank.over = over;
            let worker = rank.id.worker;
            if let Some(entry) = self.workers.get_mut(&worker) {
                let before = entry.overloaded();
                if over {
                    entry.over_ranks += 1;
                } else {
                    entry.over_ranks -= 1;
                }
                if before != entry.overloaded() {
                    let slots = entry.slots.clone();
                    for s in slots {
                        self.reindex(s);
                    }
                    return;
                }
            }
        }
        self.reindex(slot);
    }

    /// Puts one rank's current state into the per-class trees and busy counts.
    fn reindex(&mut self, slot: usize) {
        self.uncount(slot);
        let Self {
            slots,
            workers,
            gated,
            decode_gated,
            open,
            room,
            busy_counts,
            eligible_ranks,
            counted,
            load,
            ..
        } = self;
        let Some(rank) = slots[slot].as_mut() else {
            for tree in open.iter_mut().chain(room.iter_mut()) {
                tree.set(slot, i64::MIN);
            }
            load.update(slot, None);
            return;
        };
        let eligible = !workers
            .get(&rank.id.worker)
            .is_some_and(WorkerEntry::overloaded);
        for &c in gated.iter() {
            let busy = rank.prefill_busy(c);
            rank.busy[c] = busy;
            open[c].set(
                slot,
                if eligible && !busy {
                    rank.headroom(c)
                } else {
                    i64::MIN
                },
            );
            if eligible && busy {
                busy_counts[c] += 1;
            }
        }
        for &c in decode_gated.iter() {
            room[c].set(slot, if eligible { rank.headroom(c) } else { i64::MIN });
        }
        if eligible {
            *eligible_ranks += 1;
        }
        counted[slot] = eligible;
        load.update(slot, eligible.then_some(&*rank));
    }

    /// Takes a rank out of the eligible and busy counts (before recounting or removal).
    fn uncount(&mut self, slot: usize) {
        if !std::mem::take(&mut self.counted[slot]) {
            return;
        }
        self.eligible_ranks -= 1;
        if let Some(rank) = self.slots[slot].as_ref() {
            for &c in &self.gated {
                if rank.busy[c] {
                    self.busy_counts[c] -= 1;
                }
            }
        }
    }
}
