//! The simulated engines: a deliberately simple timing model, per-rank prefill lanes and
//! per-rank prefix caches.
//!
//! Engine model (documented here, used by `sim.rs`):
//! - Each worker has one data-parallel rank with [`KV_BLOCKS`] KV blocks of 16 tokens and
//!   a step budget of [`MAX_BATCHED_TOKENS`] tokens.
//! - A rank prefills one prompt at a time, first come first served (a FIFO lane): a prompt
//!   of T uncached tokens takes `0.015·T + 16` ms (the linear part of the mocker's
//!   polynomial). Its first token is out when its prefill ends.
//! - Decode runs batched and does not slow down with load: O output tokens take
//!   O × [`DECODE_MS_PER_TOKEN`] ms after the first token.
//! - Each rank keeps a prefix cache of the block hashes it prefilled, least recently used
//!   first out, as large as its KV. A prompt's leading blocks found there are not
//!   recomputed (at least one token always is). KV transfer between a prefill and a decode
//!   rank is instantaneous.
//!
//! The admission gate never sees this model: it sees only what the router booked.

use std::collections::{BTreeMap, HashMap};

use super::workload::BLOCK_TOKENS;

pub const KV_BLOCKS: u64 = 2048;
pub const MAX_BATCHED_TOKENS: u64 = 8192;
pub const DECODE_MS_PER_TOKEN: u64 = 20;

/// Prefill duration of `uncached` tokens, in microseconds (0.015 ms per token + 16 ms).
pub fn prefill_us(uncached: u64) -> u64 {
    uncached.saturating_mul(15).saturating_add(16_000)
}

/// Decode duration of `output` tokens, in microseconds.
pub fn decode_us(output: u64) -> u64 {
    output.saturating_mul(DECODE_MS_PER_TOKEN * 1_000)
}

/// A least-recently-used set of block hashes. Deterministic: recency is a counter.
#[derive(Debug, Default)]
pub struct PrefixCache {
    capacity: usize,
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
}

impl PrefixCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    /// Leading blocks of `hashes` present in the cache (a chained hash matches only when
    /// its whole prefix does).
    pub fn overlap(&self, hashes: &[u64]) -> u32 {
        let n = hashes
            .iter()
            .take_while(|h| self.stamp_of.contains_key(h))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Marks the blocks as just used, evicting the least recently used beyond capacity.
    pub fn touch(&mut self, hashes: &[u64]) {
        for &h in hashes {
            self.clock += 1;
            if let Some(old) = self.stamp_of.insert(h, self.clock) {
                self.by_stamp.remove(&old);
            }
            self.by_stamp.insert(self.clock, h);
        }
        while self.stamp_of.len() > self.capacity {
            let Some((_, h)) = self.by_stamp.pop_first() else {
                break;
            };
            self.stamp_of.remove(&h);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.stamp_of.len()
    }
}

/// One pool of simulated engines (one rank per worker, worker ids `0..n`).
#[derive(Debug)]
pub struct Pool {
    /// When each rank's prefill lane is free again (microseconds).
    lane_free_at: Vec<u64>,
    caches: Vec<PrefixCache>,
}

/// What an engine reports for a prompt it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillPlan {
    pub cached_tokens: u64,
    /// When the first token is out (microseconds).
    pub first_token_at: u64,
}

impl Pool {
    pub fn new(workers: u32) -> Self {
        Self {
            lane_free_at: vec![0; workers as usize],
            caches: (0..workers)
                .map(|_| PrefixCache::new(KV_BLOCKS as usize))
                .collect(),
        }
    }

    /// Per-rank matched prefix depth, as the KV prefix index would report it (ranks that
    /// match nothing are left out).
    pub fn overlaps(&self, hashes: &[u64]) -> Vec<(usize, u32)> {
        self.caches
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.overlap(hashes)))
            .filter(|&(_, o)| o > 0)
            .collect()
    }

    /// Queues a prompt on a rank's prefill lane at `now`. `None` for a rank outside the pool.
    pub fn prefill(
        &mut self,
        rank: usize,
        hashes: &[u64],
        prompt_tokens: u64,
        now: u64,
    ) -> Option<PrefillPlan> {
        let cache = self.caches.get_mut(rank)?;
        let cached =
            (u64::from(cache.overlap(hashes)) * BLOCK_TOKENS).min(prompt_tokens.saturating_sub(1));
        cache.touch(hashes);
        let lane = self.lane_free_at.get_mut(rank)?;
        let start = (*lane).max(now);
        let end = start.saturating_add(prefill_us(prompt_tokens - cached));
        *lane = end;
        Some(PrefillPlan {
            cached_tokens: cached,
            first_token_at: end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_model_matches_the_documented_formula() {
        assert_eq!(prefill_us(0), 16_000);
        assert_eq!(prefill_us(1000), 31_000);
        assert_eq!(decode_us(100), 2_000_000);
    }

    #[test]
    fn the_prefix_cache_matches_leading_blocks_and_evicts_lru() {
        let mut c = PrefixCache::new(3);
        c.touch(&[1, 2, 3]);
        assert_eq!(c.overlap(&[1, 2, 9]), 2);
        assert_eq!(c.overlap(&[9, 1]), 0);
        c.touch(&[1, 4]); // evicts 2, the least recently used
        assert_eq!(c.len(), 3);
        assert_eq!(c.overlap(&[1, 2]), 1);
        assert_eq!(c.overlap(&[3, 1, 4]), 3);
    }

    #[test]
    fn a_rank_prefills_one_prompt_at_a_time_and_reuses_its_cache() {
        let mut pool = Pool::new(2);
        let a = pool.prefill(0, &[1, 2], 40, 0).expect("rank 0");
        assert_eq!(
            a,
            PrefillPlan {
                cached_tokens: 0,
                first_token_at: prefill_us(40)
            }
        );
        // Same prefix, queued behind the first prompt on the same lane.
        let b = pool.prefill(0, &[1, 2], 40, 0).expect("rank 0");
        assert_eq!(b.cached_tokens, 32);
        assert_eq!(b.first_token_at, a.first_token_at + prefill_us(8));
        assert_eq!(pool.overlaps(&[1, 2, 3]), vec![(0, 2)]);
        assert!(pool.prefill(5, &[], 10, 0).is_none());
    }
}
