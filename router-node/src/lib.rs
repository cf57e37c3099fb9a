//! `router-node` as a library: the parts of the node that the binary, integration tests and
//! benches drive directly.
//!
//! - `engine`: the simulated engine behind `worker --sim` (block pool, scheduler, timing).
//! - `frontend`: the OpenAI-compatible HTTP frontend (axum) in front of a pool's router.
//! - `worker`: `worker --sim`, the simulated engine behind an OpenAI-compatible API.

pub mod engine;
pub mod frontend;
pub mod worker;
