//! Behavioural tests of the class queues: ordering, DRR fairness, expiry, removal and
//! introspection. Admission and limits are in `admission_tests.rs`, randomised properties
//! in `props.rs`; the helpers here are shared with both.

use super::*;
use std::time::Duration;

pub(super) const LONG_SLO: u64 = 1_000_000_000;

pub(super) fn t(us: u64) -> Timestamp {
    Timestamp(us)
}

pub(super) fn spec(quantum: u64, slo_us: u64) -> QueueClassSpec {
    QueueClassSpec::new(quantum, Duration::from_micros(slo_us))
}

pub(super) fn queues(quanta: &[u64]) -> ClassQueues<u32> {
    ClassQueues::new(quanta.iter().map(|&q| spec(q, LONG_SLO)).collect()).expect("valid specs")
}

/// Enqueues at time 0 with one worker and no limit concerns.
pub(super) fn push(q: &mut ClassQueues<u32>, class: u16, payload: u32, cost: u64) -> QueueTicket {
    q.enqueue(ClassId(class), payload, cost, cost, t(0), t(0), 1)
        .expect("accepted")
}

fn pop_classes(q: &mut ClassQueues<u32>, pops: usize) -> Vec<u16> {
    (0..pops)
        .map(|_| {
            let pop = q.pop_next(t(1), |_, _| true);
            assert!(pop.expired.is_empty());
            pop.popped.expect("backlogged").class.0
        })
        .collect()
}

pub(super) fn all_pass(_: ClassId, _: &u32) -> bool {
    true
}

#[test]
fn one_class_dispatches_fifo() {
    let mut q = queues(&[10]);
    for p in 0..5 {
        push(&mut q, 0, p, 4);
    }
    let order: Vec<u32> = (0..5)
        .filter_map(|_| q.pop_next(t(1), all_pass).popped)
        .map(|d| d.payload)
        .collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    assert!(q.is_empty());
}

#[test]
fn class_orders_earliest_deadline_first_then_enqueue_order() {
    let mut q = queues(&[10]);
    for (payload, arrival) in [(30, 30), (10, 10), (20, 20), (11, 10)] {
        q.enqueue(ClassId(0), payload, 1, 1, t(arrival), t(40), 1)
            .expect("accepted");
    }
    let seen: Vec<u32> = q.iter_class(ClassId(0)).map(|e| *e.payload).collect();
    assert_eq!(seen, vec![10, 11, 20, 30]);
    let order: Vec<u32> = (0..4)
        .filter_map(|_| q.pop_next(t(50), all_pass).popped)
        .map(|d| d.payload)
        .collect();
    assert_eq!(order, seen);
}

#[test]
fn drr_quanta_one_to_three_dispatch_one_three_three_three() {
    let mut q = queues(&[1, 3]);
    for p in 0..12 {
        push(&mut q, 0, p, 1);
        push(&mut q, 1, p, 1);
    }
    assert_eq!(
        pop_classes(&mut q, 12),
        vec![0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1]
    );
}

#[test]
fn carried_credit_is_spent_before_the_ring_moves_on() {
    let mut q = queues(&[10, 10]);
    for p in 0..6 {
        push(&mut q, 0, p, 3);
        push(&mut q, 1, p, 3);
    }
    assert_eq!(pop_classes(&mut q, 3), vec![0, 0, 0]);
    assert_eq!(q.deficit(ClassId(0)), 1);
    assert_eq!(q.snapshot().carry, Some(ClassId(0)));
    assert_eq!(pop_classes(&mut q, 4), vec![1, 1, 1, 0]);
    assert_eq!(q.deficit(ClassId(0)), 11 - 3);
}

#[test]
fn fully_blocked_ring_accrues_no_deficit() {
    let mut q = queues(&[10, 10, 10]);
    for p in 0..3 {
        push(&mut q, 0, p, 3);
        push(&mut q, 1, p, 25);
        push(&mut q, 2, p, 3);
    }
    assert_eq!(pop_classes(&mut q, 1), vec![0]);
    let before = q.snapshot();
    for _ in 0..100 {
        let pop = q.pop_next(t(1), |_, _| false);
        assert_eq!(pop.popped, None);
        assert!(pop.expired.is_empty());
    }
    let after = q.snapshot();
    assert_eq!(
        after.classes, before.classes,
        "no credit earned, nothing taken"
    );
    assert_eq!(after.cursor, before.cursor);
    assert_eq!(q.len(), 8);
}

#[test]
fn blocked_class_keeps_credit_while_others_are_served() {
    let mut q = queues(&[10, 10]);
    push(&mut q, 0, 0, 3);
    push(&mut q, 0, 1, 3);
    for p in 0..4 {
        push(&mut q, 1, p, 5);
    }
    assert_eq!(pop_classes(&mut q, 1), vec![0]);
    assert_eq!(q.deficit(ClassId(0)), 7);
    let served: Vec<u16> = (0..4)
        .filter_map(|_| q.pop_next(t(1), |c, _| c != ClassId(0)).popped)
        .map(|d| d.class.0)
        .collect();
    assert_eq!(served, vec![1, 1, 1, 1]);
    assert_eq!(
        q.deficit(ClassId(0)),
        7,
        "blocked: keeps its credit, earns none"
    );
}

