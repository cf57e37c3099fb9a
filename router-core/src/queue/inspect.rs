//! Read-only views of the class queues: sizes, credit, heads, ordered iteration, the
//! earliest deadline (for an actor's expiry timer) and a serialisable snapshot. Nothing
//! here changes state.

use super::{ClassQueues, class_id, saturate};
use crate::ids::ClassId;
use crate::queue::{ClassSnapshot, QueueClassSpec, QueueSnapshot, QueueTicket, QueuedRef};
use crate::time::Timestamp;

impl<T> ClassQueues<T> {
    /// Earliest deadline over all class heads: when the next expiry can happen.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.classes
            .iter()
            .filter_map(|q| q.entries.first_key_value().map(|(k, _)| k.0))
            .min()
    }

    /// Entries queued over all classes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sum of raw prompt tokens queued over all classes (saturating).
    pub fn tokens(&self) -> u64 {
        saturate(self.tokens)
    }

    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    pub fn spec(&self, class: ClassId) -> Option<&QueueClassSpec> {
        self.classes.get(class.index()).map(|q| &q.spec)
    }

    /// Entries queued in `class` (0 for an unknown class).
    pub fn class_len(&self, class: ClassId) -> usize {
        self.classes
            .get(class.index())
            .map_or(0, |q| q.entries.len())
    }

    /// Raw prompt tokens queued in `class` (saturating; 0 for an unknown class).
    pub fn class_tokens(&self, class: ClassId) -> u64 {
        self.classes
            .get(class.index())
            .map_or(0, |q| saturate(q.tokens))
    }

    /// Whether `class` holds anything: a new arrival must queue behind it.
    pub fn has_backlog(&self, class: ClassId) -> bool {
        self.class_len(class) > 0
    }

    /// Payload that `class` would dispatch next.
    pub fn head(&self, class: ClassId) -> Option<&T> {
        self.classes
            .get(class.index())?
            .entries
            .first_key_value()
            .map(|(_, e)| &e.payload)
    }

    /// DRR credit currently held by `class`.
    pub fn deficit(&self, class: ClassId) -> u64 {
        self.drr.deficit(class.index())
    }

    /// Entries of `class` in dispatch order (deadline, then enqueue order).
    pub fn iter_class(&self, class: ClassId) -> impl Iterator<Item = QueuedRef<'_, T>> + '_ {
        self.classes.get(class.index()).into_iter().flat_map(|q| {
            q.entries.iter().map(|(&(deadline, seq), e)| QueuedRef {
                ticket: QueueTicket(seq),
                arrival: e.arrival,
                deadline,
                cost: e.cost,
                raw_tokens: e.raw_tokens,
                payload: &e.payload,
            })
        })
    }

    pub fn snapshot(&self) -> QueueSnapshot {
        let classes = self
            .classes
            .iter()
            .enumerate()
            .map(|(c, q)| {
                let head = q.entries.first_key_value();
                ClassSnapshot {
                    class: class_id(c),
                    len: q.entries.len(),
                    tokens: saturate(q.tokens),
                    deficit: self.drr.deficit(c),
                    quantum: q.spec.quantum,
                    oldest_arrival: head.map(|(_, e)| e.arrival),
                    head_deadline: head.map(|(k, _)| k.0),
                }
            })
            .collect();
        QueueSnapshot {
            len: self.len,
            tokens: self.tokens(),
            cursor: self.drr.cursor(),
            carry: self.drr.carry().map(class_id),
            classes,
        }
    }
}
