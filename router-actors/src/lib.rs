//! Switchyard's actor layer: supervised ractor actors around the pure `router-core`
//! scheduler, and the bus (NATS or in-process) at one edge.
//!
//! - `bus`: publish / subscribe / request-reply, NATS and in-process, one contract.
//! - `router`: the RouterActor of one pool and its typed handle.
//! - `room_bus`: RoomChanged between nodes on `router.decode.room`.
//! - `room_view`: the decode pool's room published lock-free for the prefill actor.
//! - `supervisor`: the NodeSupervisor, its restart policy, actor slots and the in-flight registry.
//! - `testkit`: test support, spawns processes (a real nats-server for the NATS bus tests).
//! - `wire`: subjects, versioned msgpack envelopes, and conversion to typed messages; the
//!   only place that sees raw bus payloads.

pub mod bus;
pub mod clock;
pub mod room_bus;
pub mod room_view;
pub mod router;
pub mod supervisor;
pub mod testkit;
pub mod wire;

pub use clock::Clock;
pub use router::{Paired, RouterActor, RouterArgs, RouterHandle, RouterMsg};
