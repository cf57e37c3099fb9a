//! Selection settings and the placement cost of one rank.
//!
//! Cost of placing a request on a rank (lower is better; it may be negative):
//!
//! ```text
//! prefill_load_scale × ((booked prefill tokens + prompt tokens) / block_size
//!                       − overlap_credit × prefix blocks)
//!   + committed decode blocks (booked + reserved)
//!   + the request's blocks not already booked on the rank
//! ```
//!
//! Prefill work is counted in blocks so both terms share a unit. The first term is the
//! prefill queued ahead of the request plus its own, less what its cached prefix saves:
//! with `overlap_credit` 1 that is the request's own time to first token; above 1 a
//! cached block also counts for the prefill it spares everyone queued later on the same
//! worker. Prefix blocks are the rank's cached prefix (from the KV index) or, when longer,
//! the prefix booked there by requests in flight (`count_booked_prefix`), which their
//! prefill is about to store. The other two terms are KV memory: what the rank has
//! committed and what this request adds.
//!
//! The defaults (`prefill_load_scale` 10, `overlap_credit` 4) came from replaying the
//! Mooncake conversation trace and the node-level bench (BENCHMARKS.md, "Routing
//! quality"): prefill queues and prefix reuse decide time to first token, while a rank's
//! committed decode blocks matter mostly as KV pressure, which admission's thresholds
//! already bound. With weights 1 and 1 (the reference router's) a worker holding a
//! conversation lost its next turn to any idler worker.

use crate::ids::RankId;
use crate::ledger::RankLoad;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// How placement weighs load against prefix reuse, and how greedy it is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SelectionConfig {
    /// Weight of prefill work (in blocks) against decode blocks.
    pub prefill_load_scale: f64,
    /// Prefill blocks saved per matched prefix block.
    pub overlap_credit: f64,
    /// 0: the cheapest rank (random among exact ties). T > 0: softmax sampling over
    /// min-max normalised costs, flatter as T grows.
    pub temperature: f64,
    /// Count a prefix booked on a rank by requests in flight as cached there (their
    /// prefill stores it before a request queued behind them runs).
    pub count_booked_prefix: bool,
}

impl Default for SelectionConfig {
    fn default() -> Self {
        Self {
            prefill_load_scale: 10.0,
            overlap_credit: 4.0,
            temperature: 0.0,
            count_booked_prefix: true,
        }
    }
}

/// A selection setting that cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum SelectionConfigError {
    #[error("selection.{field} must be a finite number, got {value}")]
    NotFinite { field: &'static str, value: f64 },
    #[error("selection.{field} must be >= 0, got {value}")]
    Negative { field: &'static str, value: f64 },
}

impl SelectionConfig {
    /// Every field finite and non-negative; the error names the first field that is not.
    pub fn validate(&self) -> Result<(), SelectionConfigError> {
        for (field, value) in [
            ("prefill_load_scale", self.prefill_load_scale),
            ("overlap_credit", self.overlap_credit),
            ("temperature", self.temperature),
        ] {
            if !value.is_finite() {
                return Err(SelectionConfigError::NotFinite { field, value });
            }
            if value < 0.0 {
                return Err(SelectionConfigError::Negative { field, value });
            }
        }
        Ok(())
    }

    /// Prefix blocks a request finds on a rank: `cached` (from the KV index), or the
    /// prefix booked there when that is longer and `count_booked_prefix` is on.
    pub fn prefix_blocks(&self, rank: &RankLoad<'_>, block_hashes: &[u64], cached: u32) -> u32 {
        if self.count_booked_prefix && (cached as usize) < block_hashes.len() {
            cached.max(rank.booked_prefix(block_hashes))
        } else {
            cached
        }
    }

    /// Placement cost of a request on a rank (see the module docs).
    pub fn cost(
        &self,
        rank: &RankLoad<'_>,
        block_hashes: &[u64],
        prompt_tokens: u64,
        overlap_blocks: u32,
    ) -> f64 {
        let bs = f64::from(rank.block_size().max(1));
        let prefill_blocks = (rank.prefill_tokens().saturating_add(prompt_tokens)) as f64 / bs;
        let credited = prefill_blocks - self.overlap_credit * f64::from(overlap_blocks);
        self.prefill_load_scale * credited
            + rank.committed_blocks() as f64
            + rank.new_blocks(block_hashes) as f64
    }
}

/// Matched prefix blocks per rank, looked up linearly for short lists and through a map
/// for long ones (a full scan asks once per rank).
#[derive(Debug)]
pub(crate) struct Overlaps<'a> {
    list: &'a [(RankId, u32)],
    map: Option<FxHashMap<RankId, u32>>,
}

impl<'a> Overlaps<'a> {
    const LINEAR_UP_TO: usize = 8;

    pub(crate) fn new(list: &'a [(RankId, u32)]) -> Self {
        let map = (list.len() > Self::LINEAR_UP_TO).then(|| {
            let mut map = FxHashMap::default();
            for &(rank, blocks) in list {
                let entry = map.entry(rank).or_insert(0);
                *entry = blocks.max(*entry);
            }
            map
        });
        Self { list, map }
    }

    /// Matched blocks on `rank` (the largest if listed twice), 0 when absent.
    pub(crate) fn of(&self, rank: RankId) -> u32 {
        match &self.map {
            Some(map) => map.get(&rank).copied().unwrap_or(0),
            None => self
                .list
                .iter()
                .filter(|(r, _)| *r == rank)
                .map(|(_, b)| *b)
                .max()
                .unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_offending_field() {
        let ok = SelectionConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let bad = SelectionConfig {
            overlap_credit: -1.0,
            ..ok
        };
        assert_eq!(
            bad.validate(),
            Err(SelectionConfigError::Negative {
                field: "overlap_credit",
                value: -1.0
            })
        );
        let bad = SelectionConfig {
            temperature: f64::NAN,
            ..ok
        };
        let err = bad.validate().expect_err("NaN refused");
        assert!(err.to_string().contains("selection.temperature"), "{err}");
        let bad = SelectionConfig {
            prefill_load_scale: f64::INFINITY,
            ..ok
        };
        assert!(matches!(
            bad.validate(),
            Err(SelectionConfigError::NotFinite {
                field: "prefill_load_scale",
                ..
            })
        ));
    }

    #[test]
    fn overlaps_agree_between_the_list_and_the_map() {
        let list: Vec<(RankId, u32)> = (0..20).map(|i| (RankId::new(i, 0), i as u32)).collect();
        let long = Overlaps::new(&list);
        let short = Overlaps::new(&list[..5]);
        assert_eq!(long.of(RankId::new(3, 0)), 3);
        assert_eq!(short.of(RankId::new(3, 0)), 3);
        assert_eq!(short.of(RankId::new(7, 0)), 0);
        assert_eq!(long.of(RankId::new(99, 0)), 0);
    }
}
