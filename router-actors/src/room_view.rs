//! The decode pool's room, published lock-free for the prefill actor of the same node.
//!
//! After every change to its ledger the decode actor stores a fresh [`RoomSnapshot`] (the
//! best ranks per class, per adapter, its room epoch and the reservation sequences it has
//! applied) in an `ArcSwap`; the prefill actor loads it without a message or a lock. The
//! snapshot answers `DecodeRoomView` exactly while a reader's own unapplied reservations
//! touch fewer than [`TOP_RANKS`] ranks, and conservatively (less room) beyond that.
//!
//! `RoomChanged` travels separately: a `watch` channel (coalescing, never blocks the decode
//! actor) for the node's own prefill actor, and the `router.decode.room` subject for the others.

use arc_swap::ArcSwap;
use router_core::ledger::{BestRoom, BookingLedger};
use router_core::{ClassId, DecodeRoomView, Eligibility, RankId, RouterId};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;

/// Ranks kept per class (and per adapter) in a snapshot.
pub const TOP_RANKS: usize = 32;

#[derive(Debug, Clone, Default, Serialize)]
pub struct RoomSnapshot {
    pub room_epoch: u64,
    pub ledger_epoch: u64,
    applied: HashMap<RouterId, u64>,
    /// Per class index: best ranks by headroom (empty when no rank is eligible).
    classes: Vec<Vec<(RankId, i64)>>,
    /// Per served adapter, per class index.
    by_lora: HashMap<String, Vec<Vec<(RankId, i64)>>>,
}

impl RoomSnapshot {
    /// Reads what readers need from a decode ledger. `owners` are the routers whose
    /// reservation sequences readers ask about (this node, at least).
    pub fn capture(ledger: &BookingLedger, classes: usize, owners: &[RouterId]) -> Self {
        let tops = |filter: &Eligibility| {
            (0..classes)
                .map(|c| ledger.top_decode_rooms(ClassId(c as u16), filter, TOP_RANKS))
                .collect::<Vec<_>>()
        };
        Self {
            room_epoch: ledger.room_epoch(),
            ledger_epoch: ledger.epoch(),
            applied: owners
                .iter()
                .map(|o| (*o, ledger.applied_reserve_seq(*o)))
                .collect(),
            classes: tops(&Eligibility::ANY),
            by_lora: ledger
                .served_loras()
                .into_iter()
                .map(|l| {
                    let t = tops(&Eligibility::lora(l.clone()));
                    (l, t)
                })
                .collect(),
        }
    }
}

impl DecodeRoomView for RoomSnapshot {
    fn room_epoch(&self) -> u64 {
        self.room_epoch
    }

    fn applied_reserve_seq(&self, owner: RouterId) -> u64 {
        self.applied.get(&owner).copied().unwrap_or(0)
    }

    fn best_room(
        &self,
        class: ClassId,
        filter: &Eligibility,
        pending: &[(RankId, u64)],
    ) -> BestRoom {
        let lists = filter
            .lora
            .as_deref()
            .and_then(|l| self.by_lora.get(l))
            .unwrap_or(&self.classes);
        let Some(list) = lists.get(class.index()) else {
            return BestRoom::NoRanks;
        };
        let promised = |rank: RankId| -> i64 {
            pending
                .iter()
                .filter(|(r, _)| *r == rank)
                .map(|(_, b)| i64::try_from(*b).unwrap_or(i64::MAX))
                .sum()
        };
        list.iter()
            .map(|&(rank, headroom)| (headroom.saturating_sub(promised(rank)), rank))
            .fold(None, |best: Option<(i64, RankId)>, next| match best {
                Some(b) if b.0 >= next.0 => Some(b),
                _ => Some(next),
            })
            .map_or(BestRoom::NoRanks, |(headroom, rank)| BestRoom::Best {
                rank,
                headroom,
            })
    }
}

/// The decode actor's side: stores snapshots and raises the in-process room signal.
#[derive(Debug, Clone)]
pub struct RoomPublisher {
    view: Arc<ArcSwap<RoomSnapshot>>,
    signal: watch::Sender<u64>,
}

/// The prefill actor's side: loads the latest snapshot and waits for room signals.
#[derive(Debug, Clone)]
pub struct RoomReader {
    view: Arc<ArcSwap<RoomSnapshot>>,
    signal: watch::Receiver<u64>,
}

/// A publisher and a reader sharing one view.
pub fn room_channel() -> (RoomPublisher, RoomReader) {
    let view = Arc::new(ArcSwap::from_pointee(RoomSnapshot::default()));
    let (tx, rx) = watch::channel(0);
    (
        RoomPublisher {
            view: Arc::clone(&view),
            signal: tx,
        },
        RoomReader { view, signal: rx },
    )
}

impl RoomPublisher {
    /// Stores a snapshot; signals when the room epoch rose (room may have grown).
    pub fn publish(&self, snapshot: RoomSnapshot) -> bool {
        let grew = snapshot.room_epoch > self.view.load().room_epoch;
        let epoch = snapshot.room_epoch;
        self.view.store(Arc::new(snapshot));
        if grew {
            self.signal.send_replace(epoch);
        }
        grew
    }
}

impl RoomReader {
    pub fn load(&self) -> Arc<RoomSnapshot> {
        self.view.load_full()
    }

    /// A receiver of room epochs (coalescing: a slow reader sees the latest).
    pub fn signals(&self) -> watch::Receiver<u64> {
        self.signal.clone()
    }
}
