//! Jobs within a step: a job is claimed before it is handed to its runner,
//! asked after when no report came, stopped when superseded or past its
//! deadline, and its result recorded once, whoever reports first; and
//! [`JobCompletion`], through which runners report results.

use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;
use tracing::{debug, instrument, warn};

use super::{Engine, Progress};
use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    Clock, JobProgress, JobResultSink, Runner, Started, StateStore, WorkItem, WorkQueue,
};
use vergence_model::{InstanceRecord, JobOutcome, JobRecord, JobResult, JobState};

impl Engine {
    /// The in-flight job if it has a result. When no report came, its runner
    /// is asked (a lost report only delays a result); a job still running
    /// past its deadline is stopped on its platform and recorded as timed
    /// out. Results are recorded once, whoever reports first.
    pub(super) async fn finished_job(
        &self,
        job: JobRecord,
        stop: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<JobRecord>> {
        if job.result().is_some() {
            return Ok(Some(job));
        }
        if let Some(reason) = stop {
            return self.stop_job(&job, reason, now).await.map(Some);
        }
        if !matches!(job.state, JobState::Dispatched { .. }) {
            return Ok(None);
        }
        let result = match self.runners.poll(&job).await {
            Ok(JobProgress::Finished(result)) => result,
            Ok(JobProgress::Running) if now >= job.deadline => {
                if let Err(e) = self.runners.stop(&job, "it ran past its deadline").await {
                    warn!(job = %job.id, error = %e, "stopping a job past its deadline failed");
                }
                JobResult::without_output(JobOutcome::TimedOut, now)
            }
            Ok(JobProgress::Running | JobProgress::Unknown) => return Ok(None),
            Err(e) => {
                warn!(job = %job.id, error = %e, at = %now, "asking the runner failed; will ask again");
                return Ok(None);
            }
        };
        self.record_result(&job, result).await
    }

    /// Records a job's result, and returns the job as it ended: with this
    /// result, or with one recorded first by someone else (read back then).
    async fn record_result(&self, job: &JobRecord, result: JobResult) -> Result<Option<JobRecord>> {
        if self.store.finish_job(&job.id, &result).await? {
            return Ok(Some(ended_with(job, result)));
        }
        self.store.get_job(&job.id).await
    }

    /// Stops a superseded job and records it as stopped, so nothing it
    /// reports later is taken for a result. A job never handed to a runner
    /// only needs the record. A failed stop is retried by the next step.
    async fn stop_job(&self, job: &JobRecord, reason: &str, now: Timestamp) -> Result<JobRecord> {
        if matches!(job.state, JobState::Dispatched { .. }) {
            self.runners.stop(job, reason).await?;
        }
        let stopped = JobResult::without_output(
            JobOutcome::Stopped {
                reason: reason.to_owned(),
            },
            now,
        );
        // A result that won the race is kept; either way it has ended.
        Ok(self
            .record_result(job, stopped)
            .await?
            .unwrap_or_else(|| job.clone()))
    }

    /// The instance's job in flight, read once per step. One recorded by a
    /// step whose worker died before dispatching it is dispatched now
    /// instead of waiting for its deadline.
    pub(super) async fn in_flight_job(&self, record: &InstanceRecord) -> Result<Option<JobRecord>> {
        let Some(flight) = &record.state.in_flight else {
            return Ok(None);
        };
        let Some(job) = self.store.get_job(&flight.job_id).await? else {
            return Ok(None);
        };
        if job.state != JobState::Created {
            return Ok(Some(job));
        }
        match self.dispatch(&job).await? {
            Some(now) => Ok(Some(now)),
            // Someone else has it, or it did not start: as stored.
            None => self.store.get_job(&job.id).await,
        }
    }

    /// Claims the job and hands it to its runner. Returns the job as it
    /// now stands: running, or ended inline with its result recorded here;
    /// `None` when another worker had claimed it or it could not start.
    async fn dispatch(&self, job: &JobRecord) -> Result<Option<JobRecord>> {
        match self.hand_over(job).await? {
            None => Ok(None),
            Some(Handed::Running(running)) => Ok(Some(running)),
            Some(Handed::Ended(job, result)) => self.record_inline(&job, result).await,
        }
    }

    /// Claims the job and hands it to its runner; a result it ended with
    /// inline is left to the caller to record. `None` when another worker
    /// had claimed it or it could not start.
    async fn hand_over(&self, job: &JobRecord) -> Result<Option<Handed>> {
        let now = self.clock.now();
        if !self.store.claim_job(&job.id, now).await? {
            debug!(job = %job.id, "already dispatched elsewhere");
            return Ok(None);
        }
        self.start(job, now).await
    }

    /// Hands a job this step claimed to its runner: claimed by
    /// [`Engine::hand_over`], or committed claimed with the decision that
    /// made it (see [`claimed`]). `None` when it could not start.
    #[instrument(skip_all, fields(job = %job.id, kind = %job.kind, version = %job.version, attempt = job.attempt, runner = job.spec.runner.name()))]
    pub(super) async fn start(&self, job: &JobRecord, at: Timestamp) -> Result<Option<Handed>> {
        match self.runners.start(job).await {
            Ok(Started::Running(handle)) => {
                if let Some(handle) = &handle {
                    self.store.record_handle(&job.id, handle).await?;
                }
                let mut running = job.clone();
                running.state = JobState::Dispatched { at, handle };
                Ok(Some(Handed::Running(running)))
            }
            Ok(Started::Finished(result)) => Ok(Some(Handed::Ended(job.clone(), result))),
            Err(e) => {
                self.not_started(job, &e, at).await?;
                Ok(None)
            }
        }
    }

    /// Records the result of a job that ran inline. Nothing else reports
    /// it, and lost, the job would run again (an apply-only runtime would
    /// apply twice): it is worth more tries than one request's retries.
    pub(super) async fn record_inline(
        &self,
        job: &JobRecord,
        result: JobResult,
    ) -> Result<Option<JobRecord>> {
        let mut attempt = 1;
        loop {
            match self.record_result(job, result.clone()).await {
                Err(e) if e.is_retryable() && attempt < RECORD_ATTEMPTS => {
                    debug!(job = %job.id, attempt, error = %e, "recording an inline job's result failed; trying again");
                    attempt += 1;
                }
                Err(e) => {
                    warn!(job = %job.id, kind = %job.kind, error = %e, "cannot record an inline job's result");
                    return Err(e);
                }
                recorded => return recorded,
            }
        }
    }

    /// Records the results of inline jobs that no stored decision took up:
    /// the decision that would have lost a race, or failed to be stored.
    pub(super) async fn record_unrecorded(&self, progress: &mut Progress) -> Result<()> {
        while let Some((job, result)) = progress.unrecorded.first().cloned() {
            self.record_inline(&job, result).await?;
            progress.unrecorded.remove(0);
        }
        Ok(())
    }

    /// The job never started; its result says so and the engine treats it
    /// like any failed attempt.
    async fn not_started(&self, job: &JobRecord, e: &Error, now: Timestamp) -> Result<()> {
        warn!(job = %job.id, error = %e, "dispatch failed");
        let result = JobResult::not_started(e.to_string(), now);
        if self.store.finish_job(&job.id, &result).await? {
            self.queue
                .enqueue(&[WorkItem {
                    instance: job.instance.clone(),
                    not_before: now,
                }])
                .await?;
        }
        Ok(())
    }
}

/// Tries at recording an inline job's result on retryable errors (each is
/// one store call with its own retries).
const RECORD_ATTEMPTS: u32 = 5;

/// A job in its runner's hands.
#[derive(Debug)]
pub(super) enum Handed {
    Running(JobRecord),
    /// It ran inline; its result is not recorded yet.
    Ended(JobRecord, JobResult),
}

/// A new job as its decision commits it: claimed by the step that commits
/// it, which hands it to its runner next. A claim of its own would cost a
/// write per job; a second worker stepping the instance finds the job
/// dispatched and asks its runner instead of starting it again. A worker
/// that dies between the commit and the start leaves it to its deadline,
/// as one that dies between a claim and the start always did.
pub(super) fn claimed(job: &JobRecord, at: Timestamp) -> JobRecord {
    let mut claimed = job.clone();
    claimed.state = JobState::Dispatched { at, handle: None };
    claimed
}

/// `job` with its result recorded.
pub(super) fn ended_with(job: &JobRecord, result: JobResult) -> JobRecord {
    let mut ended = job.clone();
    ended.state = JobState::Finished { result };
    ended
}

/// Records results reported by runners and asks for the instance to be
/// stepped, so results flow back through the same path for every runner.
#[derive(Clone)]
pub struct JobCompletion {
    store: Arc<dyn StateStore>,
    queue: Arc<dyn WorkQueue>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for JobCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobCompletion").finish_non_exhaustive()
    }
}

impl JobCompletion {
    pub fn new(
        store: Arc<dyn StateStore>,
        queue: Arc<dyn WorkQueue>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            queue,
            clock,
        }
    }
}

#[async_trait]
impl JobResultSink for JobCompletion {
    async fn job_finished(&self, job: &JobRecord, result: JobResult) -> Result<()> {
        let step_now = [WorkItem {
            instance: job.instance.clone(),
            not_before: self.clock.now(),
        }];
        match self.store.finish_job(&job.id, &result).await {
            Ok(true) => self.queue.enqueue(&step_now).await,
            Ok(false) => Ok(()),
            Err(e) => {
                // Stepped anyway: the step asks the runner, which keeps
                // the result, and records it or fails saying why, instead
                // of the instance waiting for the job's deadline.
                if let Err(queue) = self.queue.enqueue(&step_now).await {
                    warn!(job = %job.id, error = %queue, "cannot ask for a step after failing to record a result");
                }
                Err(e)
            }
        }
    }
}
