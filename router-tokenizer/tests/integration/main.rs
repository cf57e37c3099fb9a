//! router-tokenizer's integration tests, one test binary (each module was a binary of its
//! own): the byte bound of the input limits and long text encoded in parallel pieces, both on
//! the benchmark's varied text (`benches/varied_text.rs`, included once here).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../benches/varied_text.rs"]
mod varied_text;

mod tokenizer_bound;
mod tokenizer_split;
