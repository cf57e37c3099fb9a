//! Policy classes: what operators configure (`config`, `classify_config`), the validated
//! profile the scheduler uses (`profile`), request classifiers (`classify`), exact fractions
//! (`fraction`) and the errors of all of them (`error`).

mod classify;
mod classify_config;
mod config;
mod error;
mod fraction;
mod profile;

pub use classify::{
    BodyField, ClassSource, Classification, Classifier, Condition, Endpoint, Refusal, RequestFacts,
    RuleAction, TokenRange,
};
pub use classify_config::{ClassifierConfig, FieldMatchConfig, RangeConfig, RefuseConfig, Values};
pub use config::{ClassConfig, PolicyFile, RejectThresholdsConfig};
pub use error::{ClassifyError, PolicyError, UnknownClass};
pub use fraction::Fraction;
pub use profile::{ClassPolicy, PolicyFormat, PolicyProfile, RejectThresholds, valid_name};

#[cfg(test)]
mod classify_key_tests;
#[cfg(test)]
mod classify_props;
#[cfg(test)]
mod classify_tests;
#[cfg(test)]
mod tests;
