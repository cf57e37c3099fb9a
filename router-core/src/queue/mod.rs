//! Per-class admission queues: where requests wait for a worker with room.
//!
//! Each policy class has one queue ordered earliest-deadline-first (ties in enqueue order,
//! so a class with one SLO is FIFO). Admission checks the deadline and the class's
//! per-worker limits; dispatch arbitrates across classes by deficit round robin (see
//! `drr.rs`) and never hands out an entry at or past its deadline: such entries are shed and
//! returned as [`Expired`]. The queues are pure data: time and worker counts come in as
//! arguments, and whether a head may be dispatched now is the caller's predicate.
//!
//! Credit follows classic DRR: a class that becomes empty, whether by dispatch, expiry or
//! removal, drops its credit (expiry and removal never *charge* credit, and never move the
//! ring cursor). Tickets are numbered from a 64-bit sequence that never wraps in practice.

mod drr;
mod inspect;
mod types;

#[cfg(test)]
mod admission_tests;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

pub use types::{
    ClassSnapshot, Dequeued, EnqueueRefusal, EnqueueRejection, Expired, ExpiryStage, LimitKind,
    Pop, QueueClassSpec, QueueConfigError, QueueSnapshot, QueueTicket, QueuedRef,
};

use crate::ids::ClassId;
use crate::time::Timestamp;
use drr::{Drr, HeadState};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Order inside a class: (deadline, enqueue sequence = ticket number).
type Key = (Timestamp, u64);

#[derive(Debug, Clone)]
struct Entry<T> {
    payload: T,
    arrival: Timestamp,
    cost: u64,
    raw_tokens: u64,
}

#[derive(Debug, Clone)]
struct ClassQueue<T> {
    spec: QueueClassSpec,
    entries: BTreeMap<Key, Entry<T>>,
    /// Sum of `raw_tokens` of `entries` (u128: cannot overflow).
    tokens: u128,
}

/// The admission queues of every class, generic over the queued payload.
#[derive(Debug, Clone)]
pub struct ClassQueues<T> {
    classes: Vec<ClassQueue<T>>,
    /// Ticket → (class index, deadline): finds an entry's key for removal in O(log n).
    index: FxHashMap<u64, (usize, Timestamp)>,
    drr: Drr,
    next_seq: u64,
    len: usize,
    tokens: u128,
}

fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

impl<T> ClassQueues<T> {
    /// One queue per spec; `specs[i]` configures `ClassId(i)`.
    pub fn new(specs: Vec<QueueClassSpec>) -> Result<Self, QueueConfigError> {
        let max = usize::from(u16::MAX) + 1;
        if specs.len() > max {
            return Err(QueueConfigError::TooManyClasses {
                count: specs.len(),
                max,
            });
        }
        if let Some(i) = specs.iter().position(|s| s.quantum == 0) {
            let class = ClassId(u16::try_from(i).unwrap_or(u16::MAX));
            return Err(QueueConfigError::ZeroQuantum { class });
        }
        let drr = Drr::new(specs.iter().map(|s| s.quantum).collect());
        let classes = specs
            .into_iter()
            .map(|spec| ClassQueue {
                spec,
                entries: BTreeMap::new(),
                tokens: 0,
            })
            .collect();
        Ok(Self {
            classes,
            index: FxHashMap::default(),
            drr,
            next_seq: 0,
            len: 0,
            tokens: 0,
        })
    }

    /// Stores a request unless it is already late or its class is at a limit.
    ///
    /// Its deadline is `arrival + slo`, fixed now. Limits are `per_worker × worker_count`
    /// (saturating) and are compared with the usage *before* this request, so the request
    /// that crosses a cap is accepted and the next one refused; with zero workers every
    /// configured limit is 0 and refuses. `cost_tokens` (the DRR cost) is raised to 1.
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue(
        &mut self,
        class: ClassId,
        payload: T,
        cost_tokens: u64,
        raw_tokens: u64,
        arrival: Timestamp,
        now: Timestamp,
        worker_count: usize,
    ) -> Result<QueueTicket, EnqueueRejection<T>> {
        let classes = self.classes.len();
        let Some(queue) = self.classes.get_mut(class.index()) else {
            let reason = EnqueueRefusal::UnknownClass { class, classes };
            return Err(EnqueueRejection {
                class,
                payload,
                reason,
            });
        };
        let deadline = arrival + queue.spec.slo;
        if now >= deadline {
            let overdue = now.saturating_since(deadline);
            let reason = EnqueueRefusal::Expired {
                stage: ExpiryStage::Admission,
                overdue,
            };
            return Err(EnqueueRejection {
                class,
                payload,
                reason,
            });
        }
        let workers = u64::try_from(worker_count).unwrap_or(u64::MAX);
        let limits = [
            (
                LimitKind::Requests,
                queue.spec.request_limit_per_worker,
                queue.entries.len() as u128,
            ),
            (
                LimitKind::Tokens,
                queue.spec.token_limit_per_worker,
                queue.tokens,
            ),
        ];
        for (kind, per_worker, current) in limits {
            let Some(per_worker) = per_worker else {
                continue;
            };
            let limit = per_worker.saturating_mul(workers);
            if current >= u128::from(limit) {
                let reason = EnqueueRefusal::LimitReached {
                    kind,
                    current: saturate(current),
                    limit,
                };
                return Err(EnqueueRejection {
                    class,
                    payload,
                    reason,
                });
            }
        }

        let seq = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        let cost = cost_tokens.max(1);
        queue.entries.insert(
            (deadline, seq),
            Entry {
                payload,
                arrival,
                cost,
                raw_tokens,
            },
        );
        queue.tokens += u128::from(raw_tokens);
        self.index.insert(seq, (class.index(), deadline));
        self.len += 1;
        self.tokens += u128::from(raw_tokens);
        self.debug_check();
        Ok(QueueTicket(seq))
    }

