//! Switchyard's actor layer: supervised ractor actors around the pure `router-core`
//! scheduler, and the bus (NATS or in-process) at one edge.
//!
//! - `bus`: publish / subscribe / request-reply, NATS and in-process, one contract.
//! - `node`: one router node's actor tree (aggregated or disaggregated) on any bus.
//! - `peer_sync`: keeps router replicas' ledgers in step over the bus (deltas, heartbeats
//!   with digests, snapshot repair, lease expiry).
//! - `router`: the RouterActor of one pool and its typed handle.
//! - `bridge`: the one publish loop and the one receive loop between the bus and the actors,
//!   with their counters; `room_bus` (RoomChanged between nodes on `router.decode.room`) and
//!   `credit_bus` (room credits on `router.<pool>.credits`) are two bridges, started by a node
//!   as its couriers.
//! - `room_view`: the decode pool's room published lock-free for the prefill actor.
//! - `supervisor`: the NodeSupervisor, its restart policy, child specs (and the one helper
//!   that spawns a linked, restartable actor child), actor slots (and calls through them with
//!   a timeout), tasks owned by an actor's state, the in-flight registry.
//! - `testkit` (feature `testsuite`, for tests only): spawns processes (a real nats-server for
//!   the NATS bus tests) and fault-injecting buses.
//! - `registry`: the WorkerRegistryActor: worker announcements with a lease, upserts and
//!   removals on the pools' routers, and the endpoint directory the frontend reads.
//! - `kv_events`: the KvEventsActor of one pool: workers' KV events into the router's index,
//!   counted by kind, with per-publisher sequence gaps.
//! - `worker_link`: the worker side (simulated engines): heartbeat announcements and KV events.
//! - `edge`: subscription → decoded, typed actor messages through a bounded, counted inbox.
//! - `lag`: the peer-sync lag histogram (publication to application) and its summary.
//! - `vigil`: notices that the node itself did not run for a while (a paused VM, SIGSTOP), so
//!   that the registry and peer sync extend their leases instead of expiring everyone.
//! - `wire`: subjects, versioned msgpack envelopes, and conversion to typed messages; the
//!   only place that sees raw bus payloads.

pub mod bridge;
pub mod bus;
pub mod clock;
mod couriers;
pub mod credit_bus;
pub mod edge;
pub mod kv_events;
pub mod lag;
mod liveness;
pub mod node;
pub mod peer_sync;
pub mod registry;
pub mod room_bus;
pub mod room_view;
pub mod router;
pub mod supervisor;
#[cfg(feature = "testsuite")]
pub mod testkit;
pub mod vigil;
pub mod wire;
pub mod worker_link;

#[cfg(test)]
mod workers_tests;

pub use clock::Clock;
pub use kv_events::{KvEventsActor, KvEventsArgs, KvEventsHandle, KvEventsMsg, kv_events_child};
pub use lag::LagSummary;
pub use liveness::Liveness;
pub use node::{DEFAULT_LIVENESS_GRACE, Node, NodeConfig, NodeError, Topology};
pub use peer_sync::{
    DeltaFeed, PeerSyncActor, PeerSyncArgs, PeerSyncConfig, PeerSyncHandle, PeerSyncMsg,
    peer_sync_child,
};
pub use registry::{
    RegistryArgs, RegistryHandle, RegistryMsg, RegistryShared, WorkerRegistryActor, registry_child,
};
pub use router::{OwnDelta, Paired, RouteError, RouterActor, RouterArgs, RouterHandle, RouterMsg};
pub use supervisor::{CallError, DEFAULT_CALL_TIMEOUT};
pub use worker_link::WorkerLink;
