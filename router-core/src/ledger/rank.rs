//! One rank's booked load: prefill tokens of requests still in prefill, the unique KV
//! blocks held by its requests (a shared prefix counts once), blocks booked without hashes,
//! and decode blocks reserved ahead of decode legs. Also the per-class lines that turn the
//! load into "busy" and "room" answers.

use crate::ids::RankId;
use crate::policy::{ClassPolicy, RejectThresholds};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Per-class lines of one rank, precomputed from its capacities.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClassLines {
    /// Prefill-busy when booked prefill tokens are strictly above this.
    pub prefill_busy: u64,
    /// Room for `n` blocks when decode blocks + reserved + n <= this. `None`: always room.
    pub decode_room: Option<u64>,
}

#[derive(Debug, Clone)]
pub(crate) struct RankState {
    pub id: RankId,
    pub total_kv_blocks: Option<u64>,
    pub batch_tokens: u64,
    pub block_size: u32,
    pub prefill_tokens: u64,
    /// Refcount of each booked block hash on this rank.
    pub blocks: FxHashMap<u64, u32>,
    /// Blocks booked without hashes (nothing to share them with).
    pub private_blocks: u64,
    pub reserved_blocks: u64,
    pub requests: u32,
    /// Room credits (see `crate::credits`): the credits this router holds on the rank, when
    /// credits are on. The class headroom is then also bounded by `held - own`.
    pub credit_held: Option<u64>,
    /// Blocks this router's own bookings and reservations take here, each counted whole
    /// (no prefix sharing): what its credits must cover.
    pub own_blocks: u64,
    /// Prefill credits this router holds here (credits on in an aggregated pool): a class
    /// with a prefill line books prompt tokens here only out of them.
    pub prefill_credit_held: Option<u64>,
    /// Prompt tokens of this router's own bookings still in prefill here.
    pub own_prefill: u64,
    /// Over a router-wide reject threshold.
    pub over: bool,
    /// Prefill-busy per class, as last counted.
    pub busy: Vec<bool>,
    pub lines: Vec<ClassLines>,
}

impl RankState {
    pub(crate) fn new(
        id: RankId,
        total_kv_blocks: Option<u64>,
        batch_tokens: u64,
        block_size: u32,
        classes: &[ClassPolicy],
    ) -> Self {
        let mut rank = Self {
            id,
            total_kv_blocks,
            batch_tokens,
            block_size,
            prefill_tokens: 0,
            blocks: FxHashMap::default(),
            private_blocks: 0,
            reserved_blocks: 0,
            requests: 0,
            credit_held: None,
            own_blocks: 0,
            prefill_credit_held: None,
            own_prefill: 0,
            over: false,
            busy: vec![false; classes.len()],
            lines: Vec::new(),
        };
        rank.set_lines(classes);
        rank
    }

    pub(crate) fn set_lines(&mut self, classes: &[ClassPolicy]) {
        self.lines = classes
            .iter()
            .map(|c| ClassLines {
                prefill_busy: c.prefill_busy_line(self.batch_tokens),
                decode_room: c.decode_room_line(self.total_kv_blocks),
            })
            .collect();
    }

    /// Unique booked blocks (the decode footprint), without reservations.
    pub(crate) fn decode_blocks(&self) -> u64 {
        self.blocks.len() as u64 + self.private_blocks
    }

    /// Booked plus reserved decode blocks.
    pub(crate) fn committed_blocks(&self) -> u64 {
        self.decode_blocks() + self.reserved_blocks
    }

    pub(crate) fn prefill_busy(&self, class: usize) -> bool {
        self.prefill_tokens > self.lines[class].prefill_busy
    }

    /// How many more blocks the class may commit here: its line minus booked and reserved
    /// blocks (negative when over). `i64::MAX` when the class has no decode line here.
    pub(crate) fn headroom(&self, class: usize) -> i64 {
        match self.lines[class].decode_room {
            None => i64::MAX,
            Some(line) => {
                let room = saturating_i64(line) - saturating_i64(self.committed_blocks());
                room.min(self.credit_room())
            }
        }
    }

    /// What this router's spare credits allow (`i64::MAX` with credits off).
    pub(crate) fn credit_room(&self) -> i64 {
        match self.credit_held {
            None => i64::MAX,
            Some(held) => saturating_i64(held) - saturating_i64(self.own_blocks),
        }
    }

    /// What this router's spare prefill credits allow (`i64::MAX` with prefill credits off).
    pub(crate) fn prefill_credit_room(&self) -> i64 {
        match self.prefill_credit_held {
            None => i64::MAX,
            Some(held) => saturating_i64(held) - saturating_i64(self.own_prefill),
        }
    }

    /// Whether this router may book `tokens` of prefill here for the class: always when the
    /// class has no prefill line or prefill credits are off, else out of spare credits.
    pub(crate) fn prefill_covers(&self, class: usize, tokens: u64) -> bool {
        self.lines[class].prefill_busy == u64::MAX
            || self.prefill_credit_room() >= saturating_i64(tokens)
    }

