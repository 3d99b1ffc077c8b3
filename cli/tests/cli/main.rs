//! The `vergence` binary, run as a process against configs in temporary
//! folders, its state files and the servers it starts: one test binary, a
//! module per area. It links no cloud SDK: what it checks, it checks through
//! the binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_schema;
mod audit;
mod breakglass;
mod browser;
mod commands;
mod common;
mod config_files;
mod features;
mod lambda;
mod limits;
mod metrics;
mod notifications;
mod oidc;
mod papercuts;
mod parity;
mod per_app;
mod policies;
mod quickstart;
mod release_input;
mod reliability;
mod runtime_interface;
mod scale;
mod secrets;
mod serve;
mod targets;
mod terminal;
mod terraform;
mod up_remote;
mod watch;
