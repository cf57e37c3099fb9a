//! `router-node` as a library: the parts of the node that other targets (the binary, tests,
//! benches) use as modules. Today that is the simulated engine behind `worker --sim`.

pub mod engine;
