//! `router-node` as a library: the parts of the node that the binary, integration tests and
//! benches drive directly.
//!
//! - `auth`: API keys with class entitlements and rate limits: the keys file, its reloads,
//!   key material for `router-node keys`.
//! - `config`: the node's typed TOML configuration (defaults, file, environment).
//! - `frontend`: the OpenAI-compatible HTTP frontend (axum) in front of a pool's router.
//! - `link`: `router-node link`: a sidecar making one real engine (vLLM, SGLang) a worker of
//!   the fleet over NATS (router-engine's engine link).
//! - `metrics`: the node's Prometheus metrics: declarations, the frontend's recording, and
//!   the scrape-time reading of the node's actors.
//! - `runtime`: the tokio runtime a command starts (exit code 1, said on stderr, when it cannot).
//! - `serve`: `router-node serve`: config → telemetry → bus → node → frontend → drain.
//! - `sse`: reading an OpenAI SSE stream (content chunks, usage) for the proxy's metrics and
//!   router-tools' load generators.
//! - `telemetry`: logs (text or JSON) and OTLP traces, W3C trace-context propagation.
//!
//! The tokenizers and chat rendering are router-tokenizer's; the demo, the load tools and the
//! simulated worker command are router-tools', which depends on this crate (never the other
//! way).
//!
//! `fuzz_tests.rs` (tests only) holds the property tests of every decoder of this crate that
//! reads what a client, a worker or a file sends.

pub mod auth;
pub mod config;
pub mod frontend;
pub mod link;
pub mod metrics;
pub mod runtime;
pub mod serve;
pub mod sse;
pub mod telemetry;

#[cfg(test)]
mod fuzz_tests;
