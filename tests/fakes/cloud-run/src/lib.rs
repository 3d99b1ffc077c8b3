//! A fake of the Google Cloud Run Admin API v2 — and of the one Cloud
//! Logging call a runner needs — served in-process over HTTP/1.1 on
//! 127.0.0.1, speaking the REST/JSON transport the real
//! `google-cloud-run-v2` and `google-cloud-logging-v2` clients use, so
//! tests exercise those clients rather than a mock of them.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use vergence_fake_cloud_run::FakeCloudRun;
//!
//! let fake = FakeCloudRun::start().await?;
//! let services = fake.services_client().await?;
//! // … drive `services` as production code would, then inspect `fake`:
//! assert_eq!(fake.count("GET", "/v2/projects/p/locations/l/services/web"), 0);
//! # Ok(()) }
//! ```
//!
//! What it models: services (with revisions, traffic and readiness that
//! settles after a configurable number of polls), jobs, executions run by a
//! pluggable [`TaskExecutor`] (a local process by default), tasks, their
//! stdout/stderr as Cloud Logging entries, long-running operations, and
//! errors as `google.rpc.Status`. State lives in memory and dies with the
//! handle.

mod error;
mod executions;
mod executor;
mod filter;
mod handle;
mod jobs;
mod logging;
mod operations;
mod process;
mod requests;
mod resource;
mod revisions;
mod runner;
mod server;
mod services;
mod state;
mod status;
mod wire;

pub use executor::{CannedExecutor, NeverEndingExecutor, TaskExecutor, TaskOutcome, TaskRun};
pub use handle::{FakeCloudRun, FakeCloudRunBuilder};
pub use process::ProcessExecutor;
pub use requests::RecordedRequest;
