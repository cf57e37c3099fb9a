//! Bookings that must not leak on the disaggregated path, under each convention (`vllm.rs`,
//! `sglang.rs`): a node's prefill and decode RouterActors on a `LocalBus`, simulated workers
//! and a dead one, real HTTP (the shared tests are `../support/disagg_leaks.rs`). Each ends
//! with both ledgers idle.

mod sglang;
mod vllm;
