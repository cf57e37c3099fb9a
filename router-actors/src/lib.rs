//! Switchyard's actor layer: supervised ractor actors around the pure `router-core`
//! scheduler, and the bus (NATS or in-process) at one edge.
//!
//! - `bus`: publish / subscribe / request-reply, NATS and in-process, one contract.
//! - `testkit`: test support, spawns processes (a real nats-server for the NATS bus tests).
//! - `wire`: subjects, versioned msgpack envelopes, and conversion to typed messages; the
//!   only place that sees raw bus payloads.

pub mod bus;
pub mod testkit;
pub mod wire;
