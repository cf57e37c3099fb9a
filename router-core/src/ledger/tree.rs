//! A fixed-shape max segment tree over dense rank slots. Each class's gate keeps one, so
//! "does any rank have room for N blocks" is a read of the root and an update is one walk
//! up (stopping early once a parent does not change), with no allocation.

#[derive(Debug, Clone)]
pub(crate) struct MaxTree<T> {
    leaves: usize,
    nodes: Vec<T>,
    floor: T,
}

impl<T: Copy + Ord> MaxTree<T> {
    /// A tree with room for `len` slots, all at `floor` (the "excluded" value).
    pub(crate) fn new(len: usize, floor: T) -> Self {
        let leaves = len.max(1).next_power_of_two();
        Self {
            leaves,
            nodes: vec![floor; 2 * leaves],
            floor,
        }
    }

    /// Grows to at least `len` slots, keeping values.
    pub(crate) fn grow(&mut self, len: usize) {
        if len <= self.leaves {
            return;
        }
        let mut bigger = Self::new(len, self.floor);
        for i in 0..self.leaves {
            bigger.nodes[bigger.leaves + i] = self.nodes[self.leaves + i];
        }
        for p in (1..bigger.leaves).rev() {
            bigger.nodes[p] = max(bigger.nodes[2 * p], bigger.nodes[2 * p + 1]);
        }
        *self = bigger;
    }

    pub(crate) fn get(&self, slot: usize) -> T {
        self.nodes[self.leaves + slot]
    }

    pub(crate) fn set(&mut self, slot: usize, value: T) {
        debug_assert!(
            slot < self.leaves,
            "slot {slot} outside tree of {}",
            self.leaves
        );
        let mut p = self.leaves + slot;
        if self.nodes[p] == value {
            return;
        }
        self.nodes[p] = value;
        while p > 1 {
            p /= 2;
            let v = max(self.nodes[2 * p], self.nodes[2 * p + 1]);
            if self.nodes[p] == v {
                break;
            }
            self.nodes[p] = v;
        }
    }

    /// The largest value (the floor when empty).
    pub(crate) fn max(&self) -> T {
        self.nodes[1]
    }

    /// The largest value and its leftmost slot over all slots except the sorted `excluded`
    /// ones. Costs O(|excluded| · log n).
    pub(crate) fn max_excluding(&self, excluded: &[usize]) -> Option<(T, usize)> {
        debug_assert!(
            excluded.windows(2).all(|w| w[0] < w[1]),
            "excluded must be sorted"
        );
        self.best_in(1, 0, self.leaves, excluded)
    }

    fn best_in(&self, p: usize, lo: usize, hi: usize, excluded: &[usize]) -> Option<(T, usize)> {
        if self.nodes[p] <= self.floor {
            return None;
        }
        let start = excluded.partition_point(|&e| e < lo);
        let end = excluded.partition_point(|&e| e < hi);
        let inside = &excluded[start..end];
        if inside.is_empty() {
            // Descend to the leftmost maximum of this subtree.
            let mut q = p;
            let (mut l, mut h) = (lo, hi);
            while q < self.leaves {
                let mid = (l + h) / 2;
                if self.nodes[2 * q] >= self.nodes[2 * q + 1] {
                    q *= 2;
                    h = mid;
                } else {
                    q = 2 * q + 1;
                    l = mid;
                }
            }
            return Some((self.nodes[q], l));
        }
        if p >= self.leaves {
            return None; // this leaf is excluded
        }
        let mid = (lo + hi) / 2;
        let left = self.best_in(2 * p, lo, mid, inside);
        let right = self.best_in(2 * p + 1, mid, hi, inside);
        match (left, right) {
            (Some(l), Some(r)) => Some(if l.0 >= r.0 { l } else { r }),
            (l, r) => l.or(r),
        }
    }
}

fn max<T: Ord>(a: T, b: T) -> T {
    if b > a { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn tree_agrees_with_a_plain_scan(
            values in proptest::collection::vec(-50i64..50, 1..70),
            updates in proptest::collection::vec((0usize..70, -50i64..50), 0..40),
            excluded in proptest::collection::btree_set(0usize..70, 0..6),
        ) {
            let mut plain = values.clone();
            let mut tree = MaxTree::new(4, i64::MIN);
            tree.grow(plain.len());
            for (i, v) in plain.iter().enumerate() { tree.set(i, *v); }
            for (i, v) in updates {
                let i = i % plain.len();
                plain[i] = v;
                tree.set(i, v);
            }
            let best = plain.iter().copied().max();
            prop_assert_eq!(Some(tree.max()), best);
            let (value, arg) = tree.max_excluding(&[]).expect("non-empty");
            prop_assert_eq!(Some(value), best);
            prop_assert_eq!(Some(plain[arg]), best);
            prop_assert!(plain[..arg].iter().all(|v| Some(*v) < best));
            let excluded: Vec<usize> = excluded.into_iter().filter(|e| *e < plain.len()).collect();
            let want = plain.iter().enumerate().filter(|(i, _)| !excluded.contains(i))
                .map(|(i, v)| (*v, i)).fold(None, |acc: Option<(i64, usize)>, (v, i)| match acc {
                    Some((bv, _)) if bv >= v => acc,
                    _ => Some((v, i)),
                });
            prop_assert_eq!(tree.max_excluding(&excluded), want);
        }
    }
}
