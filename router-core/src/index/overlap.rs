//! Overlap scores and the prefix walk that computes them.
//!
//! A rank's score for a request is its matched prefix depth: how many of the request's blocks,
//! counted from the first, the rank holds without a hole. The walk keeps the set of ranks that
//! still match (sorted), intersects it with each next block's holders, and stops as soon as the
//! set is empty, so a lookup costs one hash-map probe per matched block, not one per request
//! block or per rank.

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

/// The set of ranks holding one block, sorted. One or two holders (nearly every block) need
/// no allocation of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RankSet {
    One(RankId),
    Two([RankId; 2]),
    /// Three or more.
    Many(Box<[RankId]>),
}

impl RankSet {
    /// The set of exactly these ranks (sorted, distinct, not empty).
    fn of(sorted: &[RankId]) -> RankSet {
        match *sorted {
            [one] => RankSet::One(one),
            [a, b] => RankSet::Two([a, b]),
            _ => RankSet::Many(sorted.into()),
        }
    }

    pub(crate) fn as_slice(&self) -> &[RankId] {
        match self {
            RankSet::One(r) => std::slice::from_ref(r),
            RankSet::Two(rs) => rs,
            RankSet::Many(rs) => rs,
        }
    }

    pub(crate) fn contains(&self, rank: RankId) -> bool {
        match self {
            RankSet::One(r) => *r == rank,
            RankSet::Two([a, b]) => *a == rank || *b == rank,
            RankSet::Many(rs) => rs.binary_search(&rank).is_ok(),
        }
    }

    /// This set plus `rank`.
    pub(crate) fn with(&self, rank: RankId) -> RankSet {
        match *self {
            RankSet::One(r) if r < rank => RankSet::Two([r, rank]),
            RankSet::One(r) if r > rank => RankSet::Two([rank, r]),
            RankSet::One(_) => self.clone(),
            _ => {
                let s = self.as_slice();
                match s.binary_search(&rank) {
                    Ok(_) => self.clone(),
                    Err(at) => {
                        let mut v = Vec::with_capacity(s.len() + 1);
                        v.extend_from_slice(&s[..at]);
                        v.push(rank);
                        v.extend_from_slice(&s[at..]);
                        RankSet::Many(v.into_boxed_slice())
                    }
                }
            }
        }
    }

    /// This set minus `rank`; `None` when nothing is left.
    pub(crate) fn without(&self, rank: RankId) -> Option<RankSet> {
        match *self {
            RankSet::One(r) if r == rank => None,
            RankSet::Two([a, b]) if a == rank => Some(RankSet::One(b)),
            RankSet::Two([a, b]) if b == rank => Some(RankSet::One(a)),
            RankSet::Many(ref rs) => match rs.binary_search(&rank) {
                Err(_) => Some(self.clone()),
                Ok(at) if rs.len() == 3 => {
                    let mut two = [rs[0], rs[1]];
                    if at < 2 {
                        two[at] = rs[2];
                        two.sort_unstable();
                    }
                    Some(RankSet::Two(two))
                }
                Ok(at) => {
                    let v: Vec<RankId> = rs[..at].iter().chain(&rs[at + 1..]).copied().collect();
                    Some(RankSet::of(&v))
                }
            },
            _ => Some(self.clone()),
        }
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
    fn rank_sets_stay_sorted_and_shrink_back_to_one() {
        let s = RankSet::One(r(5)).with(r(1)).with(r(9)).with(r(5));
        assert_eq!(s.as_slice(), &[r(1), r(5), r(9)]);
        let four = s.with(r(7));
        assert_eq!(four.as_slice(), &[r(1), r(5), r(7), r(9)]);
        assert_eq!(four.without(r(7)), Some(s.clone()));
        for (gone, left) in [(1, [5, 9]), (5, [1, 9]), (9, [1, 5])] {
            assert_eq!(s.without(r(gone)), Some(RankSet::Two(left.map(r))));
            assert!(!s.without(r(gone)).is_some_and(|t| t.contains(r(gone))));
        }
        assert_eq!(RankSet::One(r(5)).with(r(1)), RankSet::Two([r(1), r(5)]));
        assert_eq!(RankSet::One(r(5)).with(r(9)), RankSet::Two([r(5), r(9)]));
        let s = s.without(r(5)).and_then(|s| s.without(r(1)));
        assert_eq!(s, Some(RankSet::One(r(9))));
        assert_eq!(s.clone().map(|s| s.without(r(4))), Some(s.clone()));
        assert_eq!(RankSet::One(r(9)).without(r(9)), None);
        assert_eq!(RankSet::One(r(9)).without(r(3)), Some(RankSet::One(r(9))));
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