    /// Sheds every expired entry (`deadline <= now`), then picks at most one head to
    /// dispatch by deficit round robin among classes whose head satisfies `dispatchable`.
    /// Expiry charges no credit and does not move the ring cursor.
    pub fn pop_next(
        &mut self,
        now: Timestamp,
        mut dispatchable: impl FnMut(ClassId, &T) -> bool,
    ) -> Pop<T> {
        let expired = self.expire(now);
        if self.len == 0 {
            self.drr.on_idle();
            return Pop {
                popped: None,
                expired,
            };
        }
        let classes = &self.classes;
        let picked =
            self.drr.choose(
                |c| match classes.get(c).and_then(|q| q.entries.first_key_value()) {
                    None => HeadState::Empty,
                    Some((_, e)) if dispatchable(class_id(c), &e.payload) => {
                        HeadState::Ready(e.cost)
                    }
                    Some(_) => HeadState::Blocked,
                },
            );
        let popped = picked.and_then(|c| self.take_head(c, now));
        Pop { popped, expired }
    }

    fn take_head(&mut self, c: usize, now: Timestamp) -> Option<Dequeued<T>> {
        let ((deadline, seq), entry) = self.classes.get_mut(c)?.entries.pop_first()?;
        let now_empty = self.unaccount(c, seq, entry.raw_tokens);
        self.drr.on_take(c, entry.cost, now_empty);
        self.debug_check();
        Some(dequeued(c, seq, deadline, entry, now))
    }

    /// Reverses the accounting of an entry already taken out of class `c`'s map; returns
    /// whether the class is now empty.
    fn unaccount(&mut self, c: usize, seq: u64, raw_tokens: u64) -> bool {
        self.index.remove(&seq);
        self.len = self.len.saturating_sub(1);
        self.tokens = self.tokens.saturating_sub(u128::from(raw_tokens));
        let Some(queue) = self.classes.get_mut(c) else {
            return true;
        };
        queue.tokens = queue.tokens.saturating_sub(u128::from(raw_tokens));
        queue.entries.is_empty()
    }

    /// Sheds every entry of every class whose deadline is at or before `now`, returned in
    /// (deadline, ticket) order. For an actor's timer armed at [`Self::next_deadline`].
    #[must_use = "expired entries must be answered to their callers"]
    pub fn expire(&mut self, now: Timestamp) -> Vec<Expired<T>> {
        let mut out = Vec::new();
        for c in 0..self.classes.len() {
            let mut shed_any = false;
            while let Some(entry) = self.classes[c].entries.first_entry() {
                let (deadline, seq) = *entry.key();
                if deadline > now {
                    break;
                }
                let entry = entry.remove();
                shed_any = true;
                if self.unaccount(c, seq, entry.raw_tokens) {
                    self.drr.on_emptied(c);
                }
                out.push(Expired {
                    class: class_id(c),
                    ticket: QueueTicket(seq),
                    arrival: entry.arrival,
                    deadline,
                    stage: ExpiryStage::Dispatch,
                    overdue: now.saturating_since(deadline),
                    cost: entry.cost,
                    raw_tokens: entry.raw_tokens,
                    payload: entry.payload,
                });
            }
            if shed_any {
                self.debug_check();
            }
        }
        out.sort_by_key(|e| (e.deadline, e.ticket));
        out
    }

    /// Takes an entry out because its caller went away. `now` only sets `waited`.
    /// Charges no credit; `None` if the ticket is not queued.
    pub fn remove(&mut self, ticket: QueueTicket, now: Timestamp) -> Option<Dequeued<T>> {
        let &(c, deadline) = self.index.get(&ticket.0)?;
        let entry = self
            .classes
            .get_mut(c)?
            .entries
            .remove(&(deadline, ticket.0))?;
        if self.unaccount(c, ticket.0, entry.raw_tokens) {
            self.drr.on_emptied(c);
        }
        self.debug_check();
        Some(dequeued(c, ticket.0, deadline, entry, now))
    }

    /// O(classes) consistency of the running totals.
    fn debug_check(&self) {
        debug_assert_eq!(
            self.len,
            self.classes.iter().map(|q| q.entries.len()).sum::<usize>()
        );
        debug_assert_eq!(
            self.tokens,
            self.classes.iter().map(|q| q.tokens).sum::<u128>()
        );
        debug_assert_eq!(self.len, self.index.len());
    }
}

/// Class indices come from a `Vec` of at most `u16::MAX + 1` specs (checked in `new`).
fn class_id(c: usize) -> ClassId {
    ClassId(u16::try_from(c).unwrap_or(u16::MAX))
}

fn dequeued<T>(
    c: usize,
    seq: u64,
    deadline: Timestamp,
    entry: Entry<T>,
    now: Timestamp,
) -> Dequeued<T> {
    Dequeued {
        class: class_id(c),
        ticket: QueueTicket(seq),
        arrival: entry.arrival,
        deadline,
        cost: entry.cost,
        raw_tokens: entry.raw_tokens,
        waited: now.saturating_since(entry.arrival),
        payload: entry.payload,
    }
}