    pub(crate) fn has_room(&self, class: usize, need: u64) -> bool {
        self.headroom(class) >= saturating_i64(need)
    }

    pub(crate) fn over_thresholds(&self, thresholds: &RejectThresholds) -> bool {
        thresholds.rank_over(
            self.prefill_tokens,
            self.decode_blocks(),
            self.total_kv_blocks,
            self.batch_tokens,
        )
    }

    /// Blocks of `hashes` not already held on this rank.
    pub(crate) fn new_blocks(&self, hashes: &[u64]) -> u64 {
        hashes
            .iter()
            .filter(|h| !self.blocks.contains_key(h))
            .count() as u64
    }

    /// Leading blocks of `hashes` booked here (hashes are chained, so a booked block means
    /// its whole prefix was booked with it).
    pub(crate) fn booked_prefix(&self, hashes: &[u64]) -> u32 {
        let run = hashes
            .iter()
            .take_while(|h| self.blocks.contains_key(h))
            .count();
        u32::try_from(run).unwrap_or(u32::MAX)
    }

    pub(crate) fn add_blocks(&mut self, hashes: &[u64]) {
        for h in hashes {
            *self.blocks.entry(*h).or_insert(0) += 1;
        }
    }

    pub(crate) fn remove_blocks(&mut self, hashes: &[u64]) {
        for h in hashes {
            match self.blocks.get_mut(h) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    self.blocks.remove(h);
                }
                None => debug_assert!(
                    false,
                    "{}: releasing block {h:#x} it does not hold",
                    self.id
                ),
            }
        }
    }

    pub(crate) fn snapshot(&self, overloaded: bool) -> RankSnapshot {
        RankSnapshot {
            rank: self.id,
            prefill_tokens: self.prefill_tokens,
            decode_blocks: self.decode_blocks(),
            reserved_blocks: self.reserved_blocks,
            requests: self.requests,
            total_kv_blocks: self.total_kv_blocks,
            max_num_batched_tokens: self.batch_tokens,
            over_reject_threshold: self.over,
            worker_overloaded: overloaded,
        }
    }
}

pub(crate) fn saturating_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// One rank as `Observe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankSnapshot {
    pub rank: RankId,
    pub prefill_tokens: u64,
    pub decode_blocks: u64,
    pub reserved_blocks: u64,
    pub requests: u32,
    pub total_kv_blocks: Option<u64>,
    pub max_num_batched_tokens: u64,
    pub over_reject_threshold: bool,
    pub worker_overloaded: bool,
}

/// Read-only view of one rank's booked load, for placement.
#[derive(Debug, Clone, Copy)]
pub struct RankLoad<'a> {
    state: &'a RankState,
}

impl<'a> RankLoad<'a> {
    pub(crate) fn of(state: &'a RankState) -> Self {
        Self { state }
    }

    pub fn id(&self) -> RankId {
        self.state.id
    }

    pub fn prefill_tokens(&self) -> u64 {
        self.state.prefill_tokens
    }

    /// Unique booked blocks.
    pub fn decode_blocks(&self) -> u64 {
        self.state.decode_blocks()
    }

    pub fn reserved_blocks(&self) -> u64 {
        self.state.reserved_blocks
    }

    /// Booked plus reserved blocks.
    pub fn committed_blocks(&self) -> u64 {
        self.state.committed_blocks()
    }

    pub fn block_size(&self) -> u32 {
        self.state.block_size
    }

    pub fn total_kv_blocks(&self) -> Option<u64> {
        self.state.total_kv_blocks
    }

    /// Whether the class (by index) may commit `need` more blocks here.
    pub fn has_room(&self, class: usize, need: u64) -> bool {
        self.state.lines.get(class).is_some() && self.state.has_room(class, need)
    }

    /// Whether this router's prefill credits here cover `tokens` for the class (always with
    /// prefill credits off or no prefill line for the class).
    pub fn prefill_covers(&self, class: usize, tokens: u64) -> bool {
        self.state.lines.get(class).is_some() && self.state.prefill_covers(class, tokens)
    }

    /// Blocks of `hashes` not already booked here.
    pub fn new_blocks(&self, hashes: &[u64]) -> u64 {
        self.state.new_blocks(hashes)
    }

    /// Leading blocks of `hashes` booked here by requests in flight: their prefill stores
    /// those blocks, so a request queued behind them finds them cached.
    pub fn booked_prefix(&self, hashes: &[u64]) -> u32 {
        self.state.booked_prefix(hashes)
    }

    /// Load-only cost of placing a request here: prefill blocks after it joins, plus
    /// committed decode blocks, plus the blocks it adds.
    pub fn cost(&self, hashes: &[u64], uncached_tokens: u64) -> f64 {
        let bs = f64::from(self.state.block_size.max(1));
        (self.state.prefill_tokens + uncached_tokens) as f64 / bs
            + self.committed_blocks() as f64
            + self.new_blocks(hashes) as f64
    }
}
