//! router-actors' integration tests, one test binary (each module was a binary of its own):
//! the bus contract against both buses, supervision of a whole node on the in-process bus,
//! and replicas on a real nats-server (`cluster_nats`, `cluster_faults_nats`,
//! `one_gate_nats`). Two tests keep a binary of their own: `tests/testkit.rs` (it writes and
//! then executes scripts, which fails with ETXTBSY when another test's thread forks a
//! nats-server meanwhile) and `tests/wire_allocation.rs` (a counting global allocator).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod bus_contract;
mod cluster_faults_nats;
mod cluster_nats;
mod one_gate_nats;
mod supervision;
