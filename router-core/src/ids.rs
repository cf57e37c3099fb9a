//! Identities shared by every layer: workers, their data-parallel ranks, routers (booking
//! owners), requests and policy classes. All are small `Copy` values so the hot path never
//! clones strings.

use serde::{Deserialize, Serialize};
use std::fmt;
use uuid::Uuid;

/// A worker (one engine process, possibly with several data-parallel ranks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerId(pub u64);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker-{}", self.0)
    }
}

/// The unit that is scored, booked and busy-checked: one data-parallel rank of one worker.
/// Ordered by (worker, dp rank) so tie-breaks and iteration are deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RankId {
    pub worker: WorkerId,
    pub dp_rank: u32,
}

impl RankId {
    pub const fn new(worker: u64, dp_rank: u32) -> Self {
        Self {
            worker: WorkerId(worker),
            dp_rank,
        }
    }
}

impl fmt::Display for RankId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/dp{}", self.worker, self.dp_rank)
    }
}

/// A router replica. Every booking is owned by the router that made it, so a dead peer's
/// bookings can be dropped as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RouterId(pub Uuid);

impl fmt::Display for RouterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "router-{}", self.0)
    }
}

/// A request, unique per owning router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub Uuid);

impl RequestId {
    pub const fn from_u128(v: u128) -> Self {
        Self(Uuid::from_u128(v))
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Bookings and reservations are keyed by their owner and request: two routers may reuse
/// a request id without colliding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BookingKey {
    pub owner: RouterId,
    pub request: RequestId,
}

impl BookingKey {
    pub const fn new(owner: RouterId, request: RequestId) -> Self {
        Self { owner, request }
    }
}

/// Index of a policy class inside its validated profile (dense, starts at 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClassId(pub u16);

impl ClassId {
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}
