//! router-engine's integration tests, one test binary (each module was a binary of its own):
//! the engine link against a stand-in vLLM engine, and the event path and metrics reader
//! against what a real vLLM sent (`../fixtures/`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod link_fake_engine;
mod vllm_fixture;
