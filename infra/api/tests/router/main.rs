//! The API router, called with `oneshot` over a real in-memory SQLite store
//! and the real control operations: every answer, and for every refused
//! request the proof that nothing was written.

// Test code: a failed expectation should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod alerts;
mod auth;
mod common;
mod config_limits;
mod configs;
mod delivery;
mod metrics;
mod oidc;
mod openapi;
mod operations;
mod reads;
mod scopes;
mod targets;
mod tokens;
mod ui;
