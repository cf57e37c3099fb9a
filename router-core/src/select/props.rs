//! Selection properties.
