//! `router-sim`: the simulated inference engine and the simulated worker Switchyard routes to
//! in tests, the demo and benches, with no GPU and no model.
//!
//! - `engine`: a deterministic, clock-free model of one data-parallel rank of an LLM engine
//!   (KV block pool with prefix reuse, vLLM-like scheduler, timing model).
//! - `worker`: `worker --sim`: that engine behind an OpenAI-compatible HTTP API on tokio
//!   time, announcing itself, its KV events and its load on the bus like a real worker.
//! - `nats_args`: the `--nats-*` credentials and TLS flags of every command that connects a
//!   worker to NATS (`worker --sim` here, `link` in the node).
//!
//! The crate knows nothing of the router node: how a request's text becomes token ids is
//! given to the worker as a [`worker::PromptReader`] (the node passes its frontend's
//! tokenizer so both count the same tokens). Without one it reads token-id prompts only.

pub mod engine;
pub mod nats_args;
pub mod worker;

pub use engine::Role;
pub use nats_args::NatsSecurityArgs;
pub use worker::{PromptReader, SimConfig, SimWorker};
