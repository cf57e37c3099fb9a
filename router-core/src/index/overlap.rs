//! Overlap scores, and the prefix walk of the approximate index.
//!
//! A rank's score for a request is its matched prefix depth: how many of the request's blocks,
//! counted from the first, the rank holds without a hole. The walk keeps the set of ranks that
//! still match (sorted), intersects it with each next block's holders, and stops as soon as the
//! set is empty, so a lookup costs one hash-map probe per matched block, not one per request
//! block or per rank. (The concurrent index walks the same way over bitsets of rank slots; see
//! `concurrent.rs`.)

use crate::hashing::SequenceHash;
use crate::ids::RankId;
use serde::{Deserialize, Serialize};

/// Per-rank matched prefix depth (in blocks) for one request. Ranks that match nothing are
/// absent. Sorted by rank, so iteration is deterministic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlapScores {
    scores: Vec<(RankId, u32)>,
}

impl OverlapScores {
    /// Scores from (rank, depth) pairs; zero depths are dropped.
    pub fn from_pairs(mut scores: Vec<(RankId, u32)>) -> Self {
        scores.retain(|&(_, depth)| depth > 0);
        scores.sort_unstable();
        Self { scores }
    }

    /// Scores from (rank, depth) pairs already sorted by rank, with no zero depth.
    pub(crate) fn from_sorted(scores: Vec<(RankId, u32)>) -> Self {
        debug_assert!(scores.is_sorted_by_key(|&(rank, _)| rank));
        Self { scores }
    }

    /// The rank's matched depth in blocks (0 when it holds not even the first block).
    pub fn get(&self, rank: RankId) -> u32 {
        self.scores
            .binary_search_by_key(&rank, |&(r, _)| r)
            .map_or(0, |i| self.scores[i].1)
    }

    /// (rank, depth) for every rank with depth ≥ 1, by rank.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (RankId, u32)> + '_ {
        self.scores.iter().copied()
    }

    /// The deepest match; ties go to the lowest rank.
    pub fn best(&self) -> Option<(RankId, u32)> {
        self.scores
            .iter()
            .copied()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// Number of ranks matching at least one block.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }
}

/// The early-exit prefix walk. `holders(h)` gives the entries of block `h` sorted by rank
/// (empty when nobody holds it); `live(e)` gives the entry's rank if it counts (an
/// approximate index filters out expired entries here).
pub(crate) fn match_prefix<'a, E: 'a>(
    hashes: &[SequenceHash],
    mut holders: impl FnMut(SequenceHash) -> &'a [E],
    live: impl Fn(&E) -> Option<RankId>,
) -> OverlapScores {
    let Some((&first, rest)) = hashes.split_first() else {
        return OverlapScores::default();
    };
    let first_holders = holders(first);
    // One live holder of the first block (the common case): no merge, no `active` list.
    let mut live_ranks = first_holders.iter().filter_map(&live);
    let Some(only) = live_ranks.next() else {
        return OverlapScores::default();
    };
    if live_ranks.next().is_none() {
        let depth = 1 + single_rank_depth(rest, only, &mut holders, &live);
        return OverlapScores {
            scores: vec![(only, depth)],
        };
    }
    // Every rank holding the first block gets an entry (already in rank order); `active`
    // indexes the ones still matching, and a rank's depth is final once it drops out.
    let mut scores: Vec<(RankId, u32)> = Vec::with_capacity(first_holders.len());
    scores.extend(first_holders.iter().filter_map(&live).map(|r| (r, 1)));
    let mut active: Vec<usize> = (0..scores.len()).collect();
    let mut depth = 1u32;
    for (i, &h) in rest.iter().enumerate() {
        if let [slot] = active[..] {
            // One rank left: finish its walk without the merge.
            scores[slot].1 =
                depth + single_rank_depth(&rest[i..], scores[slot].0, &mut holders, &live);
            return OverlapScores { scores };
        }
        if active.is_empty() {
            break;
        }
        let next = holders(h);
        // Merge-intersect the active ranks with the live ranks of `next`, both sorted.
        let mut j = 0;
        let mut kept = 0;
        for i in 0..active.len() {
            let slot = active[i];
            let r = scores[slot].0;
            while j < next.len() && live(&next[j]).is_none_or(|nr| nr < r) {
                j += 1;
            }
            if j < next.len() && live(&next[j]) == Some(r) {
                active[kept] = slot;
                kept += 1;
            } else {
                scores[slot].1 = depth;
            }
        }
        active.truncate(kept);
        depth += 1;
    }
    for slot in active {
        scores[slot].1 = depth;
    }
    OverlapScores { scores }
}

/// Whether `rank` is a live entry of `entries` (sorted by rank).
fn contains_live<E>(entries: &[E], rank: RankId, live: &impl Fn(&E) -> Option<RankId>) -> bool {
    match entries {
        [] => false,
        [e] => live(e) == Some(rank),
        _ => entries.iter().any(|e| live(e) == Some(rank)),
    }
}

/// How many of `hashes`, from the first, `rank` holds without a hole.
fn single_rank_depth<'a, E: 'a>(
    hashes: &[SequenceHash],
    rank: RankId,
    holders: &mut impl FnMut(SequenceHash) -> &'a [E],
    live: &impl Fn(&E) -> Option<RankId>,
) -> u32 {
    let mut depth = 0u32;
    for &h in hashes {
        if !contains_live(holders(h), rank, live) {
            break;
        }
        depth += 1;
    }
    depth
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashMap;

    fn r(w: u64) -> RankId {
        RankId::new(w, 0)
    }

    #[test]
    fn walk_scores_consecutive_depth_and_ignores_holes() {
        // rank 1 holds blocks 0,1,2; rank 2 holds 0 and 2 (a hole at 1); rank 3 holds only 1.
        let h: Vec<SequenceHash> = (0..4).map(SequenceHash).collect();
        let mut m: FxHashMap<SequenceHash, Vec<RankId>> = FxHashMap::default();
        m.insert(h[0], vec![r(1), r(2)]);
        m.insert(h[1], vec![r(1), r(3)]);
        m.insert(h[2], vec![r(1), r(2)]);
        let scores = match_prefix(&h, |k| m.get(&k).map_or(&[][..], |v| v), |r| Some(*r));
        assert_eq!(
            scores.iter().collect::<Vec<_>>(),
            vec![(r(1), 3), (r(2), 1)]
        );
        assert_eq!(scores.get(r(3)), 0);
        assert_eq!(scores.best(), Some((r(1), 3)));
        assert!(match_prefix(&[], |_| &[][..], |r: &RankId| Some(*r)).is_empty());
    }

    #[test]
    fn walk_stops_probing_once_no_rank_matches() {
        let h: Vec<SequenceHash> = (0..100).map(SequenceHash).collect();
        let holder = [r(1)];
        let mut probes = 0;
        let scores = match_prefix(
            &h,
            |k| {
                probes += 1;
                if k.0 < 3 { &holder[..] } else { &[][..] }
            },
            |r| Some(*r),
        );
        assert_eq!(scores.get(r(1)), 3);
        assert_eq!(probes, 4);
    }

    #[test]
    fn best_breaks_ties_towards_the_lowest_rank() {
        let s = OverlapScores::from_pairs(vec![(r(4), 2), (r(2), 2), (r(3), 1), (r(9), 0)]);
        assert_eq!(s.best(), Some((r(2), 2)));
        assert_eq!(s.len(), 3);
    }
}
