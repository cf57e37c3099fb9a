//! Deficit-round-robin arbitration across class queues.
//!
//! The arbiter knows nothing about entries: it sees each class only through a poll that says
//! whether the class is empty, blocked (its head may not be dispatched now) or ready with the
//! cost of its head. It keeps one credit (`deficit`) per class, a ring `cursor` and a `carry`
//! class that still holds credit after its last dispatch and is offered first next time.
//!
//! Rules:
//! * a blocked class keeps its credit but earns none, so a fully blocked ring accrues nothing;
//! * a class whose credit covers its head is served before it earns more (carried credit is
//!   spent before the ring moves on);
//! * when one ring pass serves nobody, every ready class is advanced by the same number of
//!   virtual rounds at once, the fewest that lets one of them through, which keeps the
//!   quantum ratios exact without looping over empty rounds;
//! * an empty class holds no credit.

/// What a class offers the arbiter at one poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadState {
    Empty,
    Blocked,
    Ready(u64),
}

#[derive(Debug, Clone)]
pub(crate) struct Drr {
    quanta: Vec<u64>,
    deficits: Vec<u64>,
    cursor: usize,
    carry: Option<usize>,
    /// Poll results of the current `choose` call, reused to avoid an allocation per pop.
    scratch: Vec<Option<HeadState>>,
}

impl Drr {
    /// `quanta` must all be > 0 (validated by the caller); zero is treated as one.
    pub(crate) fn new(quanta: Vec<u64>) -> Self {
        let n = quanta.len();
        Self {
            quanta: quanta.into_iter().map(|q| q.max(1)).collect(),
            deficits: vec![0; n],
            cursor: 0,
            carry: None,
            scratch: Vec::with_capacity(n),
        }
    }

    pub(crate) fn deficit(&self, class: usize) -> u64 {
        self.deficits.get(class).copied().unwrap_or(0)
    }

    pub(crate) fn cursor(&self) -> usize {
        self.cursor
    }

    pub(crate) fn carry(&self) -> Option<usize> {
        self.carry
    }

    /// The class became empty other than by a dispatch (expiry, removal): it loses its
    /// credit and its carry. Neither is a charge, and the cursor does not move.
    pub(crate) fn on_emptied(&mut self, class: usize) {
        if let Some(d) = self.deficits.get_mut(class) {
            *d = 0;
        }
        if self.carry == Some(class) {
            self.carry = None;
        }
    }

    /// Nothing is queued anywhere.
    pub(crate) fn on_idle(&mut self) {
        self.carry = None;
    }

    /// Picks the class whose head is dispatched next, or `None` when every class is empty
    /// or blocked. `poll` is called at most once per class. The caller must then pop that
    /// class's head and report it through [`Drr::on_take`].
    pub(crate) fn choose(&mut self, mut poll: impl FnMut(usize) -> HeadState) -> Option<usize> {
        let n = self.quanta.len();
        if n == 0 {
            return None;
        }
        let mut states = std::mem::take(&mut self.scratch);
        states.clear();
        states.resize(n, None);
        let picked = self.choose_with(&mut states, &mut poll);
        self.scratch = states;
        picked
    }

    fn choose_with(
        &mut self,
        states: &mut [Option<HeadState>],
        poll: &mut impl FnMut(usize) -> HeadState,
    ) -> Option<usize> {
        let n = states.len();
        let mut state = |c: usize| *states[c].get_or_insert_with(|| poll(c));

        if let Some(c0) = self.carry.take().filter(|&c| c < n) {
            match state(c0) {
                HeadState::Ready(cost) if cost <= self.deficits[c0] => return Some(c0),
                HeadState::Empty => self.deficits[c0] = 0,
                HeadState::Ready(_) | HeadState::Blocked => {}
            }
        }

        let start = self.cursor % n;
        for k in 0..n {
            let c = (start + k) % n;
            match state(c) {
                HeadState::Empty => self.deficits[c] = 0,
                HeadState::Blocked => {}
                HeadState::Ready(cost) => {
                    if cost <= self.deficits[c] {
                        return Some(c);
                    }
                    self.deficits[c] = self.deficits[c].saturating_add(self.quanta[c]);
                    if cost <= self.deficits[c] {
                        return Some(c);
                    }
                }
            }
        }

        // Nobody fits after one round: fast-forward all ready classes by the fewest whole
        // rounds that let one through. Blocked and empty classes earn nothing.
        let ready = |c: usize| match states[c] {
            Some(HeadState::Ready(cost)) => Some(cost),
            _ => None,
        };
        let rounds = (0..n)
            .filter_map(|c| {
                let cost = ready(c)?;
                Some(
                    cost.saturating_sub(self.deficits[c])
                        .div_ceil(self.quanta[c]),
                )
            })
            .min()?;
        for c in 0..n {
            if ready(c).is_some() {
                let credit = self.quanta[c].saturating_mul(rounds);
                self.deficits[c] = self.deficits[c].saturating_add(credit);
            }
        }
        let picked = (0..n)
            .map(|k| (start + k) % n)
            .find(|&c| ready(c).is_some_and(|cost| cost <= self.deficits[c]));
        debug_assert!(
            picked.is_some(),
            "bulk rounds must let at least one class through"
        );
        picked
    }

    /// The head of `class` (costing `cost`) was dispatched; `now_empty` tells whether the
    /// class has nothing left.
    pub(crate) fn on_take(&mut self, class: usize, cost: u64, now_empty: bool) {
        let n = self.quanta.len();
        let Some(deficit) = self.deficits.get_mut(class) else {
            return;
        };
        self.cursor = (class + 1) % n;
        *deficit = deficit.saturating_sub(cost);
        if now_empty {
            *deficit = 0;
            self.carry = None;
        } else {
            self.carry = (*deficit > 0).then_some(class);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `pops` heads from backlogged classes of fixed cost, returning the order.
    fn serve(drr: &mut Drr, costs: &[u64], pops: usize) -> Vec<usize> {
        (0..pops)
            .map(|_| {
                let c = drr
                    .choose(|c| HeadState::Ready(costs[c]))
                    .expect("backlogged");
                drr.on_take(c, costs[c], false);
                c
            })
            .collect()
    }

    #[test]
    fn equal_quanta_alternate() {
        let mut drr = Drr::new(vec![10, 10]);
        assert_eq!(serve(&mut drr, &[10, 10], 4), vec![0, 1, 0, 1]);
    }

    #[test]
    fn bulk_rounds_keep_weights_and_leftover_credit() {
        let mut drr = Drr::new(vec![1000, 2000]);
        let c = drr.choose(|c| HeadState::Ready([7000, 9000][c]));
        assert_eq!(c, Some(1));
        drr.on_take(1, 9000, false);
        assert_eq!((drr.deficit(0), drr.deficit(1)), (5000, 1000));
        assert_eq!(drr.carry(), Some(1));
        assert_eq!(drr.cursor(), 0);
    }

    #[test]
    fn choose_polls_each_class_at_most_once() {
        let mut drr = Drr::new(vec![2, 2, 2]);
        assert_eq!(serve(&mut drr, &[1, 1, 1], 1), vec![0]);
        assert_eq!(drr.carry(), Some(0), "class 0 keeps one unit of credit");
        let mut polls = [0u32; 3];
        let _ = drr.choose(|c| {
            polls[c] += 1;
            HeadState::Ready(50)
        });
        assert_eq!(polls, [1, 1, 1]);
    }

    #[test]
    fn no_classes_means_nothing_to_choose() {
        let mut drr = Drr::new(Vec::new());
        assert_eq!(drr.choose(|_| HeadState::Ready(1)), None);
    }
}