#[test]
fn oversized_heads_progress_via_bulk_rounds() {
    let mut q = queues(&[1000, 2000]);
    push(&mut q, 0, 0, 7000);
    push(&mut q, 1, 1, 9000);
    push(&mut q, 1, 2, 9000);
    let first = q
        .pop_next(t(1), all_pass)
        .popped
        .expect("bulk rounds let one through");
    assert_eq!((first.class, first.payload), (ClassId(1), 1));
    assert_eq!(q.deficit(ClassId(0)), 5000);
    assert_eq!(q.deficit(ClassId(1)), 1000, "second class keeps 1000");
}

#[test]
fn expired_heads_shed_in_deadline_order_even_when_undispatchable() {
    let specs = vec![spec(10, 1000), spec(10, 500)];
    let mut q: ClassQueues<&str> = ClassQueues::new(specs).expect("valid");
    for (class, name, arrival) in [
        (0, "a", 0),
        (0, "b", 0),
        (0, "c", 600),
        (1, "x", 0),
        (1, "y", 200),
        (1, "z", 900),
    ] {
        q.enqueue(ClassId(class), name, 3, 3, t(arrival), t(arrival), 1)
            .expect("accepted");
    }
    let first = q.pop_next(t(0), |_, _| true).popped.expect("dispatch");
    assert_eq!(first.payload, "a");
    let before = q.snapshot();
    assert_eq!((before.classes[0].deficit, before.cursor), (7, 1));

    let pop = q.pop_next(t(1000), |_, _| false);
    assert_eq!(pop.popped, None);
    let shed: Vec<(&str, u64, ExpiryStage)> = pop
        .expired
        .iter()
        .map(|e| (e.payload, e.overdue.as_micros() as u64, e.stage))
        .collect();
    let d = ExpiryStage::Dispatch;
    assert_eq!(shed, vec![("x", 500, d), ("y", 300, d), ("b", 0, d)]);
    assert_eq!(q.deficit(ClassId(0)), 7, "expiry charges no credit");
    assert_eq!(q.snapshot().cursor, 1, "expiry does not move the cursor");
    assert_eq!((q.class_len(ClassId(0)), q.class_len(ClassId(1))), (1, 1));
    assert_eq!(q.class_tokens(ClassId(0)) + q.class_tokens(ClassId(1)), 6);
}

#[test]
fn accounting_reversed_exactly_once_on_expiry_and_remove() {
    let mut q: ClassQueues<u32> =
        ClassQueues::new(vec![spec(10, 100), spec(10, 1000)]).expect("ok");
    let short = q
        .enqueue(ClassId(0), 1, 5, 40, t(0), t(0), 1)
        .expect("accepted");
    let long = q
        .enqueue(ClassId(1), 2, 5, 60, t(0), t(0), 1)
        .expect("accepted");
    let kept = q
        .enqueue(ClassId(1), 3, 5, 7, t(0), t(0), 1)
        .expect("accepted");
    assert_eq!((q.len(), q.tokens()), (3, 107));

    let shed = q.expire(t(100));
    assert_eq!(
        shed.iter().map(|e| e.ticket).collect::<Vec<_>>(),
        vec![short]
    );
    assert_eq!(
        (q.len(), q.tokens(), q.class_tokens(ClassId(0))),
        (2, 67, 0)
    );
    assert!(q.expire(t(100)).is_empty());
    assert_eq!(q.remove(short, t(100)), None, "already gone");

    let removed = q.remove(long, t(250)).expect("queued");
    assert_eq!((removed.payload, removed.raw_tokens), (2, 60));
    assert_eq!(removed.waited, Duration::from_micros(250));
    assert_eq!(q.remove(long, t(250)), None);
    assert_eq!((q.len(), q.tokens(), q.class_tokens(ClassId(1))), (1, 7, 7));
    assert_eq!(q.head(ClassId(1)), Some(&3));
    assert_eq!(q.remove(kept, t(300)).map(|d| d.payload), Some(3));
    assert!(q.is_empty());
    assert_eq!(q.tokens(), 0);
}

#[test]
fn next_deadline_tracks_the_earliest_head_across_classes() {
    let mut q: ClassQueues<u32> = ClassQueues::new(vec![spec(10, 100), spec(10, 50)]).expect("ok");
    assert_eq!(q.next_deadline(), None);
    q.enqueue(ClassId(0), 1, 1, 1, t(0), t(0), 1)
        .expect("accepted");
    assert_eq!(q.next_deadline(), Some(t(100)));
    let b = q
        .enqueue(ClassId(1), 2, 1, 1, t(20), t(20), 1)
        .expect("accepted");
    q.enqueue(ClassId(1), 3, 1, 1, t(30), t(30), 1)
        .expect("accepted");
    assert_eq!(q.next_deadline(), Some(t(70)));
    q.remove(b, t(30)).expect("queued");
    assert_eq!(q.next_deadline(), Some(t(80)));
    let popped = q
        .pop_next(t(40), |c, _| c == ClassId(1))
        .popped
        .expect("class 1 ready");
    assert_eq!(popped.payload, 3);
    assert_eq!(q.next_deadline(), Some(t(100)));
    let pop = q.pop_next(t(100), all_pass);
    assert_eq!((pop.popped, pop.expired.len()), (None, 1));
    assert_eq!(q.next_deadline(), None);
}
