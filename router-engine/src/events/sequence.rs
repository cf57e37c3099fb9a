//! Following an engine publisher's sequence numbers.
//!
//! The publisher numbers its batches 0, 1, 2, ... A subscriber that sees a number jump ahead
//! lost batches (ZMQ drops on a slow or reconnecting subscriber); one that sees the number go
//! back to 0 is listening to a restarted engine, whose cache started empty. Anything else that
//! goes backwards is a batch already seen (a replay overlapping the live stream): dropped.

use serde::Serialize;

/// What one received sequence number means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SeqStep {
    /// The first batch heard, or the next one in order: apply it.
    InOrder,
    /// Batches `from ..= to` were lost; this one follows them.
    Gap { from: u64, to: u64 },
    /// The engine restarted (its numbering began again at 0): what it held is gone.
    Restarted,
    /// Already seen: drop it.
    Duplicate,
}

/// The next sequence number expected from one publisher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqCheck {
    next: Option<u64>,
}

impl SeqCheck {
    /// The next number expected (none before the first batch).
    pub fn expected(&self) -> Option<u64> {
        self.next
    }

    /// Forgets the numbering (a new engine incarnation is expected).
    pub fn reset(&mut self) {
        self.next = None;
    }

    /// Classifies `seq` and moves the expectation past it when it is to be applied.
    pub fn observe(&mut self, seq: u64) -> SeqStep {
        let step = match self.next {
            None => SeqStep::InOrder,
            Some(next) if seq == next => SeqStep::InOrder,
            Some(next) if seq > next => SeqStep::Gap {
                from: next,
                to: seq - 1,
            },
            Some(_) if seq == 0 => SeqStep::Restarted,
            Some(_) => SeqStep::Duplicate,
        };
        if step != SeqStep::Duplicate {
            self.next = Some(seq.saturating_add(1));
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_gap_restart_and_duplicate() {
        let mut s = SeqCheck::default();
        assert_eq!(s.observe(5), SeqStep::InOrder);
        assert_eq!(s.observe(6), SeqStep::InOrder);
        assert_eq!(s.observe(9), SeqStep::Gap { from: 7, to: 8 });
        assert_eq!(s.observe(9), SeqStep::Duplicate);
        assert_eq!(s.observe(3), SeqStep::Duplicate);
        assert_eq!(s.expected(), Some(10));
        assert_eq!(s.observe(0), SeqStep::Restarted);
        assert_eq!(s.observe(1), SeqStep::InOrder);
    }
}
