//! Life cycle: convergence under a stream of bookings, lease expiry of a killed peer, a late
//! starter, a restart, and refused payloads. Each scenario is a function of the bus.

use super::*;
use crate::wire::{BookingDelta, BookingMsg, Envelope, Outbox, SnapshotRequest, encode};

on_local_bus!(
    two_routers_converge_under_random_bookings_and_end_idle,
    a_killed_peers_bookings_expire_within_its_lease_and_not_before,
    a_late_node_sees_existing_bookings_before_it_reports_ready,
    malformed_and_foreign_payloads_are_counted_and_ignored,
    a_restarted_peer_replaces_what_its_previous_run_held,
    queued_deltas_go_out_batched_and_a_heartbeat_between_them_stays_between_them,
);

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
        let router = node.router.observe().await.expect("alive");
        let ledger = router.scheduler.ledger;
        assert!(ledger.is_idle(), "{} not idle: {ledger:?}", node.id);
        let s = node.observe().await;
        let c = &s.counters;
        // Every peer delta applied had its publication-to-application lag recorded.
        let lag = router.peer_lag_us;
        assert_eq!(lag.count, c.applied, "{lag:?}");
        assert!(
            lag.p50_us <= lag.p99_us && lag.p99_us <= lag.max_us,
            "{lag:?}"
        );
        assert_eq!(lag.clock_ahead, 0, "one process, one clock: {lag:?}");
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
    let delta = BookingMsg::Deltas(vec![BookingDelta::Release {
        request: RequestId::from_u128(1),
    }]);
    let foreign = Outbox::new("elsewhere", Uuid::from_u128(7))
        .seal(&subject, delta.clone())
        .expect("encodes");
    let versioned = |v| {
        encode(&Envelope {
            v,
            cluster: CLUSTER.into(),
            sender: Uuid::from_u128(7),
            seq: 1,
            sent_at_us: 0,
            body: delta.clone(),
        })
        .expect("encodes")
    };
    // A later version, and version 1 (one delta per message) from a node not upgraded.
    let (future, past) = (versioned(99), versioned(1));
    let wrong_body = Outbox::new(CLUSTER, Uuid::from_u128(7))
        .seal(&subject, SnapshotRequest { owner: None })
        .expect("encodes");
    for payload in [
        bytes::Bytes::from_static(b"\xff\x00garbage"),
        bytes::Bytes::new(),
        foreign,
        future,
        past,
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
        (4, 2, 1),
        "{:?}",
        s.decode_errors
    );
    assert!(s.peers.is_empty());
    assert_eq!((s.counters.applied, s.counters.snapshots_served), (0, 0));
    assert!(a.idle().await, "{} not idle", a.id);
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

pub(super) async fn queued_deltas_go_out_batched_and_a_heartbeat_between_them_stays_between_them(
    bus: Arc<dyn Bus>,
) {
    let a = start_node(bus.clone(), 1).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut b = start_node_with(bus.clone(), 2, config(), Tap::Gate(gate.clone())).await;
    sleep_ms(400).await;
    let before = b.observe().await.counters;
    // 50 bookings, then b's heartbeat at 500 ms (its digest reflects those 50, whose deltas
    // are still held), then 50 more; then all 100 deltas reach b's peer sync at once.
    for seed in 0..50 {
        b.book(1, seed).await;
    }
    sleep_ms(150).await;
    let waiting = b.observe().await;
    assert_eq!(waiting.deferred, 1, "the heartbeat waits for its deltas");
    for seed in 50..100 {
        b.book(1, seed).await;
    }
    gate.notify_one();
    sleep_ms(50).await;
    let after = b.observe().await.counters;
    assert_eq!(after.own_deltas - before.own_deltas, 100, "{after:?}");
    // Two `Deltas` messages cut at the heartbeat, and the heartbeat between them.
    assert_eq!(after.published - before.published, 3, "{after:?}");
    assert_eq!(
        after.heartbeats_sent - before.heartbeats_sent,
        1,
        "{after:?}"
    );
    assert_eq!(after.deferred_forced, 0, "{after:?}");
    let c = a.observe().await.counters;
    assert_eq!(c.applied, 100, "{c:?}");
    // The heartbeat was checked against the first 50 alone: an answer published after all
    // 100 would disagree with the peer's ledger.
    assert_eq!((c.digest_mismatches, c.gaps), (0, 0), "{c:?}");
    assert_converged(&[&a, &b]).await;
}

/// The whole machine stops for longer than a lease (a paused VM: nothing runs, the clock goes
/// on). When it runs again, the peer is kept with its bookings (its heartbeats could not be
/// heard, nor sent); a peer that is really gone still expires within a lease of listening.
#[tokio::test(start_paused = true)]
async fn a_stop_of_the_whole_machine_is_not_a_silent_peer() {
    let bus: Arc<dyn Bus> = Arc::new(crate::bus::local::LocalBus::new());
    let lease = config().lease;
    let beat = config().heartbeat_every;
    let a = start_node(bus.clone(), 1).await;
    let mut b = start_node(bus.clone(), 2).await;
    sleep_ms(400).await;
    for seed in 0..3 {
        b.book(2, seed).await;
    }
    sleep_ms(700).await;
    assert_eq!(a.held(b.id).await.bookings.len(), 3);

    // Every timer of both nodes fires only after the stop, at once.
    tokio::time::advance(lease * 3).await;
    sleep_ms(1).await;
    let s = a.observe().await;
    assert_eq!((s.counters.expired_peers, s.peers.len()), (0, 1), "{s:?}");
    assert_eq!(s.counters.leases_kept_stopped, 1);
    assert_eq!(a.held(b.id).await.bookings.len(), 3);
    // Heartbeats resume: still there a lease later.
    tokio::time::sleep(lease + beat).await;
    assert_eq!(a.held(b.id).await.bookings.len(), 3);

    // Gone for real: expired within its lease and one beat, as without a stop.
    b.stop();
    tokio::time::sleep(lease + beat + Duration::from_millis(1)).await;
    let s = a.observe().await;
    assert_eq!((s.counters.expired_peers, s.peers.len()), (1, 0));
    assert_eq!(a.held(b.id).await, OwnState::default());
}
