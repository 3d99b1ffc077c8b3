//! The local runner: runs Vergence jobs (`fetch`, `apply`, `getInfo`) as
//! processes on this machine — or, when their program names an image, in
//! containers through docker or podman — either in background tasks (the
//! CLI's own engine) or inline (inside a Lambda worker), and reports their
//! results to a [`JobResultSink`]. It knows which jobs it has in hand, so
//! it can say they are running and stop them.

mod artifacts;
mod capture;
mod container;
mod engine;
mod group;
mod owner;
mod prepare;
mod process;
mod procfs;
mod running;

use std::ffi::OsString;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use tokio::sync::Semaphore;
use vergence_model::ports::{ArtifactStore, JobProgress, JobResultSink, Runner, Started};
use vergence_model::{Error, Result};
use vergence_model::{JobHandle, JobOutcome, JobRecord, JobResult, RunnerSpec};

pub use engine::{ContainerEngine, UnknownContainerEngine};
pub use process::run_job;

use engine::EngineLookup;
use owner::{Liveness, Owner};
use running::{Registration, RunningJobs};

/// How long [`Runner::stop`] waits for a job to end: SIGTERM's grace, then
/// SIGKILL's, and the reading of what it wrote.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// A [`Runner`] for jobs whose spec says [`RunnerSpec::Local`].
pub struct LocalRunner {
    sink: Arc<dyn JobResultSink>,
    artifacts: Arc<dyn ArtifactStore>,
    mode: Mode,
    engines: Arc<EngineLookup>,
    running: Arc<RunningJobs>,
    /// This process, named in the handles of the jobs it runs.
    me: Owner,
    /// Results the sink could not record (a full disk, a store gone away),
    /// kept to be handed over when the engine asks for the job: what ran
    /// is never forgotten while this process lives.
    unrecorded: Arc<Unrecorded>,
}

type Unrecorded = std::sync::Mutex<std::collections::HashMap<vergence_model::JobId, JobResult>>;

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
            sink,
            artifacts,
            mode,
            engines: Arc::default(),
            running: Arc::default(),
            me: Owner::this_process(),
            unrecorded: Arc::default(),
        }
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
                    deliver(self.sink.as_ref(), &self.unrecorded, job, result).await;
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
        let sink = Arc::clone(&self.sink);
        let artifacts = Arc::clone(&self.artifacts);
        let engines = Arc::clone(&self.engines);
        let unrecorded = Arc::clone(&self.unrecorded);
        let job = job.clone();
        tracing::debug!(job = %job.id, kind = %job.kind, "local job queued");
        tokio::spawn(async move {
            let result = match wait_turn(semaphore, &mut registration).await {
                Ok(_permit) => {
                    let stop = &mut registration.stop;
                    process::execute(&job, artifacts.as_ref(), &engines, stop).await
                }
                Err(stopped) => stopped,
            };
            deliver(sink.as_ref(), &unrecorded, &job, result).await;
            // Only now: until the result is recorded, the job runs.
            drop(registration);
        });
        // Names this process, so that another one sharing the state knows
        // where the job runs and when it never will report.
        Ok(Some(self.me.handle()))
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
        if let Some(result) = lock(&self.unrecorded).get(&job.id) {
            return Ok(JobProgress::Finished(result.clone()));
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
    semaphore: Arc<Semaphore>,
    registration: &mut Registration,
) -> std::result::Result<Option<tokio::sync::OwnedSemaphorePermit>, JobResult> {
    tokio::select! {
        // Closed only by `close`: the process is shutting down and starts
        // nothing new.
        permit = semaphore.acquire_owned() => permit.map(Some).map_err(|_closed| {
            let reason = registration.closed_reason();
            JobResult::without_output(JobOutcome::Stopped { reason }, Timestamp::now())
        }),
        reason = registration.stop.requested() => Err(JobResult::without_output(
            JobOutcome::Stopped { reason },
            Timestamp::now(),
        )),
    }
}

/// Hands a result to the sink. A failure is logged and the result kept
/// for [`Runner::poll`]: the job has run, and the engine records the
/// result itself when it next asks (or fails saying why).
async fn deliver(
    sink: &dyn JobResultSink,
    unrecorded: &Unrecorded,
    job: &JobRecord,
    result: JobResult,
) {
    // The job ran: its result is worth more tries than one request's own
    // retries. Lost, an apply-only runtime would apply again.
    let mut wait = RECORD_RETRY_FIRST_WAIT;
    for attempt in 1..=RECORD_ATTEMPTS {
        match sink.job_finished(job, result.clone()).await {
            Ok(()) => return,
            Err(e) if e.is_retryable() && attempt < RECORD_ATTEMPTS => {
                tracing::debug!(job = %job.id, attempt, error = %e, "recording a local job's result failed; trying again");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) => {
                tracing::warn!(job = %job.id, kind = %job.kind, error = %e, "cannot record a local job's result; kept until the engine asks for it");
                lock(unrecorded).insert(job.id.clone(), result);
                return;
            }
        }
    }
}

/// Tries at recording a result on retryable errors, waiting 100 ms, then
/// twice as long each time (1.5 s in all).
const RECORD_ATTEMPTS: u32 = 5;
const RECORD_RETRY_FIRST_WAIT: Duration = Duration::from_millis(100);

fn lock(
    unrecorded: &Unrecorded,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<vergence_model::JobId, JobResult>> {
    // A panic while holding the lock leaves a map that is still whole.
    unrecorded
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
