//! `router-sim`: the simulated inference engine and the simulated worker Switchyard routes to
//! in tests, the demo and benches, with no GPU and no model.
//!
//! - `engine`: a deterministic, clock-free model of one data-parallel rank of an LLM engine
//!   (KV block pool with prefix reuse, vLLM-like scheduler, timing model).
//! - `worker`: `worker --sim`: that engine behind an OpenAI-compatible HTTP API on tokio
//!   time, announcing itself, its KV events and its load on the bus like a real worker.
//!
//! The crate knows nothing of the router node: a worker reads bodies with the
//! [`worker::PromptReader`] it is given, a router-tokenizer [`router_tokenizer::Prompter`]
//! (the routers' `[tokenizer]`, so both count the same tokens) or, by default, token-id
//! prompts only.

pub mod engine;
pub mod worker;

pub use engine::Role;
pub use worker::{PromptReader, SimConfig, SimWorker};
