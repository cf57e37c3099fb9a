//! Randomised properties of the class queues, checked against a plain model of the live
//! entries: totals always match, every ticket leaves at most once, nothing is dispatched
//! at or past its deadline, a class always dispatches its (deadline, seq)-least entry, and
//! a pop returns nothing only when no class with a dispatchable head has entries.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        class: u16,
        cost: u64,
        raw: u64,
        lag: u64,
        workers: usize,
    },
    Advance(u64),
    Pop {
        mask: u8,
    },
    Expire,
    Remove {
        pick: usize,
    },
    RemoveUnknown,
}

fn op() -> impl Strategy<Value = Op> {
    let class = prop_oneof![9 => 0u16..3, 1 => Just(7u16)];
    let workers = prop_oneof![1 => Just(0usize), 6 => 1usize..4];
    let enqueue = (class, 0u64..60, 0u64..120, 0u64..200, workers).prop_map(
        |(class, cost, raw, lag, workers)| Op::Enqueue {
            class,
            cost,
            raw,
            lag,
            workers,
        },
    );
    prop_oneof![
        6 => enqueue,
        2 => (0u64..150).prop_map(Op::Advance),
        4 => any::<u8>().prop_map(|mask| Op::Pop { mask }),
        1 => Just(Op::Expire),
        1 => any::<usize>().prop_map(|pick| Op::Remove { pick }),
        1 => Just(Op::RemoveUnknown),
    ]
}

fn specs() -> impl Strategy<Value = Vec<QueueClassSpec>> {
    let one = (
        1u64..80,
        50u64..2_000,
        proptest::option::of(0u64..12),
        proptest::option::of(0u64..800),
    )
        .prop_map(|(quantum, slo, requests, tokens)| QueueClassSpec {
            quantum,
            slo: Duration::from_micros(slo),
            request_limit_per_worker: requests,
            token_limit_per_worker: tokens,
        });
    proptest::collection::vec(one, 1..4)
}

/// Model of one live entry.
#[derive(Debug, Clone, Copy)]
struct Live {
    class: usize,
    deadline: Timestamp,
    raw: u64,
}

struct Model {
    specs: Vec<QueueClassSpec>,
    live: BTreeMap<QueueTicket, Live>,
    left: BTreeSet<QueueTicket>,
    now: Timestamp,
}

impl Model {
    fn leave(&mut self, ticket: QueueTicket) -> Live {
        let live = self
            .live
            .remove(&ticket)
            .expect("a leaving ticket was live");
        assert!(self.left.insert(ticket), "ticket {ticket:?} left twice");
        live
    }

    fn class_live(&self, class: usize) -> impl Iterator<Item = (QueueTicket, Live)> + '_ {
        self.live
            .iter()
            .filter(move |(_, l)| l.class == class)
            .map(|(&t, &l)| (t, l))
    }

    fn expected_rejection(
        &self,
        class: u16,
        arrival: Timestamp,
        workers: usize,
    ) -> Option<&'static str> {
        let Some(spec) = self.specs.get(usize::from(class)) else {
            return Some("unknown_class");
        };
        if self.now >= arrival + spec.slo {
            return Some("expired");
        }
        let workers = workers as u64;
        let len = self.class_live(usize::from(class)).count() as u64;
        let tokens: u64 = self
            .class_live(usize::from(class))
            .map(|(_, l)| l.raw)
            .sum();
        let over = |per: Option<u64>, current: u64| {
            per.is_some_and(|p| current >= p.saturating_mul(workers))
        };
        (over(spec.request_limit_per_worker, len) || over(spec.token_limit_per_worker, tokens))
            .then_some("limit_reached")
    }

    fn check_expired(&mut self, expired: &[Expired<u32>]) {
        let keys: Vec<_> = expired.iter().map(|e| (e.deadline, e.ticket)).collect();
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "expired not in deadline order"
        );
        for e in expired {
            let live = self.leave(e.ticket);
            assert_eq!((live.class, live.deadline), (e.class.index(), e.deadline));
            assert!(e.deadline <= self.now, "shed before its deadline");
        }
        assert!(
            self.live.values().all(|l| l.deadline > self.now),
            "expired entry left queued"
        );
    }

    fn check_totals(&self, q: &ClassQueues<u32>) {
        assert_eq!(q.len(), self.live.len());
        assert_eq!(q.tokens(), self.live.values().map(|l| l.raw).sum::<u64>());
        for c in 0..self.specs.len() {
            let id = ClassId(c as u16);
            let tickets: Vec<_> = q.iter_class(id).map(|e| e.ticket).collect();
            let mut model: Vec<_> = self.class_live(c).map(|(t, l)| (l.deadline, t)).collect();
            model.sort();
            assert_eq!(
                tickets,
                model.into_iter().map(|(_, t)| t).collect::<Vec<_>>()
            );
            assert_eq!(
                q.class_tokens(id),
                self.class_live(c).map(|(_, l)| l.raw).sum::<u64>()
            );
            if q.class_len(id) == 0 {
                assert_eq!(q.deficit(id), 0, "an empty class holds no credit");
            }
        }
        assert_eq!(
            q.next_deadline(),
            self.live.values().map(|l| l.deadline).min()
        );
    }
}

