//! The compiler against config directories: every error with its position,
//! and the config's JSON Schema against the compiler. One test binary, a
//! module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod config_errors;
mod schema;
