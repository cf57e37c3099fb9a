//! Wire round trips and every way a payload can be refused.

use super::*;
use router_core::ledger::Booking;
use router_core::{RankId, RequestId};

fn delta() -> BookingMsg {
    BookingMsg::Deltas(vec![
        BookingDelta::Book {
            request: RequestId::from_u128(5),
            booking: Booking {
                rank: RankId::new(1, 0),
                block_hashes: vec![1, 2],
                prefill_tokens: 10,
                extra_blocks: 0,
            },
        },
        BookingDelta::Release {
            request: RequestId::from_u128(5),
        },
    ])
}

#[test]
fn envelopes_round_trip_with_sender_and_sequence() {
    let mut outbox = Outbox::new("sy", Uuid::from_u128(9));
    let bytes = outbox
        .seal("sy.router.agg.bookings", delta())
        .expect("encodes");
    let env: Envelope<BookingMsg> = decode(&bytes, "sy").expect("decodes");
    assert_eq!(
        (env.sender, env.seq, env.body),
        (Uuid::from_u128(9), 1, delta())
    );
    let again = outbox
        .seal("sy.router.agg.bookings", delta())
        .expect("encodes");
    assert_eq!(decode::<BookingMsg>(&again, "sy").map(|e| e.seq), Ok(2));
    assert_eq!(outbox.last_seq("sy.router.agg.bookings"), 2);
}

#[test]
fn foreign_clusters_unknown_versions_and_garbage_are_refused_and_counted() {
    let counters = WireCounters::default();
    let mut other = Outbox::new("other", Uuid::from_u128(1));
    let foreign = other.seal("x", delta()).expect("encodes");
    let err = decode::<BookingMsg>(&foreign, "sy").expect_err("foreign");
    assert_eq!(err, DecodeError::ForeignCluster("other".into()));
    counters.count(&err);
    let future = encode(&Envelope {
        v: 99,
        cluster: "sy".into(),
        sender: Uuid::nil(),
        seq: 1,
        sent_at_us: 0,
        body: delta(),
    })
    .expect("encodes");
    let err = decode::<BookingMsg>(&future, "sy").expect_err("version");
    assert_eq!(err, DecodeError::UnknownVersion(99));
    counters.count(&err);
    for garbage in [&b""[..], b"\xff\x00garbage", b"\x81\xa1v\x01"] {
        let err = decode::<BookingMsg>(garbage, "sy").expect_err("garbage");
        assert!(matches!(err, DecodeError::Malformed(_)), "{err:?}");
        counters.count(&err);
    }
    // A valid envelope whose body is of another type is malformed too.
    let room = Outbox::new("sy", Uuid::nil())
        .seal(
            "r",
            RoomChanged {
                epoch: 1,
                classes: vec![],
            },
        )
        .expect("encodes");
    assert!(matches!(
        decode::<BookingMsg>(&room, "sy"),
        Err(DecodeError::Malformed(_))
    ));
    assert_eq!(counters.total(), 5);
}

#[test]
fn sequence_tracking_detects_gaps_duplicates_and_reordering() {
    let mut t = SeqTracker::default();
    let a = Uuid::from_u128(1);
    assert_eq!(t.observe(a, 1), SeqEvent::First);
    assert_eq!(t.observe(a, 2), SeqEvent::InOrder);
    assert_eq!(t.observe(a, 2), SeqEvent::Stale);
    assert_eq!(t.observe(a, 5), SeqEvent::Gap { missed: 2 });
    assert_eq!(t.observe(a, 4), SeqEvent::Stale);
    t.reset(a, 10);
    assert_eq!(t.observe(a, 11), SeqEvent::InOrder);
}

#[test]
fn subjects_carry_the_cluster_prefix_and_pool() {
    let s = Subjects::new("prod");
    assert_eq!(
        s.bookings(router_core::PoolRole::Decode),
        "prod.router.decode.bookings"
    );
    assert_eq!(s.room(), "prod.router.decode.room");
    assert_eq!(
        s.kv_events(router_core::PoolRole::Aggregated),
        "prod.kv.agg.events"
    );
}

#[test]
fn snapshots_travel_in_the_booking_stream() {
    let body = BookingMsg::Snapshot(SnapshotReply {
        owner: Uuid::from_u128(3),
        last_seq: 7,
        bookings: vec![(
            RequestId::from_u128(1),
            Booking {
                rank: RankId::new(1, 0),
                block_hashes: vec![4],
                prefill_tokens: 3,
                extra_blocks: 1,
            },
        )],
        reservations: vec![],
    });
    let bytes = Outbox::new("sy", Uuid::from_u128(3))
        .seal("sy.router.agg.bookings", body.clone())
        .expect("encodes");
    assert_eq!(decode::<BookingMsg>(&bytes, "sy").map(|e| e.body), Ok(body));
}

#[test]
fn digests_ignore_order_and_see_every_field() {
    let b = |id: u128, tokens: u64| {
        (
            RequestId::from_u128(id),
            Booking {
                rank: RankId::new(1, 0),
                block_hashes: vec![1, 2],
                prefill_tokens: tokens,
                extra_blocks: 0,
            },
        )
    };
    let d = digest_of(&[b(1, 5), b(2, 6)], &[]);
    assert_eq!(d, digest_of(&[b(2, 6), b(1, 5)], &[]));
    assert_eq!((d.bookings, d.reservations), (2, 0));
    assert_ne!(d, digest_of(&[b(1, 5), b(2, 0)], &[]));
    assert_ne!(d, digest_of(&[b(1, 5), b(3, 6)], &[]));
    assert_eq!(digest_of(&[], &[]), Digest::default());
    // A prompt's blocks by their count and chained last hash.
    let mut other = b(2, 6);
    other.1.block_hashes = vec![1, 3];
    assert_ne!(d, digest_of(&[b(1, 5), other.clone()], &[]));
    other.1.block_hashes = vec![1, 2, 2];
    assert_ne!(d, digest_of(&[b(1, 5), other], &[]));
}

#[test]
fn the_sender_is_read_without_the_body() {
    let mut outbox = Outbox::new("sy", Uuid::from_u128(42));
    let bytes = outbox.seal("s", delta()).expect("encodes");
    assert_eq!(sender_of(&bytes, "sy"), Ok(Uuid::from_u128(42)));
    assert_eq!(
        sender_of(&bytes, "other"),
        Err(DecodeError::ForeignCluster("sy".into()))
    );
    assert!(matches!(
        sender_of(b"\xff", "sy"),
        Err(DecodeError::Malformed(_))
    ));
}

#[test]
fn an_outbox_knows_its_own_envelopes_by_their_first_bytes() {
    let mut outbox = Outbox::new("sy", Uuid::from_u128(42));
    for body in [delta(), delta()] {
        let bytes = outbox.seal("s", body).expect("encodes");
        assert!(outbox.sealed_here(&bytes));
    }
    let snapshot = outbox
        .seal("t", SnapshotRequest { owner: None })
        .expect("encodes");
    assert!(outbox.sealed_here(&snapshot), "any body, any subject");
    let mut peer = Outbox::new("sy", Uuid::from_u128(43));
    let theirs = peer.seal("s", delta()).expect("encodes");
    assert!(!outbox.sealed_here(&theirs), "another sender");
    let mut twin = Outbox::new("other", Uuid::from_u128(42));
    let foreign = twin.seal("s", delta()).expect("encodes");
    assert!(!outbox.sealed_here(&foreign), "another cluster");
    assert!(!outbox.sealed_here(b""));
    assert!(!outbox.sealed_here(&theirs[..3]));
}
