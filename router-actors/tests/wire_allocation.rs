//! Decoding a bus payload never allocates much more than the payload: lengths that claim
//! 4 GiB of items or bytes, and a valid-looking 1 MiB array of a million items decoded as
//! types whose items are a hundred times larger, are measured with a counting global
//! allocator (this test binary's own, `stats_alloc`): under 1 MiB for the claims, a few times
//! the payload for the array.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use router_actors::wire::{
    BookingMsg, KvEventBatch, Outbox, SnapshotReply, WorkerAnnounce, decode,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use uuid::Uuid;

/// The system allocator, counting (this test binary only).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CLUSTER: &str = "sy";
const MIB: usize = 1 << 20;

/// An envelope of this cluster and version whose body is the raw msgpack `body`.
fn with_body(body: &[u8]) -> Vec<u8> {
    let mut bytes = Outbox::new(CLUSTER, Uuid::from_u128(1))
        .seal("s", ())
        .expect("encodes")
        .to_vec();
    assert_eq!(bytes.pop(), Some(0xc0), "the body (nil) is the last byte");
    bytes.extend_from_slice(body);
    bytes
}

/// Bytes requested (allocations and growth) while decoding `payload` as every type.
fn allocated_decoding(payload: &[u8]) -> usize {
    let region = Region::new(GLOBAL);
    let _ = decode::<KvEventBatch>(payload, CLUSTER);
    let _ = decode::<BookingMsg>(payload, CLUSTER);
    let _ = decode::<SnapshotReply>(payload, CLUSTER);
    let _ = decode::<WorkerAnnounce>(payload, CLUSTER);
    let change = region.change();
    change.bytes_allocated + usize::try_from(change.bytes_reallocated.max(0)).unwrap_or(0)
}

// One test function: the counters are process-wide, so nothing else may allocate meanwhile.
#[test]
fn decoding_allocates_in_proportion_to_the_payload_not_to_its_claims() {
    let bombs: [&[u8]; 5] = [
        &[0xdd, 0xff, 0xff, 0xff, 0xff],
        &[0xdf, 0xff, 0xff, 0xff, 0xff],
        &[0xdb, 0xff, 0xff, 0xff, 0xff],
        &[0xc6, 0xff, 0xff, 0xff, 0xff],
        &[
            0x81, 0xa6, b'd', b'e', b'l', b't', b'a', b's', 0xdd, 0xff, 0xff, 0xff, 0xff,
        ],
    ];
    for bomb in bombs {
        let payload = with_body(bomb);
        let bytes = allocated_decoding(&payload);
        assert!(bytes < MIB, "{bomb:x?}: {bytes} bytes allocated");
    }
    // A well-formed 1 MiB array of a million small integers: serde pre-allocates at most
    // 1 MiB for a Vec whatever its claimed length, and the first item fails.
    let mut array = vec![0xdd];
    array.extend_from_slice(&(MIB as u32).to_be_bytes());
    array.extend(std::iter::repeat_n(0x01, MIB));
    let payload = with_body(&array);
    let bytes = allocated_decoding(&payload);
    assert!(
        bytes <= 8 * MIB,
        "{bytes} bytes allocated for a 1 MiB payload"
    );
}
