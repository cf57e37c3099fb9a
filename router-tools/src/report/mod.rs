//! What the load generators report, shared by `router-tools demo` (offline and over HTTP) and
//! `router-tools bench`: latency histograms read as millisecond percentiles
//! ([`Latency`] → [`Percentiles`]) and the per-class table every summary prints
//! ([`ClassTable`], with [`cell`] for a millisecond cell and [`reasons_line`] for the
//! per-class rejection reasons under it).
//!
//! - `percentiles.rs`: the one latency histogram and percentile type, and rounding.
//! - `table.rs`: the fixed-width class table and its reasons lines.

mod percentiles;
mod table;

pub use percentiles::{Latency, Percentiles, micros, round};
pub use table::{ClassTable, Column, cell, col, reason_counts, reasons_line};
