//! The arrival path and dispatch: direct admission when the class has no backlog and its
//! gate is open, queueing otherwise (or rejection for classes and requests that may not
//! wait), the admitted-upstream path of staged decode legs, and booking what is admitted.

use super::gate::GatePass;
use super::request::{
    Admission, AdmissionRequest, DecodeReservation, Outcome, Phase, PrefixHit, RejectReason,
};
use super::room::DecodeRoomView;
use super::{PoolRole, Scheduler};
use crate::ids::RankId;
use crate::ledger::{BookResult, Booking, GateClosed};
use crate::queue::EnqueueRefusal;
use crate::time::Timestamp;
use std::time::Duration;

impl Scheduler {
    /// Offers a request. `room` is the paired decode pool's view (prefill pools only).
    pub fn arrive(
        &mut self,
        request: AdmissionRequest,
        now: Timestamp,
        room: Option<&dyn DecodeRoomView>,
    ) -> Outcome {
        self.cache.clear();
        self.stats.gate_passes += 1;
        let class = request.class;
        if class.index() >= self.profile.classes().len() {
            return self.reject(&request, RejectReason::UnknownClass);
        }
        if self.queued.contains_key(&request.id)
            || self.ledger.booking(&self.key(request.id)).is_some()
        {
            return self.reject(&request, RejectReason::Duplicate);
        }
        if request.phase == (Phase::Decode { staged: true }) {
            return self.admit_upstream(request);
        }
        let policy = self.profile.class(class);
        let may_wait = !(policy.never_queue || request.do_not_queue);
        if !policy.gated() {
            return self.dispatch(request, GatePass { decode_rank: None }, Duration::ZERO, now);
        }
        // A new arrival never overtakes its class's backlog, even when a rank is idle.
        let closed = if self.queue.has_backlog(class) {
            None
        } else {
            match self.check_gate(&request, now, room) {
                Ok(pass) => return self.dispatch(request, pass, Duration::ZERO, now),
                Err(cause) => Some(cause),
            }
        };
        if !may_wait {
            let reason = match closed {
                Some(cause) => RejectReason::WouldQueue { cause },
                None => RejectReason::BehindBacklog,
            };
            return self.reject(&request, reason);
        }
        let workers = self.ledger.worker_count();
        let (cost, raw) = (request.uncached_tokens().max(1), request.prompt_tokens);
        let arrival = request.arrival;
        let id = request.id;
        match self
            .queue
            .enqueue(class, request, cost, raw, arrival, now, workers)
        {
            Ok(ticket) => {
                self.queued.insert(id, ticket);
                self.stats.queued += 1;
                Outcome::Queued {
                    request: id,
                    class,
                    ticket,
                }
            }
            Err(rejection) => {
                let reason = match rejection.reason {
                    EnqueueRefusal::LimitReached {
                        kind,
                        current,
                        limit,
                    } => RejectReason::QueueFull {
                        kind,
                        current,
                        limit,
                    },
                    EnqueueRefusal::Expired { stage, overdue } => RejectReason::DeadlinePassed {
                        stage,
                        overdue_ms: millis(overdue),
                    },
                    EnqueueRefusal::UnknownClass { .. } => RejectReason::UnknownClass,
                };
                self.reject(&rejection.payload, reason)
            }
        }
    }

    pub(super) fn check_gate(
        &mut self,
        request: &AdmissionRequest,
        now: Timestamp,
        room: Option<&dyn DecodeRoomView>,
    ) -> Result<GatePass, GateClosed> {
        self.gate_ctx().check(request, now, room)
    }

