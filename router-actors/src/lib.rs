//! Switchyard's actor layer: supervised ractor actors around the pure `router-core`
//! scheduler, and the bus (NATS or in-process) at one edge.
//!
//! - `bus`: publish / subscribe / request-reply, NATS and in-process, one contract.
//! - `peer_sync`: keeps router replicas' ledgers in step over the bus (deltas, heartbeats
//!   with digests, snapshot repair, lease expiry).
//! - `router`: the RouterActor of one pool and its typed handle.
//! - `room_view`: the decode pool's room published lock-free for the prefill actor.
//! - `wire`: subjects, versioned msgpack envelopes, and conversion to typed messages; the
//!   only place that sees raw bus payloads.

pub mod bus;
pub mod clock;
pub mod peer_sync;
pub mod room_view;
pub mod router;
pub mod wire;

pub use clock::Clock;
pub use peer_sync::{PeerSyncActor, PeerSyncArgs, PeerSyncConfig, PeerSyncHandle, PeerSyncMsg};
pub use router::{OwnDelta, Paired, RouterActor, RouterArgs, RouterHandle, RouterMsg};
