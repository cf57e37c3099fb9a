//! Loss and repair: dropped, duplicated and never-sequenced messages, a snapshot that
//! arrives late, and a lossy link. Faults come from `FaultBus` around the real bus.

use super::*;
use crate::testkit::{Fault, FaultBus};

on_local_bus!(
    a_dropped_message_is_detected_as_a_gap_and_repaired_by_snapshot,
    a_duplicated_message_is_counted_stale_and_not_applied_twice,
    digest_drift_from_a_delta_lost_before_sequencing_is_repaired,
    deltas_arriving_while_a_snapshot_is_on_the_way_are_applied_on_top_of_it,
    a_lost_last_delta_does_not_stall_heartbeats,
    three_routers_converge_over_a_lossy_link_and_end_idle,
);

pub(super) async fn a_dropped_message_is_detected_as_a_gap_and_repaired_by_snapshot(
    bus: Arc<dyn Bus>,
) {
    let subject = Subjects::new(CLUSTER).bookings(POOL);
    // b's 6th message on the bookings subject is lost (1: its starting snapshot).
    let faulty = Arc::new(FaultBus::new(bus.clone(), subject, 6, Fault::Drop));
    let mut a = start_node(bus.clone(), 1).await;
    let mut b = start_node(faulty.clone(), 2).await;
    sleep_ms(400).await;
    let mut rng = Rng::new(99);
    let mut live = vec![Vec::new(), Vec::new()];
    random_stream(&mut [&mut a, &mut b], &mut live, &mut rng, 120).await;
    sleep_ms(300).await;
    assert_eq!(faulty.injected.load(std::sync::atomic::Ordering::SeqCst), 1);
    let c = a.observe().await.counters;
    assert_eq!((c.gaps, c.missed), (1, 1), "{c:?}");
    assert!(
        c.snapshots_applied >= 2 && c.snapshot_failures == 0,
        "{c:?}"
    );
    assert_eq!(b.observe().await.counters.snapshots_served, 1);
    assert_converged(&[&a, &b]).await;
    release_all(&[&a, &b], &mut live).await;
    sleep_ms(50).await;
    assert_converged(&[&a, &b]).await;
    assert!(a.idle().await, "{} not idle", a.id);
}

pub(super) async fn a_duplicated_message_is_counted_stale_and_not_applied_twice(bus: Arc<dyn Bus>) {
    let subject = Subjects::new(CLUSTER).bookings(POOL);
    let faulty = Arc::new(FaultBus::new(bus.clone(), subject, 3, Fault::Duplicate));
    let a = start_node(bus.clone(), 1).await;
    let mut b = start_node(faulty.clone(), 2).await;
    sleep_ms(400).await;
    for seed in 0..4 {
        b.book(1, seed).await;
    }
    sleep_ms(50).await;
    let c = a.observe().await.counters;
    assert_eq!((c.stale, c.gaps), (1, 0), "{c:?}");
    assert_converged(&[&a, &b]).await;
}

pub(super) async fn digest_drift_from_a_delta_lost_before_sequencing_is_repaired(
    bus: Arc<dyn Bus>,
) {
    let a = start_node(bus.clone(), 1).await;
    // b's 3rd own delta never reaches its peer-sync actor.
    let mut b = start_node_with(bus.clone(), 2, config(), Tap::Drop(|i| i != 3)).await;
    let quiet = a.observe().await.counters.digest_mismatches;
    assert_eq!(quiet, 0);
    sleep_ms(400).await;
    for seed in 0..5 {
        b.book(1, seed).await;
    }
    sleep_ms(50).await;
    assert_eq!(
        a.held(b.id).await.bookings.len(),
        4,
        "one booking never announced"
    );
    // Two mismatching heartbeats, then a repair.
    sleep_ms(2500).await;
    let c = a.observe().await.counters;
    assert!(
        c.digest_mismatches >= 2 && c.snapshots_applied >= 2,
        "{c:?}"
    );
    assert_eq!(c.gaps, 0, "{c:?}");
    assert_eq!(
        b.observe().await.counters.deferred_forced,
        0,
        "later deltas skip the index"
    );
    assert_converged(&[&a, &b]).await;
    // Once repaired, heartbeats agree again.
    let before = a.observe().await.counters.digest_mismatches;
    sleep_ms(2000).await;
    assert_eq!(a.observe().await.counters.digest_mismatches, before);
}