    /// Selects a rank, books the request and, on a prefill pool, takes the decode
    /// reservation the gate found room for.
    pub(super) fn dispatch(
        &mut self,
        request: AdmissionRequest,
        pass: GatePass,
        waited: Duration,
        now: Timestamp,
    ) -> Outcome {
        let need_room = {
            let policy = self.profile.class(request.class);
            match self.config.role {
                PoolRole::Aggregated | PoolRole::Decode if policy.has_decode_threshold() => {
                    Some(request.decode_need())
                }
                _ => None,
            }
        };
        let rank = match self.select(&request, need_room) {
            Ok(selected) => selected.rank,
            Err(reason) => return self.reject(&request, reason),
        };
        if let Err(reason) = self.book(&request, rank) {
            return self.reject(&request, reason);
        }
        let reserve = self.config.decode_reservations;
        let decode_reservation = pass.decode_rank.filter(|_| reserve).map(|decode_rank| {
            let seq = self.inflight.next_seq();
            let expires_at = now + self.config.reservation_lease;
            let blocks = request.decode_need();
            self.inflight.push(decode_rank, blocks, seq, expires_at);
            // Our own reservation changes the room every class sees in this pass.
            self.cache.clear();
            DecodeReservation {
                key: self.key(request.id),
                rank: decode_rank,
                blocks,
                expires_at,
                seq,
            }
        });
        self.stats.admitted += 1;
        Outcome::Admitted(Admission {
            request: request.id,
            class: request.class,
            rank,
            waited,
            admitted_upstream: false,
            decode_reservation,
            prefix: self.prefix_hit(&request, rank),
        })
    }

    /// A staged decode leg: no class wait, no deadline, no class limit; its reservation (if
    /// any) is its preferred rank and becomes its booking. Router-wide reject thresholds
    /// still apply.
    fn admit_upstream(&mut self, mut request: AdmissionRequest) -> Outcome {
        let key = self.key(request.id);
        if request.preferred.is_none() {
            request.preferred = self.ledger.reservation(&key).map(|r| r.rank);
        }
        let rank = match self.select(&request, None) {
            Ok(selected) => selected.rank,
            Err(reason) => return self.reject(&request, reason),
        };
        if let Err(reason) = self.book(&request, rank) {
            return self.reject(&request, reason);
        }
        self.stats.admitted += 1;
        self.stats.admitted_upstream += 1;
        Outcome::Admitted(Admission {
            request: request.id,
            class: request.class,
            rank,
            waited: Duration::ZERO,
            admitted_upstream: true,
            decode_reservation: None,
            prefix: self.prefix_hit(&request, rank),
        })
    }

    /// The prefix of `request` that `rank` holds (its overlap entry), in blocks and tokens
    /// (blocks of the rank's announced size).
    fn prefix_hit(&self, request: &AdmissionRequest, rank: RankId) -> PrefixHit {
        let matched_blocks = request
            .overlap
            .iter()
            .find(|(r, _)| *r == rank)
            .map_or(0, |(_, depth)| *depth);
        let block_size = self.ledger.worker(rank.worker).map_or(0, |w| w.block_size);
        PrefixHit {
            prompt_blocks: u32::try_from(request.block_hashes.len()).unwrap_or(u32::MAX),
            matched_blocks,
            cached_tokens: (u64::from(matched_blocks) * u64::from(block_size))
                .min(request.prompt_tokens),
        }
    }

    /// What the request puts on its rank, by pool and phase.
    fn book(&mut self, request: &AdmissionRequest, rank: RankId) -> Result<(), RejectReason> {
        let uncached = request.uncached_tokens();
        let booking = match (self.config.role, request.phase) {
            // The prefill pool tracks prompt work only; decode blocks live on the decode pool.
            (PoolRole::Prefill, _) => Booking {
                rank,
                block_hashes: Vec::new(),
                prefill_tokens: uncached,
                extra_blocks: 0,
            },
            (_, Phase::Decode { staged: true }) => Booking {
                rank,
                block_hashes: request.block_hashes.clone(),
                prefill_tokens: 0,
                extra_blocks: request.output_blocks,
            },
            _ => Booking {
                rank,
                block_hashes: request.block_hashes.clone(),
                prefill_tokens: uncached,
                extra_blocks: request.output_blocks,
            },
        };
        match self.ledger.book(self.key(request.id), booking) {
            BookResult::Booked { .. } => Ok(()),
            BookResult::AlreadyBooked => Err(RejectReason::Duplicate),
            BookResult::UnknownRank => Err(RejectReason::PinnedUnavailable { rank }),
        }
    }

    pub(super) fn reject(&mut self, request: &AdmissionRequest, reason: RejectReason) -> Outcome {
        self.stats.rejected += 1;
        Outcome::Rejected {
            request: request.id,
            class: request.class,
            reason,
        }
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