fn run(specs: Vec<QueueClassSpec>, ops: Vec<Op>) {
    let mut q = ClassQueues::<u32>::new(specs.clone()).expect("valid specs");
    let mut m = Model {
        specs,
        live: BTreeMap::new(),
        left: BTreeSet::new(),
        now: Timestamp(1_000),
    };
    let mut issued = BTreeSet::new();
    for (i, op) in ops.into_iter().enumerate() {
        let payload = i as u32;
        match op {
            Op::Enqueue {
                class,
                cost,
                raw,
                lag,
                workers,
            } => {
                let arrival = Timestamp(m.now.0.saturating_sub(lag));
                let expected = m.expected_rejection(class, arrival, workers);
                match q.enqueue(ClassId(class), payload, cost, raw, arrival, m.now, workers) {
                    Ok(ticket) => {
                        assert_eq!(expected, None);
                        assert!(issued.insert(ticket), "ticket reused");
                        let c = usize::from(class);
                        let deadline = arrival + m.specs[c].slo;
                        m.live.insert(
                            ticket,
                            Live {
                                class: c,
                                deadline,
                                raw,
                            },
                        );
                    }
                    Err(rej) => {
                        assert_eq!(rej.payload, payload);
                        let reason = serde_json::to_value(&rej.reason).expect("serialise");
                        assert_eq!(reason["reason"].as_str(), expected);
                    }
                }
            }
            Op::Advance(us) => m.now = Timestamp(m.now.0 + us),
            Op::Pop { mask } => {
                let ready = |c: usize| mask & (1 << c) != 0;
                let pop = q.pop_next(m.now, |c, _| ready(c.index()));
                m.check_expired(&pop.expired);
                match pop.popped {
                    Some(d) => {
                        let c = d.class.index();
                        assert!(ready(c), "dispatched a blocked class");
                        assert!(d.deadline > m.now, "dispatched at or past its deadline");
                        let least = m.class_live(c).map(|(t, l)| (l.deadline, t)).min();
                        assert_eq!(
                            least,
                            Some((d.deadline, d.ticket)),
                            "not the class's least entry"
                        );
                        m.leave(d.ticket);
                    }
                    None => assert!(
                        m.live.values().all(|l| !ready(l.class)),
                        "a dispatchable class had entries but nothing was popped"
                    ),
                }
            }
            Op::Expire => {
                let expired = q.expire(m.now);
                m.check_expired(&expired);
            }
            Op::Remove { pick } => {
                let ticket = m.live.keys().nth(pick % m.live.len().max(1)).copied();
                if let Some(ticket) = ticket {
                    let removed = q.remove(ticket, m.now).expect("live ticket is queued");
                    let live = m.leave(ticket);
                    assert_eq!(
                        (removed.class.index(), removed.deadline),
                        (live.class, live.deadline)
                    );
                }
            }
            Op::RemoveUnknown => {
                if let Some(&gone) = m.left.iter().next() {
                    assert_eq!(q.remove(gone, m.now), None, "a ticket left twice");
                }
                assert_eq!(q.remove(QueueTicket(u64::MAX), m.now), None);
            }
        }
        m.check_totals(&q);
    }
    assert!(
        issued
            .iter()
            .all(|t| m.live.contains_key(t) != m.left.contains(t))
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn queues_match_a_model_of_live_entries(
        specs in specs(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        run(specs, ops);
    }
}
