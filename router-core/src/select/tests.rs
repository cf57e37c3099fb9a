//! Selection unit tests.
