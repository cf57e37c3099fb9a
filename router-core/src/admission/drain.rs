//! The drain path: whenever capacity may have grown (a release, a first token, a peer's
//! release, `RoomChanged`, a worker change) the scheduler pops queued requests by deficit
//! round robin while their class gate is open, and sheds those whose deadline passed.
//! Also the timer path (`expire`) and cancellation of a caller that went away.

use super::Scheduler;
use super::arrive::millis;
use super::gate::GateCtx;
use super::request::{AdmissionRequest, Outcome, RejectReason};
use super::room::DecodeRoomView;
use crate::ids::RequestId;
use crate::queue::Expired;
use crate::time::Timestamp;

impl Scheduler {
    /// Admits queued requests while their class gates are open; sheds expired ones.
    pub fn drain(&mut self, now: Timestamp, room: Option<&dyn DecodeRoomView>) -> Vec<Outcome> {
        self.cache.clear();
        self.stats.gate_passes += 1;
        let mut outcomes = Vec::new();
        while !self.queue.is_empty() {
            let pop = {
                let Scheduler {
                    queue,
                    config,
                    profile,
                    ledger,
                    cache,
                    inflight,
                    stats,
                    wants,
                    ..
                } = self;
                let mut gate = GateCtx {
                    config,
                    profile,
                    ledger,
                    cache,
                    inflight,
                    stats,
                    wants,
                };
                queue.pop_next(now, |_, request| gate.check(request, now, room).is_ok())
            };
            for expired in pop.expired {
                outcomes.push(self.shed(expired));
            }
            let Some(entry) = pop.popped else { break };
            self.queued.remove(&entry.payload.id);
            // Same answer as the predicate just gave (the pass cache holds it).
            let outcome = match self.check_gate(&entry.payload, now, room) {
                Ok(pass) => self.dispatch(entry.payload, pass, entry.waited, now),
                Err(cause) => {
                    debug_assert!(
                        false,
                        "gate closed between the predicate and dispatch: {cause:?}"
                    );
                    self.reject(&entry.payload, RejectReason::WouldQueue { cause })
                }
            };
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Sheds queued requests whose deadline passed and drops expired reservations (the
    /// actor's timer path). Rejections come back as outcomes; expired reservations raise
    /// the ledger's room epoch.
    pub fn expire(&mut self, now: Timestamp) -> Vec<Outcome> {
        self.ledger.expire_reservations(now);
        let expired = self.queue.expire(now);
        expired.into_iter().map(|e| self.shed(e)).collect()
    }

    /// The caller went away: a queued request leaves the queue and is never booked; an
    /// admitted one is released. True when there was something to drop.
    pub fn cancel(&mut self, request: RequestId, now: Timestamp) -> bool {
        if let Some(ticket) = self.queued.remove(&request) {
            self.queue.remove(ticket, now);
            self.stats.cancelled += 1;
            return true;
        }
        let released = self.release(request);
        if released {
            self.stats.cancelled += 1;
        }
        released
    }

    fn shed(&mut self, expired: Expired<AdmissionRequest>) -> Outcome {
        self.queued.remove(&expired.payload.id);
        let reason = RejectReason::DeadlinePassed {
            stage: expired.stage,
            overdue_ms: millis(expired.overdue),
        };
        self.reject(&expired.payload, reason)
    }
}
