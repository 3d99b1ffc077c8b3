//! The local runner: runs Vergence jobs (`fetch`, `apply`, `getInfo`) as
//! processes on this machine — or, when their program names an image, in
//! containers through docker or podman — either in background tasks (the
//! CLI's own engine) or inline (inside a Lambda worker), and reports their
//! results to a [`JobResultSink`]. It knows which jobs it has in hand, so
//! it can say they are running and stop them.

mod artifacts;
mod capture;
mod container;
mod delivery;
mod engine;
mod group;
mod held;
mod owner;
mod prepare;
mod process;
mod procfs;
mod running;

use std::ffi::OsString;
use std::fmt;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use tokio::sync::{AcquireError, Semaphore};
use vergence_model::ports::{ArtifactStore, JobProgress, JobResultSink, Runner, Started};
use vergence_model::{Error, Result};
use vergence_model::{JobHandle, JobOutcome, JobRecord, JobResult, RunnerSpec};

pub use engine::{ContainerEngine, UnknownContainerEngine};
pub use held::HeldResults;
pub use process::run_job;

use delivery::Results;
use engine::EngineLookup;
use owner::{Liveness, Owner};
use running::{Registration, RunningJobs};

/// How long [`Runner::stop`] waits for a job to end: SIGTERM's grace, then
/// SIGKILL's, and the reading of what it wrote.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// A [`Runner`] for jobs whose spec says [`RunnerSpec::Local`].
pub struct LocalRunner {
    artifacts: Arc<dyn ArtifactStore>,
    mode: Mode,
    engines: Arc<EngineLookup>,
    running: Arc<RunningJobs>,
    /// This process, named in the handles of the jobs it runs.
    me: Owner,
    /// Results on their way to the sink, and those it could not record (a
    /// full disk, a store gone away), held to be handed over when the
    /// engine asks for the job, and kept in files for the next process:
    /// what ran is never forgotten.
    results: Arc<Results>,
}

enum Mode {
    /// Jobs run in spawned tasks, at most as many at once as the semaphore
    /// has permits.
    Background(Arc<Semaphore>),
    /// Jobs run inside `dispatch` (result to the sink) or `start` (result
    /// to the caller).
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
        Self::with_mode(
            sink,
            artifacts,
            Mode::Background(Arc::new(Semaphore::new(permits))),
        )
    }

    /// Jobs run inside `dispatch`, which returns once the result was handed
    /// to `sink`, or inside `start`, which returns the result. For a Lambda
    /// worker, which must not return before its work is done.
    pub fn inline(sink: Arc<dyn JobResultSink>, artifacts: Arc<dyn ArtifactStore>) -> Self {
        Self::with_mode(sink, artifacts, Mode::Inline)
    }

    fn with_mode(
        sink: Arc<dyn JobResultSink>,
        artifacts: Arc<dyn ArtifactStore>,
        mode: Mode,
    ) -> Self {
        Self {
            artifacts,
            mode,
            engines: Arc::default(),
            running: Arc::default(),
            me: Owner::this_process(),
            results: Arc::new(Results::new(sink)),
        }
    }

    /// Keeps results the sink refuses in files in `held`'s folders, where
    /// the next process on the same state finds and records them. Call
    /// before the runner is shared.
    pub fn with_held_results(mut self, held: HeldResults) -> Self {
        // Not shared yet: the runner was only just made.
        if let Some(results) = Arc::get_mut(&mut self.results) {
            results.set_files(held);
        }
        self
    }

    /// Runs jobs whose program has an image with `engine` (by default the
    /// first of docker and podman on PATH).
    pub fn with_container_engine(mut self, engine: ContainerEngine) -> Self {
        Arc::make_mut(&mut self.engines).engine = engine;
        self
    }

    /// Looks the container engine up in `path`, a list of directories as
    /// PATH writes it, instead of this process's PATH.
    pub fn with_engine_search_path(mut self, path: impl Into<OsString>) -> Self {
        Arc::make_mut(&mut self.engines).search_path = Some(path.into());
        self
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
            .field("container_engine", &self.engines.engine)
            .finish_non_exhaustive()
    }
}

