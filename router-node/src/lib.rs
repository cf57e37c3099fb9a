//! `router-node` as a library: the parts of the node that integration tests and other
//! binaries drive directly.
//!
//! - `frontend`: the OpenAI-compatible HTTP frontend (axum) in front of a pool's router.

pub mod frontend;
