//! The placement indexes: an ordered load index and a map from a booking's first block
//! hash to the ranks that hold it, so selection scores only the ranks that hold a
//! request's prefix plus the best zero-overlap rank, instead of every rank.
//!
//! The load key of an eligible rank is `prefill_load_scale × booked prefill tokens /
//! block_size + committed decode blocks`. For a rank with no overlap and none of the
//! request's blocks, placement cost is that key plus a term that depends only on the
//! request and the block size, so the cheapest such rank has the lowest key. Keys live in
//! one min-tree per block size (ranks of overloaded workers are left out); each node keeps
//! its minimum and how many leaves tie at it, so a tied rank can be drawn uniformly in
//! O(log R). Both indexes are kept in `reindex`, `book` and `release`.

use super::BookingLedger;
use super::rank::{RankLoad, RankState};
use rustc_hash::FxHashMap;
use std::cmp::Ordering;

/// The minimum of a subtree and how many of its leaves hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    key: u64,
    count: u32,
}

const EMPTY: Node = Node {
    key: u64::MAX,
    count: 0,
};

fn combine(a: Node, b: Node) -> Node {
    match a.key.cmp(&b.key) {
        Ordering::Less => a,
        Ordering::Greater => b,
        Ordering::Equal => Node {
            key: a.key,
            count: a.count + b.count,
        },
    }
}

/// A min segment tree over rank slots that counts ties at each node's minimum.
#[derive(Debug, Clone)]
struct MinCountTree {
    leaves: usize,
    nodes: Vec<Node>,
}

impl MinCountTree {
    fn new(len: usize) -> Self {
        let leaves = len.max(1).next_power_of_two();
        Self {
            leaves,
            nodes: vec![EMPTY; 2 * leaves],
        }
    }

    fn grow(&mut self, len: usize) {
        if len <= self.leaves {
            return;
        }
        let mut bigger = Self::new(len);
        bigger.nodes[bigger.leaves..bigger.leaves + self.leaves]
            .copy_from_slice(&self.nodes[self.leaves..]);
        for p in (1..bigger.leaves).rev() {
            bigger.nodes[p] = combine(bigger.nodes[2 * p], bigger.nodes[2 * p + 1]);
        }
        *self = bigger;
    }

    fn set(&mut self, slot: usize, key: Option<u64>) {
        if key.is_none() && slot >= self.leaves {
            return;
        }
        self.grow(slot + 1);
        let leaf = key.map_or(EMPTY, |key| Node { key, count: 1 });
        let mut p = self.leaves + slot;
        if self.nodes[p] == leaf {
            return;
        }
        self.nodes[p] = leaf;
        while p > 1 {
            p /= 2;
            let v = combine(self.nodes[2 * p], self.nodes[2 * p + 1]);
            if self.nodes[p] == v {
                break;
            }
            self.nodes[p] = v;
        }
    }

    /// Minimum and tie count over `[lo, hi)` without the sorted `excluded` slots.
    fn min_excluding(&self, p: usize, lo: usize, hi: usize, excluded: &[usize]) -> Node {
        let start = excluded.partition_point(|&e| e < lo);
        let end = excluded.partition_point(|&e| e < hi);
        if start == end {
            return self.nodes[p];
        }
        if p >= self.leaves {
            return EMPTY;
        }
        let mid = (lo + hi) / 2;
        let inside = &excluded[start..end];
        combine(
            self.min_excluding(2 * p, lo, mid, inside),
            self.min_excluding(2 * p + 1, mid, hi, inside),
        )
    }

    /// The `nth` (0-based, in slot order) leaf holding `key`, excluded slots skipped.
    fn nth_with_key(&self, key: u64, excluded: &[usize], mut nth: u32) -> Option<usize> {
        let (mut p, mut lo, mut hi, mut excl) = (1, 0, self.leaves, excluded);
        while p < self.leaves {
            let mid = (lo + hi) / 2;
            let split = excl.partition_point(|&e| e < mid);
            let left = self.min_excluding(2 * p, lo, mid, &excl[..split]);
            if left.key == key {
                if nth < left.count {
                    (p, hi, excl) = (2 * p, mid, &excl[..split]);
                    continue;
                }
                nth -= left.count;
            }
            (p, lo, excl) = (2 * p + 1, mid, &excl[split..]);
        }
        let leaf = self.nodes[p];
        (leaf.key == key && leaf.count == 1 && nth == 0 && !excl.contains(&lo)).then_some(lo)
    }
}

/// Ranks of one block size.
#[derive(Debug, Clone)]
struct Group {
    block_size: u32,
    tree: MinCountTree,
}

/// The lowest load key of one block-size group, with how many ranks tie at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LowestLoad {
    pub group: usize,
    pub key: u64,
    pub ties: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct LoadIndex {
    scale: f64,
    groups: Vec<Group>,
    /// First block hash of a booking → (slot, bookings on that slot starting with it).
    first: FxHashMap<u64, Vec<(usize, u32)>>,
}

impl LoadIndex {
    pub(crate) fn new(scale: f64) -> Self {
        Self {
            scale,
            groups: Vec::new(),
            first: FxHashMap::default(),
        }
    }

    pub(crate) fn scale(&self) -> f64 {
        self.scale
    }

    /// The ordering key of a rank; non-negative, so its bits sort like the value.
    fn key(&self, rank: &RankState) -> u64 {
        let bs = f64::from(rank.block_size.max(1));
        let key = self.scale * (rank.prefill_tokens as f64 / bs) + rank.committed_blocks() as f64;
        // +0.0 for -0.0 or anything odd, so bit order is numeric order.
        if key > 0.0 { key.to_bits() } else { 0 }
    }

