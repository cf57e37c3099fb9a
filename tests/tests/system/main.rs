//! The whole-system tests of the command lines and small fleets, one test binary (each module
//! was a binary of its own): real processes over real sockets, run side by side. The tests
//! that bring up a whole fleet are the `fleet` binary (`tests/fleet/main.rs`, one fleet at a
//! time). The heavy suites that need a backend of their own keep a binary each, run by their
//! scripts (every test in them ignored by default): `tests/real_vllm.rs`
//! (`scripts/test-real-engines.sh`) and `tests/otel_phoenix.rs` (`scripts/test-traces.sh`).
//! `compare_routers`' ignored smoke tests are here, selected by name by
//! `scripts/test-compare.sh`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_keys;
mod bench_cli;
mod compare_routers;
mod demo;
mod demo_http;
mod deploy_files;
mod link_cli;
mod nats_security;
mod serve_cli;
mod worker_cli;
