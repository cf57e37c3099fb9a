//! Property tests of the wire edge (issue #14 item 5): every payload type a subscriber decodes
//! (`WorkerAnnounce`, `WorkerLoad`, `BookingMsg`, `SnapshotRequest`, `SnapshotReply`,
//! `RoomChanged`, `KvEventBatch`, `CreditEnvelope`) is fed arbitrary bytes, and valid envelopes
//! of each mutated (bytes changed, cut, or spliced with msgpack length prefixes that claim
//! 4 GiB). Decoding never panics and answers an error or a value; lengths that claim more than
//! the payload holds are refused without allocating them (rmp-serde reads from the slice and
//! serde caps pre-allocation; `router-actors/tests/wire_allocation.rs` measures it).

use super::*;
use proptest::prelude::*;
use router_core::credits::CreditMsg;
use router_core::ledger::{Booking, LeaseLeft, LeasedReservation};
use router_core::{
    ExternalHash, KvEvent, KvEventData, PoolRole, RankId, RequestId, StoredBlock, WorkerId,
    WorkerSpec,
};

const CLUSTER: &str = "sy";

/// Decodes `payload` as every payload type (and the header alone); none may panic.
fn decode_all(payload: &[u8]) {
    let _ = sender_of(payload, CLUSTER);
    let _ = decode::<WorkerAnnounce>(payload, CLUSTER);
    let _ = decode::<WorkerLoad>(payload, CLUSTER);
    let _ = decode::<BookingMsg>(payload, CLUSTER);
    let _ = decode::<SnapshotRequest>(payload, CLUSTER);
    let _ = decode::<SnapshotReply>(payload, CLUSTER);
    let _ = decode::<RoomChanged>(payload, CLUSTER);
    let _ = decode::<KvEventBatch>(payload, CLUSTER);
    let _ = decode::<CreditEnvelope>(payload, CLUSTER);
}

fn seal<T: serde::Serialize>(body: T) -> Vec<u8> {
    Outbox::new(CLUSTER, Uuid::from_u128(7))
        .seal("s", body)
        .expect("encodes")
        .to_vec()
}

fn booking(n: u64) -> Booking {
    Booking {
        rank: RankId::new(n, 0),
        block_hashes: vec![n, n + 1],
        prefill_tokens: n * 10,
        extra_blocks: n,
    }
}

/// One valid envelope of every payload type, with `n` in its numbers.
fn valid(n: u64) -> Vec<Vec<u8>> {
    let mut spec = WorkerSpec::new(n, 2, 1000, 8192);
    spec.loras = vec!["lora-a".into()];
    let reservation = LeasedReservation {
        rank: RankId::new(n, 1),
        blocks: n,
        lease_left: LeaseLeft::from_duration(std::time::Duration::from_millis(n)),
        seq: n,
    };
    let request = RequestId::from_u128(u128::from(n));
    vec![
        seal(WorkerAnnounce {
            spec,
            pool: PoolRole::Aggregated,
            endpoint: format!("http://10.0.0.{}:8000", n % 250),
            heartbeat_ms: 100,
            lease_ms: 1000,
            leaving: n.is_multiple_of(2),
        }),
        seal(WorkerLoad {
            worker: WorkerId(n),
            dp_rank: 0,
            kv_used_blocks: n,
            waiting: 1,
            running: 2,
            adapters: n.is_multiple_of(2).then(|| router_core::AdapterResidency {
                running: vec!["sql".into()],
                slots: Some(2),
            }),
        }),
        seal(BookingMsg::Deltas(vec![
            BookingDelta::Book {
                request,
                booking: booking(n),
            },
            BookingDelta::Reserve {
                request,
                reservation,
            },
            BookingDelta::Release { request },
        ])),
        seal(BookingMsg::Heartbeat {
            digest: Digest {
                bookings: n,
                reservations: 1,
                checksum: n ^ 0xdead,
            },
            lease_ms: 3000,
        }),
        seal(BookingMsg::Goodbye),
        seal(BookingMsg::Snapshot(SnapshotReply {
            owner: Uuid::from_u128(3),
            last_seq: n,
            bookings: vec![(request, booking(n))],
            reservations: vec![(request, reservation)],
        })),
        seal(SnapshotRequest {
            owner: Some(Uuid::from_u128(u128::from(n))),
        }),
        seal(RoomChanged {
            epoch: n,
            classes: vec![router_core::ClassId(1)],
        }),
        seal(vec![
            KvEvent {
                worker: WorkerId(n),
                dp_rank: 1,
                event_id: n,
                data: KvEventData::Stored {
                    parent: Some(ExternalHash(n)),
                    blocks: vec![StoredBlock {
                        hash: ExternalHash(n + 1),
                        local: router_core::LocalBlockHash(n + 2),
                    }],
                },
            },
            KvEvent {
                worker: WorkerId(n),
                dp_rank: 0,
                event_id: n + 1,
                data: KvEventData::Removed {
                    hashes: vec![ExternalHash(n)],
                },
            },
        ]),
        seal(CreditEnvelope {
            to: Uuid::from_u128(4),
            msg: CreditMsg::Grant {
                rank: RankId::new(n, 0),
                blocks: n,
                seq: 1,
                kind: router_core::credits::CreditKind::Prefill,
            },
        }),
    ]
}

