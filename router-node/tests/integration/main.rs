//! router-node's in-process integration tests, one test binary (each module was a binary of
//! its own). The harness is `../support/` (a node in process, stand-in and simulated workers),
//! declared once here and shared with the telemetry binaries and router-tools' bench tests;
//! the disaggregated fleet (`../support/disagg.rs`) is included by each module that uses it,
//! with that module's `CONVENTION`. The telemetry tests (`tests/telemetry.rs`,
//! `telemetry_http.rs`, `telemetry_disagg.rs`) keep a binary each: each installs the
//! process-wide tracing subscriber, which a process can do once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod adapters;
mod admin_listener;
mod api_keys;
mod classifiers;
mod connection_limits;
mod disagg_frontend;
mod disagg_local;
mod disagg_sglang;
mod engine_fields;
mod http_frontend;
mod http_frontend_faults;
mod input_limits;
mod leaks;
mod models;
mod node_metrics;
mod openai_python_client;
mod piece_limits;
mod serve;
mod sim_worker_behind_frontend;
mod tokenizer;
mod tokenizer_model_dir;
