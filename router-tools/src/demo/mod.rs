//! `router-tools demo`: the embedded default.
//!
//! - `http/`: the default. A router node behind the real OpenAI HTTP frontend, simulated
//!   engines (`worker --sim`) on an in-process bus, the built-in workload sent by real
//!   streaming HTTP clients, a summary; then it keeps serving (or stops with `--once`).
//! - `--offline`: the real router-core admission schedulers over a simulated fleet in
//!   simulated time: a deterministic discrete-event simulation (no clock, no sleeps, no
//!   network) of the same seeded two-class workload against router-sim's engines (the model
//!   `worker --sim` serves), then what happened per class as a table or JSON.
//!
//! Both need nothing installed.
//!
//! - `workload.rs`: the built-in policy profile and the seeded workload.
//! - `sim.rs`: the event loop that drives the schedulers and router-sim's engines.
//! - `report.rs`: the measurements and the serialisable report (the JSON).
//! - `render.rs`: the report as a table.

mod engines;
pub mod http;
mod render;
mod report;
mod sim;
mod workload;

pub use report::Report;

/// What `router-tools demo` was asked for (validated by the CLI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Prefill pool + decode pool instead of one aggregated pool.
    pub disagg: bool,
    /// Workers per pool (one rank each).
    pub workers: u32,
    pub requests: u32,
    pub seed: u64,
}

/// Runs the simulation to the end and returns its report.
pub fn run(opts: &Options) -> Result<Report, String> {
    let mut sim = sim::Sim::new(opts)?;
    sim.run();
    Ok(sim.rec.report(opts))
}
