//! The local runner against real processes and a stand-in container engine:
//! `run_job`, `LocalRunner` as the engine uses it, and jobs in containers.
//! One test binary, a module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod container;
mod run_job;
mod runner;