/// Refuses a job another kind of runner should run.
fn check_local(job: &JobRecord) -> Result<()> {
    if job.spec.runner == RunnerSpec::Local {
        return Ok(());
    }
    Err(Error::Runner {
        runner: "local".into(),
        message: format!(
            "this deployment has no {} runner; runtime jobs for it cannot run here",
            job.spec.runner.name()
        ),
    })
}

#[async_trait]
impl Runner for LocalRunner {
    async fn dispatch(&self, job: &JobRecord) -> Result<Option<JobHandle>> {
        let Mode::Background(semaphore) = &self.mode else {
            // Run as `start` runs it; a caller that only dispatches gets
            // the result through the sink, like every other runner's.
            return match self.start(job).await? {
                Started::Finished(result) => {
                    self.results.deliver(job, result).await;
                    Ok(None)
                }
                Started::Running(handle) => Ok(handle),
            };
        };
        check_local(job)?;
        let Some(mut registration) = self.running.register(&job.id) else {
            // A redelivered dispatch: the job is already in hand.
            tracing::debug!(job = %job.id, "local job already running; adopted");
            return Ok(None);
        };
        let semaphore = Arc::clone(semaphore);
        let artifacts = Arc::clone(&self.artifacts);
        let engines = Arc::clone(&self.engines);
        let results = Arc::clone(&self.results);
        let job = job.clone();
        // Queued on the semaphore here, not in the spawned task: the
        // semaphore serves waiters first come, first served, so jobs start
        // in the order they were dispatched whatever order the tasks run in.
        let mut turn = Box::pin(semaphore.acquire_owned());
        let ready = std::future::poll_fn(|cx| Poll::Ready(turn.as_mut().poll(cx))).await;
        tracing::debug!(job = %job.id, kind = %job.kind, "local job queued");
        tokio::spawn(async move {
            let turn = async move {
                match ready {
                    Poll::Ready(permit) => permit,
                    Poll::Pending => turn.await,
                }
            };
            let result = match wait_turn(turn, &mut registration).await {
                Ok(_permit) => {
                    let stop = &mut registration.stop;
                    process::execute(&job, artifacts.as_ref(), &engines, stop).await
                }
                Err(stopped) => stopped,
            };
            let recorded = results.deliver(&job, result).await;
            // Only now: until the result is recorded or held, the job runs.
            drop(registration);
            if !recorded {
                results.keep_trying(job.id.clone()).await;
            }
        });
        // Names this process, so that another one sharing the state knows
        // where the job runs and when it never will report.
        Ok(Some(self.me.handle()))
    }

    fn runs_inline(&self, job: &JobRecord) -> bool {
        matches!(self.mode, Mode::Inline) && check_local(job).is_ok()
    }

    /// Inline, the job runs here and its result is handed back, not to the
    /// sink: the caller records it. In the background, as `dispatch`.
    async fn start(&self, job: &JobRecord) -> Result<Started> {
        if !matches!(self.mode, Mode::Inline) {
            return self.dispatch(job).await.map(Started::Running);
        }
        check_local(job)?;
        let Some(mut registration) = self.running.register(&job.id) else {
            tracing::debug!(job = %job.id, "local job already running; adopted");
            return Ok(Started::Running(None));
        };
        let result = process::execute(
            job,
            self.artifacts.as_ref(),
            &self.engines,
            &mut registration.stop,
        )
        .await;
        Ok(Started::Finished(result))
    }

    /// `Running` for a job this runner has in hand (queued or running);
    /// `Unknown` otherwise: its result was delivered, or it ran in another
    /// process.
    async fn poll(&self, job: &JobRecord) -> Result<JobProgress> {
        if let Some(result) = self.results.result_of(job, false) {
            return Ok(JobProgress::Finished(result));
        }
        if self.running.contains(&job.id) {
            return Ok(JobProgress::Running);
        }
        let Some(owner) = job.handle().and_then(Owner::parse) else {
            return Ok(JobProgress::Unknown);
        };
        if owner.liveness(&self.me) != Liveness::Gone {
            return Ok(JobProgress::Unknown);
        }
        // The process that ran it kept a result it could not record.
        if let Some(result) = self.results.result_of(job, true) {
            return Ok(JobProgress::Finished(result));
        }
        if !owner::job_processes(&job.id).is_empty() {
            // Still running with no one to report it: waited for until it
            // ends (then lost at once), or until its deadline has `stop`
            // end its processes. Running, not unknown, so the deadline
            // applies: an unknown job is only given up much later.
            return Ok(JobProgress::Running);
        }
        Ok(JobProgress::Finished(lost_with(&owner)))
    }

