//! Policy classes: what operators configure (`config`), the validated profile the scheduler
//! uses (`profile`), exact fractions (`fraction`) and the errors of both (`error`).

mod config;
mod error;
mod fraction;
mod profile;

pub use config::{ClassConfig, PolicyFile, RejectThresholdsConfig};
pub use error::{PolicyError, UnknownClass};
pub use fraction::Fraction;
pub use profile::{ClassPolicy, PolicyFormat, PolicyProfile, RejectThresholds};

#[cfg(test)]
mod tests;
