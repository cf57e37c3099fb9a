//! The offline demo's fleet: router-sim's engines, one rank per worker, as `sim.rs` drives
//! them (the pass each engine runs and what it delivers at its end), the fleet's sizes, and
//! how request ids and ranks map to the workload and the engines.

use router_core::ledger::BookingLedger;
use router_core::{RankId, RequestId};
use router_sim::engine::{Engine, EngineConfig, Role, StepOutput};

use super::workload::BLOCK_TOKENS;

/// KV blocks of every simulated rank.
pub const KV_BLOCKS: u64 = 2048;
/// The engines' step budget in tokens.
pub const MAX_BATCHED_TOKENS: u64 = 8192;
/// Sequences one pass may run.
const MAX_NUM_SEQS: usize = 256;

/// One pool's engines (one rank per worker, worker ids `0..n`).
#[derive(Debug)]
pub(super) struct Engines {
    pub(super) engines: Vec<Engine>,
    /// What each engine's running pass did, delivered at its end.
    pub(super) pending: Vec<Option<StepOutput>>,
    /// Whether a pass event is scheduled for the engine.
    pub(super) busy: Vec<bool>,
}

impl Engines {
    pub(super) fn new(workers: u32, role: Role) -> Result<Self, String> {
        let engines = (0..u64::from(workers))
            .map(|w| {
                Engine::new(EngineConfig {
                    worker_id: router_core::WorkerId(w),
                    dp_rank: 0,
                    block_size: BLOCK_TOKENS as usize,
                    total_kv_blocks: KV_BLOCKS as usize,
                    max_num_batched_tokens: MAX_BATCHED_TOKENS as usize,
                    max_num_seqs: MAX_NUM_SEQS,
                    speedup: 1.0,
                    role,
                    staging_timeout_us: u64::MAX,
                    max_loras: 0,
                })
                .map_err(|e| format!("engine config: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let n = engines.len();
        Ok(Self {
            engines,
            pending: (0..n).map(|_| None).collect(),
            busy: vec![false; n],
        })
    }
}

impl Engines {
    /// What `rank`'s last pass did, now that it ended.
    pub(super) fn take_done(&mut self, rank: usize) -> Option<StepOutput> {
        self.pending.get_mut(rank).and_then(Option::take)
    }

    /// Starts `rank`'s next pass at `now`: when it ends and the KV events it published, or
    /// `None` (the engine marked idle) when it has nothing to run.
    pub(super) fn start_pass(
        &mut self,
        rank: usize,
        now: u64,
    ) -> Option<(u64, Vec<router_core::KvEvent>)> {
        let (engine, busy) = (self.engines.get_mut(rank)?, self.busy.get_mut(rank)?);
        let out = (!engine.is_idle()).then(|| engine.step(now));
        let Some(mut out) = out.filter(StepOutput::did_work) else {
            *busy = false;
            return None;
        };
        let end = now.saturating_add(out.duration_us.max(1));
        let events = std::mem::take(&mut out.kv_events);
        *self.pending.get_mut(rank)? = Some(out);
        Some((end, events))
    }
}

/// Request ids are the workload index plus one (never the nil id).
pub(super) fn request_id(i: usize) -> RequestId {
    RequestId::from_u128(i as u128 + 1)
}

pub(super) fn index_of(id: RequestId) -> Option<usize> {
    usize::try_from(id.0.as_u128().checked_sub(1)?).ok()
}

pub(super) fn rank_index(rank: RankId, workers: u32) -> Option<usize> {
    (rank.dp_rank == 0 && rank.worker.0 < u64::from(workers)).then_some(rank.worker.0 as usize)
}

/// Booked plus reserved decode blocks of a rank, as a share of its KV (percent).
pub fn committed_pct(ledger: &BookingLedger, rank: RankId) -> Option<f64> {
    let s = ledger.rank_snapshot(rank)?;
    let total = s.total_kv_blocks.filter(|&t| t > 0)?;
    Some((s.decode_blocks + s.reserved_blocks) as f64 * 100.0 / total as f64)
}
