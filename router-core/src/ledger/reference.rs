//! The plain full-scan gate: the same questions as `gate.rs`, answered by walking every
//! rank and recomputing busy, room and overload from the raw booked numbers. Slow and
//! obviously right; property tests hold the incremental indexes to it.

use super::BookingLedger;
use super::gate::{GateClosed, RoomAnswer, ratio_reached};
use super::rank::{RankState, saturating_i64};
use crate::eligibility::Eligibility;
use crate::ids::{ClassId, RankId};
use crate::policy::ClassPolicy;

/// A full-scan view of a ledger.
#[derive(Debug, Clone, Copy)]
pub struct ReferenceGate<'a> {
    ledger: &'a BookingLedger,
}

impl<'a> ReferenceGate<'a> {
    pub fn new(ledger: &'a BookingLedger) -> Self {
        Self { ledger }
    }

    fn overloaded(&self, rank: &RankState) -> bool {
        let thresholds = &self.ledger.thresholds;
        let Some(entry) = self.ledger.workers.get(&rank.id.worker) else {
            return false;
        };
        !entry.slots.is_empty()
            && entry.slots.iter().all(|s| {
                self.ledger.rank(*s).is_some_and(|r| {
                    thresholds.rank_over(
                        r.prefill_tokens,
                        r.decode_blocks(),
                        r.total_kv_blocks,
                        r.batch_tokens,
                    )
                })
            })
    }

    /// Ranks the filter allows, worker-overload excluded, computed from scratch.
    fn eligible(&self, filter: &Eligibility) -> Vec<&'a RankState> {
        let ledger = self.ledger;
        let allowed = |r: &RankState| filter.allows_worker(r.id.worker);
        let all: Vec<&RankState> = ledger.slots.iter().flatten().collect();
        let chosen: Vec<&RankState> = if let Some(pin) = filter.pinned {
            all.into_iter()
                .filter(|r| r.id == pin && allowed(r))
                .collect()
        } else {
            let allowed: Vec<&RankState> = all.into_iter().filter(|r| allowed(r)).collect();
            let serves = |r: &RankState| {
                filter.lora.as_deref().is_some_and(|l| {
                    ledger
                        .workers
                        .get(&r.id.worker)
                        .is_some_and(|w| w.spec.serves_lora(l))
                })
            };
            if allowed.iter().any(|r| serves(r)) {
                allowed.into_iter().filter(|r| serves(r)).collect()
            } else {
                allowed
            }
        };
        chosen.into_iter().filter(|r| !self.overloaded(r)).collect()
    }

    fn busy(policy: &ClassPolicy, r: &RankState, prefill_need: u64) -> bool {
        let line = policy.prefill_busy_line(r.batch_tokens);
        let uncovered = line != u64::MAX
            && r.prefill_credit_held.is_some_and(|held| {
                saturating_i64(held) - saturating_i64(r.own_prefill) < saturating_i64(prefill_need)
            });
        r.prefill_tokens > line || uncovered
    }

    fn headroom(policy: &ClassPolicy, r: &RankState) -> i64 {
        match policy.decode_room_line(r.total_kv_blocks) {
            None => i64::MAX,
            Some(line) => (saturating_i64(line)
                - saturating_i64(r.blocks.len() as u64 + r.private_blocks + r.reserved_blocks))
            .min(r.credit_room()),
        }
    }

    pub fn class_gate(
        &self,
        class: ClassId,
        need: u64,
        prefill_need: u64,
        filter: &Eligibility,
    ) -> Result<(), GateClosed> {
        let policy = &self.ledger.classes[class.index()];
        if !policy.gated() {
            return Ok(());
        }
        let ranks = self.eligible(filter);
        if ranks.is_empty() {
            return Ok(());
        }
        let need = saturating_i64(need);
        let busy = ranks
            .iter()
            .filter(|r| Self::busy(policy, r, prefill_need))
            .count() as u64;
        let any_room = ranks.iter().any(|r| Self::headroom(policy, r) >= need);
        let any_open = ranks
            .iter()
            .any(|r| !Self::busy(policy, r, prefill_need) && Self::headroom(policy, r) >= need);
        match policy.busy_worker_ratio {
            Some(ratio) if ratio_reached(busy, ranks.len() as u64, ratio) => {
                Err(GateClosed::PrefillBusy)
            }
            Some(_) if !any_room => Err(GateClosed::DecodeFull),
            Some(_) => Ok(()),
            None if any_open => Ok(()),
            None if busy == ranks.len() as u64 => Err(GateClosed::PrefillBusy),
            None => Err(GateClosed::DecodeFull),
        }
    }

    pub fn decode_room(
        &self,
        class: ClassId,
        need: u64,
        filter: &Eligibility,
        pending: &[(RankId, u64)],
    ) -> RoomAnswer {
        let policy = &self.ledger.classes[class.index()];
        let ranks = self.eligible(filter);
        if ranks.is_empty() {
            return RoomAnswer::NoRanks;
        }
        let best = ranks
            .iter()
            .map(|r| {
                let promised: i64 = pending
                    .iter()
                    .filter(|(p, _)| *p == r.id)
                    .map(|(_, b)| saturating_i64(*b))
                    .sum();
                (Self::headroom(policy, r).saturating_sub(promised), r.id)
            })
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        match best {
            Some((headroom, rank)) if headroom >= saturating_i64(need) => {
                RoomAnswer::Room { rank, headroom }
            }
            _ => RoomAnswer::Full,
        }
    }
}
