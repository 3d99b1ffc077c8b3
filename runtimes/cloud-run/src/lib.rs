//! The Cloud Run runner: custom-runtime jobs (`fetch`, `apply`, `getInfo`,
//! protection checks) run as executions of Cloud Run jobs.
//!
//! - **A Cloud Run job per image and settings** (`template.rs`): the image,
//!   the program, the service account, CPU, memory and the secret
//!   variables make a Cloud Run job named after their hash, created (or
//!   put back, when edited by hand) the first time it is needed.
//! - **A run per Vergence job** (`executions.rs`): the program's arguments
//!   and every plain variable are the run's overrides, with one task and
//!   the job's timeout. Dispatch returns the execution's name at once and
//!   never waits for it; a redelivered dispatch finds the execution by the
//!   job id in its environment and adopts it.
//! - **Results by polling** (`outcome.rs`, `logs.rs`): later steps read the
//!   execution; the task's last attempt gives the exit code, the platform's
//!   condition the reason when there is none. Output comes from what
//!   `vergence-wrapper` uploaded when the image runs it, else from Cloud
//!   Logging.
//!
//! The launch itself (environment, artifact URLs) and the reading of the
//! result are `vergence-container`'s, shared with the other container
//! runners.

mod clients;
mod credentials;
mod error;
mod executions;
mod jobs;
mod logs;
mod outcome;
mod runner;
mod services;
mod template;

use std::time::Duration;

use jiff::SignedDuration;

pub use clients::CloudRunClients;
pub use error::CloudRunError;
pub use runner::CloudRunRunner;
pub use services::CloudRunServices;

/// How the runner behaves; [`CloudRunSettings::default`] suits production.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudRunSettings {
    /// How long the artifact URLs handed to a job stay valid after its
    /// timeout has run out (they are made valid for the timeout plus this).
    pub url_ttl: SignedDuration,
    /// How long after an execution ends its output may still be on its way
    /// to Cloud Logging: until then the job is reported as running (never
    /// past its deadline). Not waited for when the wrapper uploaded the
    /// streams.
    pub log_grace: Duration,
    /// Most pages of log entries (1,000 each) read per stream.
    pub max_log_pages: usize,
    /// How many times dispatch looks at a Cloud Run job it has just created
    /// or updated before leaving it to settle and starting the run from a
    /// later poll.
    pub settle_polls: u32,
    /// Time between those looks.
    pub settle_interval: Duration,
    /// Most pages of executions (50 each, newest first) searched for one a
    /// job already started.
    pub adopt_pages: usize,
}

impl Default for CloudRunSettings {
    fn default() -> Self {
        Self {
            url_ttl: SignedDuration::from_hours(1),
            log_grace: Duration::from_secs(10),
            max_log_pages: 20,
            settle_polls: 10,
            settle_interval: Duration::from_millis(500),
            adopt_pages: 4,
        }
    }
}
