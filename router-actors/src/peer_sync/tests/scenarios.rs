//! The scenarios, each a function of the bus; `on_local_bus` runs them on `LocalBus`.

use super::fault::{Fault, FaultBus};
use super::*;
use crate::bus::local::LocalBus;
use crate::wire::{BookingDelta, BookingMsg, Envelope, Outbox, SnapshotRequest, encode};

/// Runs each scenario on a fresh in-process bus with paused time.
macro_rules! on_local_bus {
    ($($name:ident),* $(,)?) => {
        mod local_bus {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(std::sync::Arc::new(super::LocalBus::new())).await;
                }
            )*
        }
    };
}

on_local_bus!(
    two_routers_converge_under_random_bookings_and_end_idle,
    a_killed_peers_bookings_expire_within_its_lease_and_not_before,
    a_dropped_message_is_detected_as_a_gap_and_repaired_by_snapshot,
    a_duplicated_message_is_counted_stale_and_not_applied_twice,
    digest_drift_from_a_delta_lost_before_sequencing_is_repaired,
    a_late_node_sees_existing_bookings_before_it_reports_ready,
    malformed_and_foreign_payloads_are_counted_and_ignored,
    a_restarted_peer_replaces_what_its_previous_run_held,
    three_routers_converge_over_a_lossy_link_and_end_idle,
    deltas_arriving_while_a_snapshot_is_on_the_way_are_applied_on_top_of_it,
    a_lost_last_delta_does_not_stall_heartbeats,
);

/// Books, marks prefill done and releases at random on both nodes.
async fn random_stream(
    nodes: &mut [&mut Node],
    live: &mut [Vec<RequestId>],
    rng: &mut Rng,
    steps: usize,
) {
    for _ in 0..steps {
        let which = rng.below(nodes.len() as u64) as usize;
        let node = &mut nodes[which];
        let held = &mut live[which];
        match rng.below(5) {
            0 | 1 => {
                let blocks = 1 + rng.below(4) as u32;
                let id = node.book(blocks, rng.below(40) as u32).await;
                held.push(id);
            }
            2 if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                node.router.prefill_done(held[i]).expect("alive");
            }
            _ if !held.is_empty() => {
                let i = rng.below(held.len() as u64) as usize;
                node.router.release(held.swap_remove(i)).expect("alive");
            }
            _ => {}
        }
        sleep_ms(rng.below(8)).await;
    }
}

async fn release_all(nodes: &[&Node], live: &mut [Vec<RequestId>]) {
    for (node, held) in nodes.iter().zip(live.iter_mut()) {
        for id in held.drain(..) {
            node.router.release(id).expect("alive");
        }
    }
}

pub(super) async fn two_routers_converge_under_random_bookings_and_end_idle(bus: Arc<dyn Bus>) {
    let mut a = start_node(bus.clone(), 1).await;
    let mut b = start_node(bus.clone(), 2).await;
    sleep_ms(400).await;
    assert!(a.sync.is_ready() && b.sync.is_ready());
    let mut rng = Rng::new(0x5eed);
    let mut live = vec![Vec::new(), Vec::new()];
    random_stream(&mut [&mut a, &mut b], &mut live, &mut rng, 400).await;
    sleep_ms(50).await;
    assert!(
        live.iter().all(|l| !l.is_empty()),
        "the stream left bookings live"
    );
    assert_converged(&[&a, &b]).await;
    // Heartbeats went by during the stream and none disagreed.
    sleep_ms(1000).await;
    release_all(&[&a, &b], &mut live).await;
    sleep_ms(50).await;
    assert_converged(&[&a, &b]).await;
    for node in [&a, &b] {
        let ledger = node.router.observe().await.expect("alive").scheduler.ledger;
        assert!(ledger.is_idle(), "{} not idle: {ledger:?}", node.id);
        let s = node.observe().await;
        let c = &s.counters;
        assert!(
            c.own_deltas > 100 && c.applied > 100 && c.heartbeats_sent >= 4,
            "{c:?}"
        );
        assert_eq!(
            (c.gaps, c.stale, c.digest_mismatches, c.snapshot_failures),
            (0, 0, 0, 0),
            "{c:?}"
        );
        assert_eq!(s.peers.len(), 1);
        assert_eq!(s.decode_errors.total(), 0);
    }
}

pub(super) async fn a_killed_peers_bookings_expire_within_its_lease_and_not_before(
    bus: Arc<dyn Bus>,
) {
    let lease = config().lease;
    let beat = config().heartbeat_every;
    let a = start_node(bus.clone(), 1).await;
    let mut b = start_node(bus.clone(), 2).await;
    sleep_ms(400).await;
    for seed in 0..5 {
        b.book(2, seed).await;
    }
    sleep_ms(700).await;
    assert_eq!(a.held(b.id).await.bookings.len(), 5);
    let age = a.observe().await.peers[0].last_seen_ms;
    assert!(
        age < beat.as_millis() as u64,
        "heartbeats refresh it: {age}"
    );
    b.stop();
    let until_lease = lease - Duration::from_millis(age);
    tokio::time::sleep(until_lease - Duration::from_millis(1)).await;
    assert_eq!(
        a.held(b.id).await.bookings.len(),
        5,
        "expired before the lease"
    );
    assert_eq!(a.observe().await.counters.expired_peers, 0);
    tokio::time::sleep(beat + Duration::from_millis(1)).await;
    assert_eq!(
        a.held(b.id).await,
        OwnState::default(),
        "gone within lease + one beat"
    );
    let s = a.observe().await;
    assert_eq!((s.counters.expired_peers, s.peers.len()), (1, 0));
    let ledger = a.router.observe().await.expect("alive").scheduler.ledger;
    assert!(ledger.is_idle(), "{ledger:?}");
}

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
    assert!(
        a.router
            .observe()
            .await
            .expect("alive")
            .scheduler
            .ledger
            .is_idle()
    );
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
    let mut b = start_node_with(bus.clone(), 2, config(), Some(|i| i != 3)).await;
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

