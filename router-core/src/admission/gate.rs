//! One gate evaluation, borrowed from the scheduler's parts so the drain path can run it
//! inside the queue's dispatchable predicate: the pool's own class gate, and for a prefill
//! pool the paired decode pool's room (read through the view, counted against this
//! scheduler's unapplied reservations, asked once per class per pass).

use super::request::AdmissionRequest;
use super::room::{DecodeRoomView, InflightReservations, PassCache};
use super::{PoolRole, RoomWant, Scheduler, SchedulerConfig, SchedulerStats};
use crate::eligibility::Eligibility;
use crate::ids::RankId;
use crate::ledger::{BestRoom, BookingLedger, GateClosed};
use crate::policy::PolicyProfile;
use crate::time::Timestamp;

/// What an open gate found: where the decode room is, when a reservation must be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GatePass {
    pub decode_rank: Option<RankId>,
}

pub(super) struct GateCtx<'a> {
    pub config: &'a SchedulerConfig,
    pub profile: &'a PolicyProfile,
    pub ledger: &'a BookingLedger,
    pub cache: &'a mut PassCache,
    pub inflight: &'a mut InflightReservations,
    pub stats: &'a mut SchedulerStats,
    pub wants: &'a mut Vec<RoomWant>,
}

impl Scheduler {
    pub(super) fn gate_ctx(&mut self) -> GateCtx<'_> {
        GateCtx {
            config: &self.config,
            profile: &self.profile,
            ledger: &self.ledger,
            cache: &mut self.cache,
            inflight: &mut self.inflight,
            stats: &mut self.stats,
            wants: &mut self.wants,
        }
    }
}

impl GateCtx<'_> {
    /// The class gate for one request.
    pub(super) fn check(
        &mut self,
        request: &AdmissionRequest,
        now: Timestamp,
        room: Option<&dyn DecodeRoomView>,
    ) -> Result<GatePass, GateClosed> {
        let class = request.class;
        let policy = self.profile.class(class);
        let none = GatePass { decode_rank: None };
        match self.config.role {
            PoolRole::Aggregated | PoolRole::Decode => {
                let need = if policy.has_decode_threshold() {
                    request.decode_need()
                } else {
                    0
                };
                let prefill_need = request.uncached_tokens();
                let gate = self
                    .ledger
                    .class_gate(class, need, prefill_need, &request.eligibility);
                let prefill_credits = self.ledger.prefill_credits_enabled();
                let wants = match gate {
                    Err(GateClosed::DecodeFull) => self.ledger.credits_enabled(),
                    Err(GateClosed::PrefillBusy) => prefill_credits,
                    Ok(()) => false,
                };
                if wants {
                    self.want(request, need, prefill_credits.then_some(prefill_need));
                }
                gate.map(|()| none)
            }
            PoolRole::Prefill => {
                // The prefill line on this pool's own ranks (out of prefill credits when
                // replicas share it), then the decode room on the paired pool.
                let prefill_need = request.uncached_tokens();
                let gate = self
                    .ledger
                    .class_gate(class, 0, prefill_need, &request.eligibility);
                if gate == Err(GateClosed::PrefillBusy) && self.ledger.prefill_credits_enabled() {
                    self.want(request, 0, Some(prefill_need));
                }
                gate?;
                let (true, Some(room)) = (policy.has_decode_threshold(), room) else {
                    return Ok(none);
                };
                let need = i64::try_from(request.decode_need()).unwrap_or(i64::MAX);
                match self.paired_room(request, now, room) {
                    // No decode rank at all: let the decode leg report it.
                    BestRoom::NoRanks => Ok(none),
                    BestRoom::Best { rank, headroom } if headroom >= need => Ok(GatePass {
                        decode_rank: Some(rank),
                    }),
                    BestRoom::Best { .. } => {
                        self.want(request, u64::try_from(need).unwrap_or(0), None);
                        Err(GateClosed::DecodeFull)
                    }
                }
            }
        }
    }

    /// Records that a request waits on room credits could give (the first need per class,
    /// adapter and kind of want), so the pool holding that room can fetch credits for it.
    /// A prefill pool has two kinds: its own prefill room (`prefill_need`, no decode need)
    /// and the paired decode pool's room (no `prefill_need`).
    fn want(&mut self, request: &AdmissionRequest, need: u64, prefill_need: Option<u64>) {
        let lora = request.eligibility.lora.clone();
        if self.wants.iter().any(|w| {
            w.class == request.class
                && w.lora == lora
                && w.prefill_need.is_some() == prefill_need.is_some()
        }) {
            return;
        }
        self.wants.push(RoomWant {
            class: request.class,
            need,
            prefill_need,
            lora,
        });
    }

    /// Decode room on the paired pool, counting this scheduler's reservations the view has
    /// not applied yet. Requests without a LoRA share one answer per class per pass.
    fn paired_room(
        &mut self,
        request: &AdmissionRequest,
        now: Timestamp,
        room: &dyn DecodeRoomView,
    ) -> BestRoom {
        // Prefill-side allow-lists and pins name prefill workers; only the adapter narrows
        // the decode ranks.
        let filter = Eligibility {
            lora: request.eligibility.lora.clone(),
            ..Eligibility::default()
        };
        let shared = filter.lora.is_none();
        if shared && let Some(answer) = self.cache.get(request.class) {
            return answer;
        }
        let pending = self
            .inflight
            .unseen(room.applied_reserve_seq(self.config.owner), now);
        self.stats.room_queries += 1;
        let answer = room.best_room(request.class, &filter, &pending);
        if shared {
            self.cache.put(request.class, answer);
        }
        answer
    }
}
