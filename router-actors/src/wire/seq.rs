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
                // `seq > last` here, so this never underflows; a peer's numbers are never
                // incremented past u64::MAX anywhere (saturating).
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

    /// Keeps only the senders `keep` says: state of senders that are no one's peer (one
    /// refused or gone without a goodbye) does not pile up.
    pub fn retain(&mut self, mut keep: impl FnMut(Uuid) -> bool) {
        self.last.retain(|sender, _| keep(*sender));
    }

    /// Senders tracked.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever numbers a peer sends (u64::MAX included), tracking never panics, never
        /// accepts one twice, and a gap counts exactly the numbers skipped.
        #[test]
        fn any_sequence_numbers_are_tracked_without_overflow(
            seqs in prop::collection::vec(
                (0u8..3, prop_oneof![any::<u64>(), Just(u64::MAX), Just(0u64), 0u64..8]),
                0..64,
            ),
        ) {
            let mut tracker = SeqTracker::default();
            let mut last: HashMap<u8, u64> = HashMap::new();
            for (sender, seq) in seqs {
                let id = Uuid::from_u128(u128::from(sender) + 1);
                let event = tracker.observe(id, seq);
                match last.get(&sender).copied() {
                    None => prop_assert_eq!(event, SeqEvent::First),
                    Some(prev) if seq <= prev => prop_assert_eq!(event, SeqEvent::Stale),
                    Some(prev) if seq == prev + 1 => prop_assert_eq!(event, SeqEvent::InOrder),
                    Some(prev) => prop_assert_eq!(event, SeqEvent::Gap { missed: seq - prev - 1 }),
                }
                if event != SeqEvent::Stale {
                    last.insert(sender, seq);
                }
            }
            tracker.retain(|_| false);
            prop_assert!(tracker.is_empty());
        }
    }
}
