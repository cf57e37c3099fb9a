//! Bookings that must not leak when a request fails midway, on every path: the aggregated
//! path (`aggregated.rs`) and the disaggregated one under each convention (`disagg_vllm.rs`,
//! `disagg_sglang.rs`, sharing `../support/disagg_leaks.rs`). Nodes in process, simulated
//! workers and dead ones, real HTTP; each test ends with every ledger idle.

mod aggregated;
mod disagg_sglang;
mod disagg_vllm;
