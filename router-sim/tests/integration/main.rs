//! router-sim's integration tests, one test binary (each module was a binary of its own): the
//! simulated worker over real HTTP, with token ids and with text and chat bodies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sim_worker;
mod sim_worker_text;