pub(super) async fn deltas_arriving_while_a_snapshot_is_on_the_way_are_applied_on_top_of_it(
    bus: Arc<dyn Bus>,
) {
    let subject = Subjects::new(CLUSTER).bookings(POOL);
    // a's snapshot answers take 40 ms to come back; b's 4th message is lost.
    let slow = Arc::new(
        FaultBus::picking(
            bus.clone(),
            subject.clone(),
            Box::new(|_| false),
            Fault::Drop,
        )
        .delaying_replies(Duration::from_millis(40)),
    );
    let lossy = Arc::new(FaultBus::new(bus.clone(), subject, 4, Fault::Drop));
    let a = start_node(slow, 1).await;
    let mut b = start_node(lossy, 2).await;
    sleep_ms(400).await;
    let mut held = Vec::new();
    for seed in 0..30 {
        held.push(b.book(1, seed).await);
        if seed % 3 == 2 {
            b.router.release(held.remove(0)).expect("alive");
        }
        sleep_ms(5).await;
    }
    sleep_ms(100).await;
    let c = a.observe().await.counters;
    assert_eq!(c.gaps, 1, "{c:?}");
    assert!(
        c.replayed >= 5,
        "deltas after the snapshot were replayed: {c:?}"
    );
    assert_converged(&[&a, &b]).await;
    for id in held {
        b.router.release(id).expect("alive");
    }
    sleep_ms(50).await;
    assert!(a.idle().await, "{} not idle", a.id);
    assert_eq!(a.observe().await.counters.digest_mismatches, 0);
}

pub(super) async fn a_lost_last_delta_does_not_stall_heartbeats(bus: Arc<dyn Bus>) {
    let a = start_node(bus.clone(), 1).await;
    // b's 2nd own delta, its last one, never reaches its peer-sync actor.
    let mut b = start_node_with(bus.clone(), 2, config(), Tap::Drop(|i| i != 2)).await;
    sleep_ms(400).await;
    b.book(1, 1).await;
    b.book(1, 2).await;
    sleep_ms(3000).await;
    let k = b.observe().await.counters;
    assert!(k.deferred_forced >= 1 && k.heartbeats_sent >= 5, "{k:?}");
    let s = a.observe().await;
    assert_eq!((s.peers.len(), s.counters.expired_peers), (1, 0));
    assert!(s.counters.snapshots_applied >= 2, "{:?}", s.counters);
    assert_converged(&[&a, &b]).await;
}

pub(super) async fn three_routers_converge_over_a_lossy_link_and_end_idle(bus: Arc<dyn Bus>) {
    let subject = Subjects::new(CLUSTER).bookings(POOL);
    // Every 11th message c publishes is lost.
    let lossy = Arc::new(FaultBus::picking(
        bus.clone(),
        subject,
        Box::new(|i| i % 11 == 0),
        Fault::Drop,
    ));
    let mut a = start_node(bus.clone(), 1).await;
    let mut b = start_node(bus.clone(), 2).await;
    let mut c = start_node(lossy.clone(), 3).await;
    sleep_ms(400).await;
    let mut rng = Rng::new(2024);
    let mut live = vec![Vec::new(), Vec::new(), Vec::new()];
    random_stream(&mut [&mut a, &mut b, &mut c], &mut live, &mut rng, 600).await;
    // Losses at the end of the stream show up as gaps in the next heartbeats.
    sleep_ms(1500).await;
    assert!(lossy.injected.load(std::sync::atomic::Ordering::SeqCst) >= 10);
    assert_converged(&[&a, &b, &c]).await;
    for node in [&a, &b] {
        let k = node.observe().await.counters;
        assert!(k.gaps >= 10 && k.snapshots_applied >= 10, "{k:?}");
    }
    release_all(&[&a, &b, &c], &mut live).await;
    sleep_ms(1500).await;
    assert_converged(&[&a, &b, &c]).await;
    for node in [&a, &b, &c] {
        let ledger = node.router.observe().await.expect("alive").scheduler.ledger;
        assert!(ledger.is_idle(), "{} not idle: {ledger:?}", node.id);
    }
    let k = c.observe().await.counters;
    assert_eq!(
        (k.gaps, k.digest_mismatches),
        (0, 0),
        "c's inbound link is clean: {k:?}"
    );
}