/// msgpack prefixes that claim far more than any payload holds: array32, map32, str32 and
/// bin32 of 2^32 - 1 items or bytes, and a fixarray of one (repeated, it nests deeply).
const BOMBS: [&[u8]; 5] = [
    &[0xdd, 0xff, 0xff, 0xff, 0xff],
    &[0xdf, 0xff, 0xff, 0xff, 0xff],
    &[0xdb, 0xff, 0xff, 0xff, 0xff],
    &[0xc6, 0xff, 0xff, 0xff, 0xff],
    &[0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91],
];

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Cut(usize),
    Splice(usize, usize),
    Drop(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => any::<usize>().prop_map(Mutation::Cut),
        2 => (any::<usize>(), 0..BOMBS.len()).prop_map(|(i, b)| Mutation::Splice(i, b)),
        1 => (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Drop(i, n)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Set(i, b) => {
                if let Some(at) = bytes.get_mut(i % len) {
                    *at = b;
                }
            }
            Mutation::Cut(i) => bytes.truncate(i % len),
            Mutation::Splice(i, bomb) => {
                let at = (i % len).min(bytes.len());
                bytes.splice(at..at, BOMBS[bomb].iter().copied());
            }
            Mutation::Drop(i, n) => {
                let at = (i % len).min(bytes.len());
                let end = (at + n).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
    bytes
}

/// An envelope header of this version and cluster followed by `body` (raw msgpack).
fn with_body(body: &[u8]) -> Vec<u8> {
    let mut bytes = seal(());
    // `()` is msgpack nil, the envelope's last byte (`body` is its last field).
    assert_eq!(bytes.pop(), Some(0xc0));
    bytes.extend_from_slice(body);
    bytes
}

#[test]
fn the_valid_envelopes_decode_as_their_own_type() {
    let all = valid(3);
    assert!(decode::<WorkerAnnounce>(&all[0], CLUSTER).is_ok());
    assert!(decode::<WorkerLoad>(&all[1], CLUSTER).is_ok());
    for (i, payload) in all.iter().enumerate().take(6).skip(2) {
        assert!(decode::<BookingMsg>(payload, CLUSTER).is_ok(), "{i}");
    }
    assert!(decode::<SnapshotRequest>(&all[6], CLUSTER).is_ok());
    assert!(decode::<RoomChanged>(&all[7], CLUSTER).is_ok());
    assert!(decode::<KvEventBatch>(&all[8], CLUSTER).is_ok());
    assert!(decode::<CreditEnvelope>(&all[9], CLUSTER).is_ok());
}

/// Bodies that claim 4 GiB of items or bytes, or nest 100,000 arrays deep, in the place of
/// every payload type's body and of a field inside it: refused as malformed, at once.
#[test]
fn length_bombs_and_deep_nesting_are_refused_as_malformed() {
    let deep = vec![0x91; 100_000];
    let mut bodies: Vec<Vec<u8>> = BOMBS[..4].iter().map(|b| b.to_vec()).collect();
    bodies.push(deep.clone());
    // Inside a field: `{"deltas": <bomb>}` and a KV event batch of one stored event whose
    // blocks claim 4 Gi entries.
    bodies.push([&[0x81, 0xa6][..], b"deltas", BOMBS[0]].concat());
    bodies.push([&[0x81, 0xa6][..], b"deltas", &deep].concat());
    for body in &bodies {
        let payload = with_body(body);
        decode_all(&payload);
        for result in [
            decode::<BookingMsg>(&payload, CLUSTER).map(|_| ()),
            decode::<KvEventBatch>(&payload, CLUSTER).map(|_| ()),
            decode::<WorkerAnnounce>(&payload, CLUSTER).map(|_| ()),
            decode::<SnapshotReply>(&payload, CLUSTER).map(|_| ()),
        ] {
            assert!(
                matches!(result, Err(DecodeError::Malformed(_))),
                "{:x?}: {result:?}",
                &body[..body.len().min(12)]
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_envelopes_never_panic_a_decoder(
        n in 0u64..1_000_000,
        which in 0usize..10,
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let payload = mutate(valid(n).swap_remove(which), &mutations);
        decode_all(&payload);
    }
}
