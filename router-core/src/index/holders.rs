//! Ranks as small dense *slots*, so the concurrent index can store a block's holders as bits,
//! and the slot table that turns slots back into [`RankId`]s.
//!
//! Slots are handed out by the writer's [`Slots`] (lowest free first) and published to
//! readers as an immutable [`SlotTable`] snapshot. A rank removed and added again gets its old
//! slot back. When a freed slot goes to a *different* rank the table's `generation` changes, and
//! a reader whose walk straddled that change walks again, so a bit is never credited to a rank
//! that did not set it.

use crate::ids::RankId;
use rustc_hash::FxHashMap;

/// A rank's small dense number within one index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(u32);

impl Slot {
    /// Which 64-slot word of a bitset holds this slot.
    pub(crate) fn word(self) -> usize {
        (self.0 / 64) as usize
    }

    /// This slot's bit within its word.
    pub(crate) fn bit(self) -> u64 {
        1 << (self.0 % 64)
    }

    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

/// Calls `f` with every slot whose bit is set in word `word_index` of a set.
pub(crate) fn for_each_bit(word_index: usize, mut bits: u64, mut f: impl FnMut(Slot)) {
    while bits != 0 {
        let at = bits.trailing_zeros();
        bits &= bits - 1;
        // A word index comes from a bitset of at most u32::MAX / 64 words.
        f(Slot(
            u32::try_from(word_index * 64).unwrap_or(u32::MAX - 63) + at,
        ));
    }
}

/// What readers see of the slot assignment: the rank in each slot, and the assigned slots in
/// rank order (so scores come out sorted without sorting them).
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotTable {
    /// Changes whenever a slot goes to a different rank than the one it last had.
    pub(crate) generation: u64,
    /// Per slot: its rank (`None`: free).
    ranks: Vec<Option<RankId>>,
    in_order: Vec<(RankId, Slot)>,
}

impl SlotTable {
    /// Words of 64 slots a bitset over every slot needs (at least one).
    pub(crate) fn words(&self) -> usize {
        self.ranks.len().div_ceil(64).max(1)
    }

    pub(crate) fn rank(&self, slot: Slot) -> Option<RankId> {
        self.ranks.get(slot.index()).copied().flatten()
    }

    /// (rank, depth) sorted by rank for the slots of `first` (the holders of a request's first
    /// block, one mask per word), with `depth_of[slot]` their depths. Slots the table does not
    /// know are left out (their rank was added after the table was read: as if the lookup
    /// came earlier).
    pub(crate) fn scores(&self, first: &[u64], depth_of: &[u32]) -> Vec<(RankId, u32)> {
        let matched: u32 = first.iter().map(|w| w.count_ones()).sum();
        if matched <= 8 {
            let mut out = Vec::with_capacity(matched as usize);
            for (i, &mask) in first.iter().enumerate() {
                for_each_bit(i, mask, |s| {
                    out.extend(self.rank(s).map(|r| (r, depth_of[s.index()])));
                });
            }
            out.sort_unstable_by_key(|&(rank, _)| rank);
            return out;
        }
        // Many ranks matched: read the depths off in rank order.
        let mut out = Vec::with_capacity(matched as usize);
        out.extend(self.in_order.iter().filter_map(|&(rank, slot)| {
            let depth = depth_of.get(slot.index()).copied().unwrap_or(0);
            (depth > 0).then_some((rank, depth))
        }));
        out
    }
}

/// The writer's slot assignment.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    by_rank: FxHashMap<RankId, Slot>,
    /// Per slot: its rank, or for a free slot the rank that had it last.
    owners: Vec<(RankId, bool)>,
    generation: u64,
}

impl Slots {
    /// The rank's slot, if it has one.
    pub(crate) fn get(&self, rank: RankId) -> Option<Slot> {
        self.by_rank.get(&rank).copied()
    }

    /// The rank's slot, assigning one if needed (its previous slot if still free, else the
    /// lowest free one, else a new one). Returns it and whether the table changed.
    pub(crate) fn assign(&mut self, rank: RankId) -> (Slot, bool) {
        if let Some(slot) = self.get(rank) {
            return (slot, false);
        }
        let free = |&(_, taken): &(RankId, bool)| !taken;
        let index = match self.owners.iter().position(|o| free(o) && o.0 == rank) {
            Some(i) => i,
            None => match self.owners.iter().position(free) {
                Some(i) => {
                    // Someone else's slot: readers must not mix the two owners' bits.
                    self.generation += 1;
                    i
                }
                None => {
                    self.owners.push((rank, false));
                    self.owners.len() - 1
                }
            },
        };
        self.owners[index] = (rank, true);
        let slot = Slot(u32::try_from(index).unwrap_or(u32::MAX));
        self.by_rank.insert(rank, slot);
        (slot, true)
    }

    /// Frees the rank's slot (its bits must all be cleared already). True when it had one.
    pub(crate) fn release(&mut self, rank: RankId) -> bool {
        let Some(slot) = self.by_rank.remove(&rank) else {
            return false;
        };
        self.owners[slot.index()].1 = false;
        true
    }

    /// The snapshot readers use.
    pub(crate) fn table(&self) -> SlotTable {
        let mut in_order: Vec<(RankId, Slot)> =
            self.by_rank.iter().map(|(&r, &s)| (r, s)).collect();
        in_order.sort_unstable_by_key(|&(rank, _)| rank);
        let mut ranks = vec![None; self.owners.len()];
        for &(rank, slot) in &in_order {
            ranks[slot.index()] = Some(rank);
        }
        SlotTable {
            generation: self.generation,
            ranks,
            in_order,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_name_their_slots_across_words() {
        let mut seen = Vec::new();
        for_each_bit(2, 1 << 5 | 1 << 63, |s| seen.push(s.index()));
        assert_eq!(seen, vec![133, 191]);
        assert_eq!((Slot(133).word(), Slot(133).bit()), (2, 1 << 5));
    }

    #[test]
    fn a_returning_rank_gets_its_slot_back_and_a_stranger_bumps_the_generation() {
        let (a, b, c) = (RankId::new(1, 0), RankId::new(2, 0), RankId::new(3, 0));
        let mut s = Slots::default();
        assert_eq!(s.assign(a), (Slot(0), true));
        assert_eq!(s.assign(b), (Slot(1), true));
        assert_eq!(s.assign(a), (Slot(0), false));
        assert!(s.release(a) && !s.release(a));
        assert_eq!(s.table().rank(Slot(0)), None);
        assert_eq!(s.assign(a), (Slot(0), true));
        assert_eq!(s.table().generation, 0);
        assert!(s.release(a));
        assert_eq!(s.assign(c), (Slot(0), true));
        let t = s.table();
        assert_eq!(
            (t.generation, t.rank(Slot(0)), t.rank(Slot(1))),
            (1, Some(c), Some(b))
        );
    }
}
