//! Behavioural tests of admission: requests already late, unknown classes, bad specs, cost
//! clamping, the per-worker request and token limits (pre-add, scaled by worker count,
//! saturating), and the serialised form of what leaves the queue.

use super::tests::{LONG_SLO, all_pass, push, queues, spec, t};
use super::*;
use std::time::Duration;

#[test]
fn admission_rejects_requests_already_late() {
    let mut q: ClassQueues<u32> = ClassQueues::new(vec![spec(10, 100)]).expect("ok");
    for (now, overdue) in [(100, 0), (150, 50)] {
        let rej = q
            .enqueue(ClassId(0), 7, 1, 1, t(0), t(now), 1)
            .expect_err("late");
        assert_eq!(rej.payload, 7);
        let stage = ExpiryStage::Admission;
        let expected = EnqueueRefusal::Expired {
            stage,
            overdue: Duration::from_micros(overdue),
        };
        assert_eq!(rej.reason, expected);
    }
    assert!(q.is_empty());
    assert!(q.enqueue(ClassId(0), 8, 1, 1, t(0), t(99), 1).is_ok());
}

fn limited(requests: Option<u64>, tokens: Option<u64>) -> ClassQueues<u32> {
    let spec = QueueClassSpec {
        request_limit_per_worker: requests,
        token_limit_per_worker: tokens,
        ..spec(10, LONG_SLO)
    };
    ClassQueues::new(vec![spec]).expect("ok")
}

fn limit_hit(rej: EnqueueRejection<u32>) -> (LimitKind, u64, u64) {
    match rej.reason {
        EnqueueRefusal::LimitReached {
            kind,
            current,
            limit,
        } => (kind, current, limit),
        other => panic!("unexpected rejection {other:?}"),
    }
}

#[test]
fn limits_are_checked_before_adding() {
    let mut q = limited(Some(2), None);
    assert!(q.enqueue(ClassId(0), 1, 1, 1, t(0), t(0), 1).is_ok());
    assert!(q.enqueue(ClassId(0), 2, 1, 1, t(0), t(0), 1).is_ok());
    let rej = q
        .enqueue(ClassId(0), 3, 1, 1, t(0), t(0), 1)
        .expect_err("full");
    assert_eq!(rej.payload, 3);
    assert_eq!(limit_hit(rej), (LimitKind::Requests, 2, 2));

    let mut q = limited(None, Some(100));
    assert!(q.enqueue(ClassId(0), 1, 1, 90, t(0), t(0), 1).is_ok());
    assert!(
        q.enqueue(ClassId(0), 2, 1, 50, t(0), t(0), 1).is_ok(),
        "crossing request accepted"
    );
    let rej = q
        .enqueue(ClassId(0), 3, 1, 1, t(0), t(0), 1)
        .expect_err("over");
    assert_eq!(limit_hit(rej), (LimitKind::Tokens, 140, 100));
}

#[test]
fn limits_scale_with_worker_count() {
    let mut q = limited(Some(1), None);
    for p in 0..3 {
        assert!(q.enqueue(ClassId(0), p, 1, 1, t(0), t(0), 3).is_ok());
    }
    let rej = q
        .enqueue(ClassId(0), 9, 1, 1, t(0), t(0), 3)
        .expect_err("full");
    assert_eq!(limit_hit(rej), (LimitKind::Requests, 3, 3));
    assert!(
        q.enqueue(ClassId(0), 9, 1, 1, t(0), t(0), 4).is_ok(),
        "a new worker raises it"
    );
}

#[test]
fn zero_workers_mean_limit_zero_and_reject() {
    let mut q = limited(Some(5), None);
    let rej = q
        .enqueue(ClassId(0), 1, 1, 1, t(0), t(0), 0)
        .expect_err("no workers");
    assert_eq!(limit_hit(rej), (LimitKind::Requests, 0, 0));
    let mut q = limited(None, Some(5));
    let rej = q
        .enqueue(ClassId(0), 1, 1, 1, t(0), t(0), 0)
        .expect_err("no workers");
    assert_eq!(limit_hit(rej), (LimitKind::Tokens, 0, 0));
    let mut unlimited = limited(None, None);
    assert!(
        unlimited
            .enqueue(ClassId(0), 1, 1, 1, t(0), t(0), 0)
            .is_ok()
    );
}

#[test]
fn huge_limits_multiply_saturating() {
    let mut q = limited(Some(u64::MAX), Some(u64::MAX / 2));
    assert!(
        q.enqueue(ClassId(0), 1, 1, u64::MAX, t(0), t(0), usize::MAX)
            .is_ok()
    );
    assert!(
        q.enqueue(ClassId(0), 2, 1, u64::MAX, t(0), t(0), usize::MAX)
            .is_err()
    );
    assert_eq!(q.tokens(), u64::MAX);
}

#[test]
fn unknown_class_and_bad_specs_are_refused() {
    let mut q = queues(&[10]);
    let rej = q
        .enqueue(ClassId(3), 5, 1, 1, t(0), t(0), 1)
        .expect_err("unknown");
    assert_eq!(
        rej.reason,
        EnqueueRefusal::UnknownClass {
            class: ClassId(3),
            classes: 1
        }
    );
    assert_eq!(rej.payload, 5);
    assert_eq!(
        (
            q.class_len(ClassId(3)),
            q.deficit(ClassId(3)),
            q.head(ClassId(3))
        ),
        (0, 0, None)
    );
    let err = ClassQueues::<u32>::new(vec![spec(1, 10), spec(0, 10)]).expect_err("zero quantum");
    assert_eq!(err, QueueConfigError::ZeroQuantum { class: ClassId(1) });
}

#[test]
fn zero_cost_is_clamped_to_one_and_tickets_increase() {
    let mut q = queues(&[1]);
    let a = push(&mut q, 0, 1, 0);
    let b = push(&mut q, 0, 2, 0);
    assert!(a < b);
    let d = q.pop_next(t(5), all_pass).popped.expect("ready");
    assert_eq!(
        (d.ticket, d.cost, d.waited),
        (a, 1, Duration::from_micros(5))
    );
}

#[test]
fn snapshot_and_outcomes_serialise() {
    let mut q = queues(&[10, 20]);
    push(&mut q, 1, 1, 4);
    let snap = q.snapshot();
    assert_eq!(snap.classes[1].len, 1);
    assert_eq!(snap.classes[1].head_deadline, Some(t(LONG_SLO)));
    let json = serde_json::to_value(&snap).expect("serialise");
    assert_eq!(json["classes"][1]["quantum"], 20);
    let rej = q
        .enqueue(ClassId(0), 1, 1, 1, t(0), t(LONG_SLO), 1)
        .expect_err("late");
    let json = serde_json::to_value(&rej).expect("serialise");
    assert_eq!(json["reason"]["reason"], "expired");
    assert_eq!(json["reason"]["stage"], "admission");
    let pop = q.pop_next(t(1), all_pass);
    assert!(
        serde_json::to_string(&pop)
            .expect("serialise")
            .contains("\"cost\":4")
    );
}
