//! The local runner: runs Vergence jobs (`fetch`, `apply`, `getInfo`) as
//! processes on this machine, either in background tasks (the CLI's own
//! engine) or inline (inside a Lambda worker), and reports their results to
//! a [`JobResultSink`].

mod artifacts;
mod capture;
mod group;
mod process;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Semaphore;
use vergence_model::ports::{ArtifactStore, JobResultSink, Runner};
use vergence_model::{Error, Result};
use vergence_model::{JobHandle, JobRecord, JobResult, RunnerSpec};

pub use process::run_job;

/// A [`Runner`] for jobs whose spec says [`RunnerSpec::Local`].
pub struct LocalRunner {
    sink: Arc<dyn JobResultSink>,
    artifacts: Arc<dyn ArtifactStore>,
    mode: Mode,
}

enum Mode {
    /// Jobs run in spawned tasks, at most as many at once as the semaphore
    /// has permits.
    Background(Arc<Semaphore>),
    /// Jobs run inside `dispatch`.
    Inline,
}

impl LocalRunner {
    /// Jobs run in background tokio tasks and their results go to `sink`.
    /// At most `max_concurrent` (at least 1) processes run at once; jobs
    /// beyond that wait their turn.
    pub fn new(
        sink: Arc<dyn JobResultSink>,
        artifacts: Arc<dyn ArtifactStore>,
        max_concurrent: usize,
    ) -> Self {
        let permits = max_concurrent.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            sink,
            artifacts,
            mode: Mode::Background(Arc::new(Semaphore::new(permits))),
        }
    }

    /// Jobs run inside `dispatch`, which returns once the result was handed
    /// to `sink`. For a Lambda worker, which must not return before its work
    /// is done.
    pub fn inline(sink: Arc<dyn JobResultSink>, artifacts: Arc<dyn ArtifactStore>) -> Self {
        Self {
            sink,
            artifacts,
            mode: Mode::Inline,
        }
    }
}

impl fmt::Debug for LocalRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match &self.mode {
            Mode::Background(semaphore) => format!(
                "background ({} permits free)",
                semaphore.available_permits()
            ),
            Mode::Inline => "inline".to_owned(),
        };
        f.debug_struct("LocalRunner")
            .field("mode", &mode)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Runner for LocalRunner {
    async fn dispatch(&self, job: &JobRecord) -> Result<Option<JobHandle>> {
        if job.spec.runner != RunnerSpec::Local {
            return Err(Error::Runner {
                runner: "local".into(),
                message: format!(
                    "this deployment has no {} runner; runtime jobs for it cannot run here",
                    job.spec.runner.name()
                ),
            });
        }
        match &self.mode {
            Mode::Inline => {
                let result = run_job(job, self.artifacts.as_ref()).await;
                deliver(self.sink.as_ref(), job, result).await;
            }
            Mode::Background(semaphore) => {
                let semaphore = Arc::clone(semaphore);
                let sink = Arc::clone(&self.sink);
                let artifacts = Arc::clone(&self.artifacts);
                let job = job.clone();
                tracing::debug!(job = %job.id, kind = %job.kind, "local job queued");
                tokio::spawn(async move {
                    // The semaphore is never closed, so acquiring cannot fail;
                    // were it to, running without a permit beats losing the job.
                    let _permit = semaphore.acquire_owned().await.ok();
                    let result = run_job(&job, artifacts.as_ref()).await;
                    deliver(sink.as_ref(), &job, result).await;
                });
            }
        }
        Ok(None)
    }
}

/// Hands a result to the sink. A failure is logged, not returned: the job
/// has run, and a job that is never reported is found again as lost.
async fn deliver(sink: &dyn JobResultSink, job: &JobRecord, result: JobResult) {
    if let Err(e) = sink.job_finished(job, result).await {
        tracing::warn!(job = %job.id, kind = %job.kind, error = %e, "cannot record a local job's result");
    }
}
