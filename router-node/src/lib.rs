//! `router-node` as a library: the parts of the node that the binary, integration tests and
//! benches drive directly.
//!
//! - `auth`: API keys with class entitlements and rate limits: the keys file, its reloads,
//!   key material for `router-node keys`.
//! - `bench`: `router-node bench`: replays a Mooncake trace (or synthetic load) against an
//!   OpenAI endpoint, with progress, plots and a report; `trace synth`'s trace generator.
//! - `config`: the node's typed TOML configuration (defaults, file, environment).
//! - `frontend`: the OpenAI-compatible HTTP frontend (axum) in front of a pool's router.
//! - `link`: `router-node link`: a sidecar making one real engine (vLLM, SGLang) a worker of
//!   the fleet over NATS (router-engine's engine link).
//! - `loadgen`: one measured streaming request (bench and demo).
//! - `metrics`: the node's Prometheus metrics: declarations, the frontend's recording, and
//!   the scrape-time reading of the node's actors.
//! - `report`: latency percentiles and the per-class table of the bench and demo reports.
//! - `runtime`: the tokio runtime a command starts (exit code 1, said on stderr, when it cannot).
//! - `serve`: `router-node serve`: config → telemetry → bus → node → frontend → drain.
//! - `sse`: reading an OpenAI SSE stream (content chunks, usage) for the proxy's metrics and
//!   the load generators.
//! - `telemetry`: logs (text or JSON) and OTLP traces, W3C trace-context propagation.
//! - `worker`: `worker --sim`: router-sim's simulated worker reading bodies with the
//!   frontend's tokenizer.
//!
//! `fuzz_tests.rs` (tests only) holds the property tests of every decoder of this crate that
//! reads what a client, a worker or a file sends (issue #14 item 5).

pub mod auth;
pub mod bench;
pub mod config;
pub mod frontend;
pub mod link;
pub mod loadgen;
pub mod metrics;
pub mod report;
pub mod runtime;
pub mod serve;
pub mod sse;
pub mod telemetry;
pub mod worker;

#[cfg(test)]
mod fuzz_tests;
