//! Per-sender sequence tracking on a subject: detects gaps (lost messages), duplicates and
//! reordering so the receiver can count them and repair by snapshot.

use std::collections::HashMap;
use uuid::Uuid;

/// What one received sequence number means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqEvent {
    /// The first message seen from this sender.
    First,
    /// The next one in order.
    InOrder,
    /// `missed` messages were skipped before this one.
    Gap { missed: u64 },
    /// Already seen (or older than the last one): drop it.
    Stale,
}

#[derive(Debug, Default)]
pub struct SeqTracker {
    last: HashMap<Uuid, u64>,
}

impl SeqTracker {
    pub fn observe(&mut self, sender: Uuid, seq: u64) -> SeqEvent {
        match self.last.get_mut(&sender) {
            None => {
                self.last.insert(sender, seq);
                SeqEvent::First
            }
            Some(last) if seq <= *last => SeqEvent::Stale,
            Some(last) => {
                let missed = seq - *last - 1;
                *last = seq;
                if missed == 0 {
                    SeqEvent::InOrder
                } else {
                    SeqEvent::Gap { missed }
                }
            }
        }
    }

    /// After a snapshot reflecting `seq`, continue from there.
    pub fn reset(&mut self, sender: Uuid, seq: u64) {
        self.last.insert(sender, seq);
    }

    /// The last sequence accepted from `sender`.
    pub fn last(&self, sender: Uuid) -> Option<u64> {
        self.last.get(&sender).copied()
    }

    pub fn forget(&mut self, sender: Uuid) {
        self.last.remove(&sender);
    }
}
