//! The heartbeat digest: count and order-independent checksum of one owner's live bookings
//! and reservations. The one function both sides use: the sender over its own state, the
//! receiver over what its ledger holds under the sender's id.
//!
//! A reservation's lease end is left out: it is kept in each node's own clock.
//!
//! Each item is hashed with a fixed, build-independent mix (no `RandomState`, no SipHash
//! keys), and the item hashes are summed, so the order of iteration does not matter. A
//! booking's block hashes enter by their count and their last hash: the hashes are chained
//! (each commits to every block before it), so the last one stands for the whole prompt, and
//! a digest costs the same whatever the prompts' lengths (every peer digests every other's
//! bookings at each heartbeat).

use super::Digest;
use router_core::RequestId;
use router_core::ledger::{Booking, LeasedReservation};

const BOOKING_TAG: u64 = 0xB00C;
const RESERVATION_TAG: u64 = 0x7E5E;

/// splitmix64's finaliser: a cheap, stable 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A running hash over a sequence of words.
struct Stable(u64);

impl Stable {
    fn new(tag: u64) -> Self {
        Self(mix(tag))
    }

    fn add(&mut self, word: u64) -> &mut Self {
        self.0 = mix(self.0 ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
        self
    }

    fn request(&mut self, id: RequestId) -> &mut Self {
        let v = id.0.as_u128();
        self.add(v as u64).add((v >> 64) as u64)
    }
}

pub fn booking_hash(request: RequestId, b: &Booking) -> u64 {
    let mut h = Stable::new(BOOKING_TAG);
    h.request(request)
        .add(b.rank.worker.0)
        .add(u64::from(b.rank.dp_rank))
        .add(b.prefill_tokens)
        .add(b.extra_blocks)
        .add(b.block_hashes.len() as u64)
        .add(b.block_hashes.last().copied().unwrap_or(0));
    h.0
}

pub fn reservation_hash(request: RequestId, r: &LeasedReservation) -> u64 {
    let mut h = Stable::new(RESERVATION_TAG);
    h.request(request)
        .add(r.rank.worker.0)
        .add(u64::from(r.rank.dp_rank))
        .add(r.blocks)
        .add(r.seq);
    h.0
}

/// The digest of one owner's live bookings and reservations (any order).
pub fn digest_of(
    bookings: &[(RequestId, Booking)],
    reservations: &[(RequestId, LeasedReservation)],
) -> Digest {
    digest_from(
        bookings.iter().map(|(id, b)| (*id, b)),
        reservations.iter().copied(),
    )
}

/// The same digest over borrowed items, so a ledger can be digested without copying it.
pub fn digest_from<'a>(
    bookings: impl IntoIterator<Item = (RequestId, &'a Booking)>,
    reservations: impl IntoIterator<Item = (RequestId, LeasedReservation)>,
) -> Digest {
    let mut digest = Digest::default();
    for (id, b) in bookings {
        digest.bookings += 1;
        digest.checksum = digest.checksum.wrapping_add(booking_hash(id, b));
    }
    for (id, r) in reservations {
        digest.reservations += 1;
        digest.checksum = digest.checksum.wrapping_add(reservation_hash(id, &r));
    }
    digest
}
