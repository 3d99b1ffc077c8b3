//! `Engine::step`: one idempotent convergence attempt for one instance.
//!
//! Load, decide, persist (conditional on the revision read, with the new
//! jobs and events in the same write), then dispatch. A job is recorded
//! before it is dispatched and claimed before it is handed to a runner, so a
//! redelivered message or a second worker never starts it twice. A job its
//! runner ran inline is decided on again in the same step, from what the
//! step stored, so a local job costs one step instead of two; its result is
//! recorded with that decision, in the same write.

use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;
use tracing::{debug, instrument, warn};

use super::{Decision, Facts, RunnerRouter, Settled, UpstreamView, decide, settled};
use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    ArtifactStore, Availability, Clock, InstanceChange, InstanceCommit, JobProgress, JobResultSink,
    MAX_CONFLICT_RETRIES, Runner, Started, StateStore, WorkItem, WorkQueue,
};
use vergence_model::terraform::{self, PlanContent};
use vergence_model::{
    Event, InstanceKey, InstanceRecord, JobId, JobOutcome, JobRecord, JobResult, JobState,
    Precondition, ProtectionCheck, ReleaseChannelName, Status,
};

/// What one step did.
#[derive(Clone, Debug, Default)]
pub struct StepReport {
    /// The instance's status after the step (`None`: it no longer exists).
    pub status: Option<Status>,
    pub events: Vec<Event>,
    pub dispatched: Vec<JobId>,
    pub next_check_at: Option<Timestamp>,
    /// Whether the instance can get further by itself (see [`settled`]).
    pub settled: Option<Settled>,
}