    /// Puts a rank in its block-size group (`None`: not eligible, or gone).
    pub(crate) fn update(&mut self, slot: usize, rank: Option<&RankState>) {
        let placed = rank.map(|r| (r.block_size, self.key(r)));
        if let Some((bs, _)) = placed
            && !self.groups.iter().any(|g| g.block_size == bs)
        {
            self.groups.push(Group {
                block_size: bs,
                tree: MinCountTree::new(slot + 1),
            });
        }
        for g in &mut self.groups {
            let key = placed.and_then(|(bs, key)| (bs == g.block_size).then_some(key));
            g.tree.set(slot, key);
        }
    }

    pub(crate) fn hold_first(&mut self, hashes: &[u64], slot: usize) {
        let Some(&first) = hashes.first() else {
            return;
        };
        let holders = self.first.entry(first).or_default();
        match holders.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, n)) => *n += 1,
            None => holders.push((slot, 1)),
        }
    }

    pub(crate) fn drop_first(&mut self, hashes: &[u64], slot: usize) {
        let Some(&first) = hashes.first() else {
            return;
        };
        let Some(holders) = self.first.get_mut(&first) else {
            return;
        };
        if let Some(i) = holders.iter().position(|(s, _)| *s == slot) {
            holders[i].1 -= 1;
            if holders[i].1 == 0 {
                holders.swap_remove(i);
            }
        }
        if holders.is_empty() {
            self.first.remove(&first);
        }
    }
}

impl BookingLedger {
    /// Sets the weight of booked prefill in placement cost and rebuilds the load index.
    /// The selector uses the index only when its own scale equals this one.
    pub fn set_prefill_load_scale(&mut self, scale: f64) {
        self.load = LoadIndex::new(scale);
        for (slot, rank) in self.slots.iter().enumerate() {
            let eligible = rank.as_ref().filter(|r| {
                !self
                    .workers
                    .get(&r.id.worker)
                    .is_some_and(super::workers::WorkerEntry::overloaded)
            });
            self.load.update(slot, eligible);
        }
        for held in self.bookings.values() {
            self.load.hold_first(&held.booking.block_hashes, held.slot);
        }
    }

    /// The prefill weight the load index is ordered by.
    pub fn prefill_load_scale(&self) -> f64 {
        self.load.scale()
    }

    pub(crate) fn slot_of(&self, rank: crate::ids::RankId) -> Option<usize> {
        self.by_rank.get(&rank).copied()
    }

    /// A rank's load when it is in the pool and its worker is not overloaded.
    pub(crate) fn eligible_load(&self, slot: usize) -> Option<RankLoad<'_>> {
        let rank = self.rank(slot)?;
        (!self.worker_is_overloaded(rank.id.worker)).then(|| RankLoad::of(rank))
    }

    /// Slots holding a booking whose first block is `first`.
    pub(crate) fn first_block_slots(&self, first: u64) -> impl Iterator<Item = usize> + '_ {
        self.load
            .first
            .get(&first)
            .into_iter()
            .flatten()
            .map(|(slot, _)| *slot)
    }

    /// Ranks of workers that are not overloaded.
    pub(crate) fn eligible_rank_count(&self) -> u32 {
        self.eligible_ranks
    }

    /// Per block-size group, the lowest load key over eligible slots not in the sorted
    /// `excluded`, and how many slots tie at it.
    pub(crate) fn lowest_loads<'a>(
        &'a self,
        excluded: &'a [usize],
    ) -> impl Iterator<Item = LowestLoad> + 'a {
        self.load
            .groups
            .iter()
            .enumerate()
            .filter_map(move |(group, g)| {
                let n = g.tree.min_excluding(1, 0, g.tree.leaves, excluded);
                (n.count > 0).then_some(LowestLoad {
                    group,
                    key: n.key,
                    ties: n.count,
                })
            })
    }

    /// The `nth` slot (in slot order) tied at `lowest`, excluded slots skipped.
    pub(crate) fn nth_lowest(
        &self,
        lowest: LowestLoad,
        excluded: &[usize],
        nth: u32,
    ) -> Option<usize> {
        self.load
            .groups
            .get(lowest.group)?
            .tree
            .nth_with_key(lowest.key, excluded, nth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn min_count_tree_agrees_with_a_plain_scan(
            values in proptest::collection::vec(proptest::option::of(0u64..6), 1..70),
            updates in proptest::collection::vec((0usize..70, proptest::option::of(0u64..6)), 0..40),
            excluded in proptest::collection::btree_set(0usize..70, 0..6),
        ) {
            let mut plain = values.clone();
            let mut tree = MinCountTree::new(3);
            for (i, v) in plain.iter().enumerate() { tree.set(i, *v); }
            for (i, v) in updates {
                let i = i % plain.len();
                plain[i] = v;
                tree.set(i, v);
            }
            let excluded: Vec<usize> = excluded.into_iter().collect();
            let kept: Vec<(usize, u64)> = plain.iter().enumerate()
                .filter(|(i, _)| !excluded.contains(i))
                .filter_map(|(i, v)| v.map(|v| (i, v))).collect();
            let node = tree.min_excluding(1, 0, tree.leaves, &excluded);
            match kept.iter().map(|(_, v)| *v).min() {
                None => prop_assert_eq!(node.count, 0),
                Some(min) => {
                    let tied: Vec<usize> = kept.iter().filter(|(_, v)| *v == min).map(|(i, _)| *i).collect();
                    prop_assert_eq!((node.key, node.count as usize), (min, tied.len()));
                    for (nth, slot) in tied.iter().enumerate() {
                        prop_assert_eq!(tree.nth_with_key(min, &excluded, nth as u32), Some(*slot));
                    }
                    prop_assert_eq!(tree.nth_with_key(min, &excluded, tied.len() as u32), None);
                }
            }
        }
    }
}
