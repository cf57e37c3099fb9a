//! `router-tools` as a library: the demo, the load tools and the simulated worker command,
//! over the serving library (`router-node`) and the simulator (`router-sim`). The serving
//! binary depends on none of this.
//!
//! - `demo`: `router-tools demo`: the embedded default, a router node and simulated engines
//!   in one process with a built-in workload over HTTP, or `--offline` in simulated time.
//! - `bench`: `router-tools bench`: replays a Mooncake trace (or synthetic load) against an
//!   OpenAI endpoint, with progress, plots and a report; `trace synth`'s trace generator.
//! - `loadgen`: one measured streaming request (bench and demo).
//! - `report`: latency percentiles and the per-class table of the bench and demo reports.
//! - `worker`: `router-tools worker --sim`: router-sim's simulated worker reading bodies
//!   with the routers' tokenizer.
//!
//! `fuzz_tests.rs` (tests only) holds the property tests of the decoders here that read
//! what a file or a server sends (traces, SSE streams).

pub mod bench;
pub mod demo;
pub mod loadgen;
pub mod report;
pub mod worker;

#[cfg(test)]
mod fuzz_tests;