/// Runs convergence steps against the injected ports.
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn StateStore>,
    queue: Arc<dyn WorkQueue>,
    runners: Arc<RunnerRouter>,
    clock: Arc<dyn Clock>,
    /// Where jobs' files are kept: a Terraform fetch's plan is read from
    /// it. Without one, such plans cannot be judged.
    artifacts: Option<Arc<dyn ArtifactStore>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Engine {
    pub fn new(
        store: Arc<dyn StateStore>,
        queue: Arc<dyn WorkQueue>,
        runners: RunnerRouter,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            queue,
            runners: Arc::new(runners),
            clock,
            artifacts: None,
        }
    }

    /// Reads the files jobs keep from `artifacts` (a Terraform plan's JSON).
    pub fn with_artifacts(mut self, artifacts: Arc<dyn ArtifactStore>) -> Self {
        self.artifacts = Some(artifacts);
        self
    }

    /// One convergence step for `key`. A decision that asks for a
    /// superseded job to be stopped is followed at once by the stop and a
    /// second decision, so the next version's job starts in the same step.
    /// A job that ran inline (its runner ran it within the step) is decided
    /// on at once too, from the instance as this step stored it: no read
    /// back, no round trip through the queue, no deadline check for a job
    /// that already ended.
    #[instrument(skip(self), fields(application = %key.application, service = %key.service, release_channel = %key.release_channel))]
    pub async fn step(&self, key: &InstanceKey) -> Result<StepReport> {
        let mut progress = Progress::default();
        let stepped = self.converge(key, &mut progress).await;
        if stepped.is_err() && !progress.unrecorded.is_empty() {
            // Lost, an inline result would make its job run again (an
            // apply-only runtime would apply twice).
            if let Err(e) = self.record_unrecorded(&mut progress).await {
                warn!(error = %e, "inline results of a failed step are not recorded");
            }
        }
        stepped
    }

    /// The decisions of one step, as [`Engine::step`] describes them.
    async fn converge(&self, key: &InstanceKey, progress: &mut Progress) -> Result<StepReport> {
        let mut conflicts = 0;
        let mut stopped = false;
        // The instance as this step stored it, with its job in flight as it
        // ended inline.
        let mut known: Option<(InstanceRecord, JobRecord)> = None;
        loop {
            let (record, job) = match known.take() {
                Some((record, job)) => (record, Some(job)),
                None => {
                    let Some(record) = self.store.get_instance(key).await? else {
                        self.schedule(key, None, &progress.wake).await?;
                        let progress = std::mem::take(progress);
                        return Ok(StepReport {
                            events: progress.events,
                            dispatched: progress.dispatched,
                            ..StepReport::default()
                        });
                    };
                    let job = self.in_flight_job(&record).await?;
                    (record, job)
                }
            };
            let now = self.clock.now();
            let facts = self.facts(&record, job, now).await?;
            let decision = decide(&record, &facts);
            if decision.is_noop(&record) {
                // After a result taken up inline, the last decision stored
                // was never scheduled.
                self.record_unrecorded(progress).await?;
                let next = record.next_check_at.filter(|_| progress.absorbed > 0);
                self.schedule(key, next, &progress.wake).await?;
                return Ok(std::mem::take(progress).report(
                    record.state.status,
                    &record,
                    record.next_check_at,
                ));
            }
            match self
                .persist(&record, &decision, &progress.unrecorded, now)
                .await
            {
                Ok((recorded, stored)) => {
                    progress.unrecorded.clear();
                    progress.events.extend(recorded);
                    if !stopped && stopping(&decision) {
                        stopped = true;
                        continue;
                    }
                    match self.act(key, &decision, stored, now, progress).await {
                        Ok(Then::DecideOn(record, job)) => known = Some((*record, *job)),
                        Ok(Then::Done(report)) => return Ok(*report),
                        Err(e) => return Err(self.failed_after(key, progress, e).await),
                    }
                }
                Err(Error::Conflict { what }) => {
                    // The fresh state decided on next lacks the results the
                    // lost decision would have recorded.
                    if let Err(e) = self.record_unrecorded(progress).await {
                        return Err(self.failed_after(key, progress, e).await);
                    }
                    conflicts += 1;
                    if conflicts >= MAX_CONFLICT_RETRIES {
                        let e = Error::Conflict {
                            what: format!(
                                "instance {key} (still changing after {MAX_CONFLICT_RETRIES} attempts)"
                            ),
                        };
                        return Err(self.failed_after(key, progress, e).await);
                    }
                    debug!(%what, "lost a race; deciding again from fresh state");
                }
                Err(e) => return Err(self.failed_after(key, progress, e).await),
            }
        }
    }

    /// Starts a stored decision's jobs. The job in flight, when it ended
    /// inline, is decided on next, its result recorded with that decision;
    /// otherwise the step ends here, asking for what comes next.
    async fn act(
        &self,
        key: &InstanceKey,
        decision: &Decision,
        stored: InstanceRecord,
        now: Timestamp,
        progress: &mut Progress,
    ) -> Result<Then> {
        progress.wake.extend(decision.wake.iter().cloned());
        let in_flight = stored.state.in_flight.as_ref().map(|f| &f.job_id);
        let mut ended = None;
        let mut left_ended = false;
        for job in &decision.jobs {
            progress.dispatched.push(job.id.clone());
            match self.hand_over(job).await? {
                None | Some(Handed::Running(_)) => {}
                Some(Handed::Ended(job, result))
                    if Some(&job.id) == in_flight && progress.absorbed < MAX_INLINE_RESULTS =>
                {
                    ended = Some(ended_with(&job, result.clone()));
                    progress.unrecorded.push((job, result));
                }
                Some(Handed::Ended(job, result)) => {
                    self.record_inline(&job, result).await?;
                    left_ended = true;
                }
            }
        }
        if let Some(job) = ended {
            progress.absorbed += 1;
            return Ok(Then::DecideOn(Box::new(stored), Box::new(job)));
        }
        // A result left for a later step makes that step due now.
        let next = if left_ended {
            Some(now)
        } else {
            decision.next_check_at
        };
        self.schedule(key, next, &progress.wake).await?;
        debug!(status = %decision.state.status, revision = stored.revision, "stepped");
        Ok(Then::Done(Box::new(std::mem::take(progress).report(
            decision.state.status,
            &stored,
            decision.next_check_at,
        ))))
    }

    /// A step that fails after storing decisions still wakes the channels
    /// those decisions moved, as far as it can: the retried step sees them
    /// moved already and wakes nobody.
    async fn failed_after(&self, key: &InstanceKey, progress: &Progress, error: Error) -> Error {
        if let Err(e) = self.schedule(key, None, &progress.wake).await {
            warn!(error = %e, "could not wake the channels of a failed step");
        }
        error
    }

    /// Stores the decision, with the `finished` results of inline jobs it
    /// took up.
    async fn persist(
        &self,
        record: &InstanceRecord,
        decision: &Decision,
        finished: &[(JobRecord, JobResult)],
        now: Timestamp,
    ) -> Result<(Vec<Event>, InstanceRecord)> {
        let mut next = record.clone();
        next.state = decision.state.clone();
        next.next_check_at = decision.next_check_at;
        next.updated_at = now;
        let mut events = decision.events.clone();
        let scope = format!("{}@{}", record.key.storage_id(), record.revision + 1);
        Event::assign_ids(&mut events, &scope);
        next.revision = self
            .store
            .commit(InstanceCommit {
                change: InstanceChange::Put(Box::new(next.clone())),
                expected_revision: Some(record.revision),
                new_jobs: decision.jobs.clone(),
                finished_jobs: finished
                    .iter()
                    .map(|(job, result)| (job.id.clone(), result.clone()))
                    .collect(),
                events: events.clone(),
            })
            .await?;
        Ok((events, next))
    }

    /// The facts of a decision about `record`, whose job in flight is `job`.
    async fn facts(
        &self,
        record: &InstanceRecord,
        job: Option<JobRecord>,
        now: Timestamp,
    ) -> Result<Facts> {
        let mut facts = load_facts(self.store.as_ref(), record, now).await?;
        if let (Some(flight), Some(job)) = (&record.state.in_flight, job) {
            facts.finished_job = self.finished_job(job, flight.stop.as_deref(), now).await?;
            if let Some(job) = &facts.finished_job {
                facts.plan = self.terraform_plan(job).await;
            }
        }
        if let Some(spec) = record.desired.compiled() {
            for runner in spec.runners() {
                if let Availability::Unavailable(reason) = self.runners.availability(&runner).await
                {
                    facts.unavailable_runners.push((runner, reason));
                }
            }
        }
        Ok(facts)
    }

    /// The changes of the plan a finished Terraform fetch made, read from
    /// the `plan.json` it kept (the plan file itself is binary); `None` for
    /// any other job.
    async fn terraform_plan(
        &self,
        job: &JobRecord,
    ) -> Option<std::result::Result<PlanContent, String>> {
        let result = job.result().filter(|r| r.exited_with(2))?;
        let json = result
            .outputs
            .iter()
            .find(|a| a.name == terraform::PLAN_JSON)?;
        let artifacts = self.artifacts.as_ref()?;
        Some(match artifacts.get(&json.key).await {
            Ok(Some(content)) => terraform::plan_content(&content),
            Ok(None) => Err(format!("its {} is gone from the artifact store", json.name)),
            Err(e) => Err(format!("its {} could not be read: {e}", json.name)),
        })
    }

    /// The in-flight job if it has a result. When no report came, its runner
    /// is asked (a lost report only delays a result); a job still running
    /// past its deadline is stopped on its platform and recorded as timed
    /// out. Results are recorded once, whoever reports first.
    async fn finished_job(
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
    async fn in_flight_job(&self, record: &InstanceRecord) -> Result<Option<JobRecord>> {
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
    #[instrument(skip_all, fields(job = %job.id, kind = %job.kind, version = %job.version, attempt = job.attempt, runner = job.spec.runner.name()))]
    async fn hand_over(&self, job: &JobRecord) -> Result<Option<Handed>> {
        let now = self.clock.now();
        if !self.store.claim_job(&job.id, now).await? {
            debug!(job = %job.id, "already dispatched elsewhere");
            return Ok(None);
        }
        match self.runners.start(job).await {
            Ok(Started::Running(handle)) => {
                if let Some(handle) = &handle {
                    self.store.record_handle(&job.id, handle).await?;
                }
                let mut running = job.clone();
                running.state = JobState::Dispatched { at: now, handle };
                Ok(Some(Handed::Running(running)))
            }
            Ok(Started::Finished(result)) => Ok(Some(Handed::Ended(job.clone(), result))),
            Err(e) => {
                self.not_started(job, &e, now).await?;
                Ok(None)
            }
        }
    }

    /// Records the result of a job that ran inline. Nothing else reports
    /// it, and lost, the job would run again (an apply-only runtime would
    /// apply twice): it is worth more tries than one request's retries.
    async fn record_inline(&self, job: &JobRecord, result: JobResult) -> Result<Option<JobRecord>> {
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
    async fn record_unrecorded(&self, progress: &mut Progress) -> Result<()> {
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

    /// Asks for the instance to be stepped at `next` (its next check) and
    /// the channels in `wake` now, in one request.
    async fn schedule(
        &self,
        key: &InstanceKey,
        next: Option<Timestamp>,
        wake: &[ReleaseChannelName],
    ) -> Result<()> {
        let now = self.clock.now();
        let mut items = Vec::new();
        if let Some(at) = next {
            items.push(WorkItem {
                instance: key.clone(),
                not_before: at,
            });
        }
        for channel in wake {
            items.push(WorkItem {
                instance: key.in_channel(channel),
                not_before: now,
            });
        }
        if items.is_empty() {
            return Ok(());
        }
        self.queue.enqueue(&items).await
    }
}

/// Results of inline jobs one step decides on before it leaves the next to
/// the queue: each costs a decision and a write, and a step has to end
/// well within its invocation.
const MAX_INLINE_RESULTS: usize = 8;

/// Tries at recording an inline job's result on retryable errors (each is
/// one store call with its own retries).
const RECORD_ATTEMPTS: u32 = 5;

/// What one step did so far, over the decisions it stored.
#[derive(Debug, Default)]
struct Progress {
    events: Vec<Event>,
    dispatched: Vec<JobId>,
    /// Channels the stored decisions moved, to look at now.
    wake: Vec<ReleaseChannelName>,
    /// Inline results decided on.
    absorbed: usize,
    /// Inline results decided on that no stored decision recorded yet.
    unrecorded: Vec<(JobRecord, JobResult)>,
}

impl Progress {
    fn report(
        self,
        status: Status,
        stored: &InstanceRecord,
        next_check_at: Option<Timestamp>,
    ) -> StepReport {
        StepReport {
            status: Some(status),
            events: self.events,
            dispatched: self.dispatched,
            next_check_at,
            settled: Some(settled(stored)),
        }
    }
}

/// A job in its runner's hands.
#[derive(Debug)]
enum Handed {
    Running(JobRecord),
    /// It ran inline; its result is not recorded yet.
    Ended(JobRecord, JobResult),
}

/// Where a step goes after starting a stored decision's jobs.
#[derive(Debug)]
enum Then {
    /// Decide again on the instance as stored, its job in flight ended.
    DecideOn(Box<InstanceRecord>, Box<JobRecord>),
    Done(Box<StepReport>),
}

/// `job` with its result recorded.
fn ended_with(job: &JobRecord, result: JobResult) -> JobRecord {
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

/// Whether a decision asks for its job in flight to be stopped.
fn stopping(decision: &Decision) -> bool {
    decision
        .state
        .in_flight
        .as_ref()
        .is_some_and(|f| f.stop.is_some())
}

/// Asks for every instance whose `next_check_at` has come (up to `limit`,
/// earliest first) to be stepped now; returns how many were enqueued. The
/// scheduler function and the embedded driver both find due work this way.
pub async fn enqueue_due(
    store: &dyn StateStore,
    queue: &dyn WorkQueue,
    now: Timestamp,
    limit: usize,
) -> Result<usize> {
    let items: Vec<WorkItem> = store
        .due_instances(now, limit)
        .await?
        .into_iter()
        .map(|instance| WorkItem {
            instance,
            not_before: now,
        })
        .collect();
    if !items.is_empty() {
        queue.enqueue(&items).await?;
    }
    Ok(items.len())
}

/// The facts a decision about `record` depends on, from the store: the
/// upstream channels, approvals and alerts it refers to (not its finished job).
pub async fn load_facts(
    store: &dyn StateStore,
    record: &InstanceRecord,
    now: Timestamp,
) -> Result<Facts> {
    let mut facts = Facts::at(now);
    let Some(spec) = record.desired.compiled() else {
        return Ok(facts);
    };
    for channel in Precondition::upstream_channels(&spec.preconditions) {
        if let Some(upstream) = store.get_instance(&record.key.in_channel(channel)).await? {
            facts
                .upstream
                .insert(channel.clone(), UpstreamView::of(&upstream));
        }
    }
    let needs_approvals = spec.require_approval_before_apply
        || spec
            .preconditions
            .iter()
            .any(|p| matches!(p, Precondition::ManualApproval { .. }));
    if needs_approvals {
        facts.approvals = store.list_approvals(&record.key).await?;
    }
    for protection in &spec.protections {
        if let ProtectionCheck::Alert { alert } = &protection.check
            && !facts.alerts.contains_key(alert)
            && let Some(state) = store.get_alert(alert).await?
        {
            facts.alerts.insert(alert.clone(), state);
        }
    }
    Ok(facts)
}