pub(super) async fn a_late_node_sees_existing_bookings_before_it_reports_ready(bus: Arc<dyn Bus>) {
    let mut a = start_node(bus.clone(), 1).await;
    let mut c = start_node(bus.clone(), 3).await;
    sleep_ms(400).await;
    for seed in 0..6 {
        a.book(2, seed).await;
        c.book(1, seed + 10).await;
    }
    a.router
        .prefill_done(RequestId::from_u128((1 << 64) | 2))
        .expect("alive");
    sleep_ms(2000).await;
    let late = start_node(bus.clone(), 2).await;
    let mut ready = late.sync.ready();
    assert!(!*ready.borrow());
    ready.wait_for(|r| *r).await.expect("ready");
    // The moment it is ready, it already holds what its peers hold.
    assert_eq!(late.held(a.id).await, a.own().await);
    assert_eq!(late.held(c.id).await, c.own().await);
    let s = late.observe().await;
    assert_eq!(s.counters.snapshots_applied, 2, "{:?}", s.counters);
    assert_eq!((s.counters.gaps, s.counters.snapshots_requested), (0, 1));
    assert_eq!(s.peers.len(), 2);
    assert_converged(&[&a, &c, &late]).await;
}

pub(super) async fn malformed_and_foreign_payloads_are_counted_and_ignored(bus: Arc<dyn Bus>) {
    let a = start_node(bus.clone(), 1).await;
    sleep_ms(400).await;
    let subject = Subjects::new(CLUSTER).bookings(POOL);
    let delta = BookingMsg::Delta(BookingDelta::Release {
        request: RequestId::from_u128(1),
    });
    let foreign = Outbox::new("elsewhere", Uuid::from_u128(7))
        .seal(&subject, delta.clone())
        .expect("encodes");
    let future = encode(&Envelope {
        v: 99,
        cluster: CLUSTER.into(),
        sender: Uuid::from_u128(7),
        seq: 1,
        sent_at_us: 0,
        body: delta,
    })
    .expect("encodes");
    let wrong_body = Outbox::new(CLUSTER, Uuid::from_u128(7))
        .seal(&subject, SnapshotRequest { owner: None })
        .expect("encodes");
    for payload in [
        bytes::Bytes::from_static(b"\xff\x00garbage"),
        bytes::Bytes::new(),
        foreign,
        future,
        wrong_body,
    ] {
        bus.publish(subject.clone(), payload)
            .await
            .expect("published");
    }
    // Garbage on the snapshot subject too.
    bus.publish(
        Subjects::new(CLUSTER).snapshot(POOL),
        bytes::Bytes::from_static(b"nope"),
    )
    .await
    .expect("published");
    sleep_ms(50).await;
    let s = a.observe().await;
    assert_eq!(
        (
            s.decode_errors.malformed,
            s.decode_errors.unknown_version,
            s.decode_errors.foreign_cluster
        ),
        (4, 1, 1),
        "{:?}",
        s.decode_errors
    );
    assert!(s.peers.is_empty());
    assert_eq!((s.counters.applied, s.counters.snapshots_served), (0, 0));
    assert!(
        a.router
            .observe()
            .await
            .expect("alive")
            .scheduler
            .ledger
            .is_idle()
    );
}

pub(super) async fn a_restarted_peer_replaces_what_its_previous_run_held(bus: Arc<dyn Bus>) {
    let a = start_node(bus.clone(), 1).await;
    let mut b = start_node(bus.clone(), 2).await;
    sleep_ms(400).await;
    for seed in 0..3 {
        b.book(1, seed).await;
    }
    sleep_ms(600).await;
    assert_eq!(a.held(b.id).await.bookings.len(), 3);
    b.stop();
    sleep_ms(10).await;
    // Same router id, a fresh run (its sequence starts again at 1), well within the lease.
    let mut b = start_node(bus.clone(), 2).await;
    b.next = 100;
    b.book(2, 7).await;
    sleep_ms(50).await;
    assert_eq!(a.held(b.id).await, b.own().await);
    assert_eq!(a.held(b.id).await.bookings.len(), 1);
    sleep_ms(1500).await;
    let c = a.observe().await.counters;
    assert_eq!(
        (c.stale, c.gaps, c.digest_mismatches, c.expired_peers),
        (0, 0, 0, 0),
        "{c:?}"
    );
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
    assert!(
        a.router
            .observe()
            .await
            .expect("alive")
            .scheduler
            .ledger
            .is_idle()
    );
    assert_eq!(a.observe().await.counters.digest_mismatches, 0);
}

pub(super) async fn a_lost_last_delta_does_not_stall_heartbeats(bus: Arc<dyn Bus>) {
    let a = start_node(bus.clone(), 1).await;
    // b's 2nd own delta, its last one, never reaches its peer-sync actor.
    let mut b = start_node_with(bus.clone(), 2, config(), Some(|i| i != 2)).await;
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
