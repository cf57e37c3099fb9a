//! Switchyard's whole-system tests. The tests in `tests/` start real processes (nats-server,
//! `router-node serve` nodes, `router-tools worker --sim` workers; later load balancers and real
//! engines) and talk to them over real sockets, as an operator would. Tests that build the app
//! or the actors in-process stay in their own crate.
//!
//! This library is their [`support`] (finding the `router-node` binary, starting the
//! processes on ports they pick themselves, stopping them and reading what they printed; the
//! cluster harness: nats-server, replicas, simulated workers and HAProxy) and the scenarios
//! that both a test and a command run: [`burst`] (`cluster-burst`), [`faults`]
//! (`cluster-faults`) and [`compare`] (`compare-routers`).

pub mod burst;
pub mod compare;
pub mod faults;
pub mod support;