    /// Ends the job (SIGTERM, then SIGKILL after a grace period; `docker
    /// kill` for a container) and waits, within bounds, until its result —
    /// [`JobOutcome::Stopped`] with `reason` — was delivered. A job this
    /// runner does not have in hand is left alone.
    async fn stop(&self, job: &JobRecord, reason: &str) -> Result<()> {
        if self.running.stop(&job.id, reason, STOP_WAIT).await {
            return Ok(());
        }
        // A job whose process died without it keeps running unwatched.
        let orphaned = job
            .handle()
            .and_then(Owner::parse)
            .is_some_and(|owner| owner.liveness(&self.me) == Liveness::Gone);
        if orphaned {
            let ended = owner::end_orphans(&job.id, group::TERM_GRACE).await;
            tracing::info!(job = %job.id, processes = ended, "ended the processes of a job whose vergence process is gone");
        } else {
            tracing::debug!(job = %job.id, "asked to stop a job that is not running here");
        }
        Ok(())
    }
}

/// How a [`LocalRunner`] ends when its process is asked to stop.
impl LocalRunner {
    /// Jobs in hand, queued or running.
    pub fn in_hand(&self) -> usize {
        self.running.len()
    }

    /// The ids of the jobs in hand.
    pub fn jobs_in_hand(&self) -> Vec<vergence_model::JobId> {
        self.running.ids()
    }

    /// No queued job starts any more: each ends as stopped with `reason`.
    /// Jobs already running go on.
    pub fn close(&self, reason: &str) {
        if let Mode::Background(semaphore) = &self.mode {
            self.running.set_closed_reason(reason);
            semaphore.close();
        }
    }

    /// Resolves once every job in hand has ended and its result was handed
    /// to the sink.
    pub async fn finished(&self) {
        self.running.empty().await;
    }

    /// Stops every job in hand (SIGTERM, then SIGKILL after a grace
    /// period) and waits until their results, stopped with `reason`, were
    /// handed to the sink. Returns how many there were.
    pub async fn stop_all(&self, reason: &str) -> usize {
        self.running.stop_all(reason, STOP_WAIT).await
    }

    /// Records the results that a process on the same state could not
    /// record before it ended (see [`LocalRunner::with_held_results`]).
    /// Returns how many; fails when the store still refuses one, which
    /// stays kept.
    pub async fn recover_held(&self) -> Result<usize> {
        self.results.recover().await
    }

    /// Tries once more to record every result held, and returns a sentence
    /// for each still not recorded that says where it is kept. For a
    /// process about to end.
    pub async fn flush_held(&self) -> Vec<String> {
        self.results.flush().await
    }

    /// How many results are held, not recorded yet.
    pub fn held(&self) -> usize {
        self.results.len()
    }
}

/// The result of a job whose process ended before recording it.
fn lost_with(owner: &Owner) -> JobResult {
    let mut result = JobResult::without_output(JobOutcome::Lost, Timestamp::now());
    result.stderr_tail = format!(
        "the vergence process that ran it (pid {}) ended before recording its result: it was killed or crashed, and the job's processes are gone\n",
        owner.pid()
    );
    result
}

/// Waits for a permit to run; a job stopped while it waits never starts.
async fn wait_turn(
    turn: impl Future<Output = std::result::Result<tokio::sync::OwnedSemaphorePermit, AcquireError>>,
    registration: &mut Registration,
) -> std::result::Result<Option<tokio::sync::OwnedSemaphorePermit>, JobResult> {
    tokio::select! {
        // Closed only by `close`: the process is shutting down and starts
        // nothing new.
        permit = turn => permit.map(Some).map_err(|_closed| {
            let reason = registration.closed_reason();
            JobResult::without_output(JobOutcome::Stopped { reason }, Timestamp::now())
        }),
        reason = registration.stop.requested() => Err(JobResult::without_output(
            JobOutcome::Stopped { reason },
            Timestamp::now(),
        )),
    }
}
