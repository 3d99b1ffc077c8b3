//! The engine over the real SQLite store with runners of each shape (inline,
//! asynchronous), and the state file's faults. One test binary, a module per
//! area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod async_runner;
mod delivery_metrics;
mod inline_runner;
mod release_push;
mod state_file;
