//! `Engine::step`: one idempotent convergence attempt for one instance.
//!
//! Load, decide, persist (conditional on the revision read, with the new
//! jobs and events in the same write), then dispatch. A job is recorded
//! before it is dispatched and claimed before it is handed to a runner, so a
//! redelivered message or a second worker never starts it twice.

use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;
use tracing::{debug, instrument, warn};

use super::{Decision, Facts, RunnerRouter, Settled, UpstreamView, decide, settled};
use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    ArtifactStore, Availability, Clock, InstanceChange, InstanceCommit, JobProgress, JobResultSink,
    MAX_CONFLICT_RETRIES, Runner, StateStore, WorkItem, WorkQueue,
};
use vergence_model::terraform::{self, PlanContent};
use vergence_model::{
    Event, InstanceKey, InstanceRecord, JobId, JobOutcome, JobRecord, JobResult, JobState,
    Precondition, ProtectionCheck, Status,
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
    #[instrument(skip(self), fields(application = %key.application, service = %key.service, release_channel = %key.release_channel))]
    pub async fn step(&self, key: &InstanceKey) -> Result<StepReport> {
        let mut events = Vec::new();
        let mut conflicts = 0;
        let mut stopped = false;
        loop {
            let Some(record) = self.store.get_instance(key).await? else {
                return Ok(StepReport::default());
            };
            self.redispatch_unclaimed(&record).await?;
            let now = self.clock.now();
            let facts = self.facts(&record, now).await?;
            let decision = decide(&record, &facts);
            if decision.is_noop(&record) {
                return Ok(StepReport {
                    status: Some(record.state.status),
                    events,
                    next_check_at: record.next_check_at,
                    settled: Some(settled(&record)),
                    ..StepReport::default()
                });
            }
            match self.persist(&record, &decision, now).await {
                Ok((recorded, stored)) => {
                    events.extend(recorded);
                    if !stopped && stopping(&decision) {
                        stopped = true;
                        continue;
                    }
                    return self.act(key, &decision, stored, events, now).await;
                }
                Err(Error::Conflict { what }) => {
                    conflicts += 1;
                    if conflicts >= MAX_CONFLICT_RETRIES {
                        return Err(Error::Conflict {
                            what: format!(
                                "instance {key} (still changing after {MAX_CONFLICT_RETRIES} attempts)"
                            ),
                        });
                    }
                    debug!(%what, "lost a race; deciding again from fresh state");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// After a decision is stored: start its jobs and schedule what comes next.
    async fn act(
        &self,
        key: &InstanceKey,
        decision: &Decision,
        stored: InstanceRecord,
        events: Vec<Event>,
        now: Timestamp,
    ) -> Result<StepReport> {
        for job in &decision.jobs {
            self.dispatch(job).await?;
        }
        self.schedule(key, decision, now).await?;
        debug!(status = %decision.state.status, revision = stored.revision, "stepped");
        Ok(StepReport {
            status: Some(decision.state.status),
            events,
            dispatched: decision.jobs.iter().map(|j| j.id.clone()).collect(),
            next_check_at: decision.next_check_at,
            settled: Some(settled(&stored)),
        })
    }

    async fn persist(
        &self,
        record: &InstanceRecord,
        decision: &Decision,
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
                events: events.clone(),
            })
            .await?;
        Ok((events, next))
    }

    async fn facts(&self, record: &InstanceRecord, now: Timestamp) -> Result<Facts> {
        let mut facts = load_facts(self.store.as_ref(), record, now).await?;
        if let Some(flight) = &record.state.in_flight {
            facts.finished_job = self
                .finished_job(&flight.job_id, flight.stop.as_deref(), now)
                .await?;
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
        id: &JobId,
        stop: Option<&str>,
        now: Timestamp,
    ) -> Result<Option<JobRecord>> {
        let Some(job) = self.store.get_job(id).await? else {
            return Ok(None);
        };
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
                    warn!(job = %id, error = %e, "stopping a job past its deadline failed");
                }
                JobResult::without_output(JobOutcome::TimedOut, now)
            }
            Ok(JobProgress::Running | JobProgress::Unknown) => return Ok(None),
            Err(e) => {
                warn!(job = %id, error = %e, at = %now, "asking the runner failed; will ask again");
                return Ok(None);
            }
        };
        self.store.finish_job(id, &result).await?;
        // Whoever recorded first wins; read what was kept.
        self.store.get_job(id).await
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
        self.store.finish_job(&job.id, &stopped).await?;
        // A result that won the race is kept; either way it has ended.
        Ok(self
            .store
            .get_job(&job.id)
            .await?
            .unwrap_or_else(|| job.clone()))
    }

    /// A job recorded by a step whose worker died before dispatching it is
    /// dispatched now instead of waiting for its deadline.
    async fn redispatch_unclaimed(&self, record: &InstanceRecord) -> Result<()> {
        let Some(flight) = &record.state.in_flight else {
            return Ok(());
        };
        if let Some(job) = self.store.get_job(&flight.job_id).await?
            && job.state == JobState::Created
        {
            self.dispatch(&job).await?;
        }
        Ok(())
    }

    #[instrument(skip_all, fields(job = %job.id, kind = %job.kind, version = %job.version, attempt = job.attempt, runner = job.spec.runner.name()))]
    async fn dispatch(&self, job: &JobRecord) -> Result<()> {
        let now = self.clock.now();
        if !self.store.claim_job(&job.id, now).await? {
            debug!(job = %job.id, "already dispatched elsewhere");
            return Ok(());
        }
        match self.runners.dispatch(job).await {
            Ok(Some(handle)) => {
                self.store.record_handle(&job.id, &handle).await?;
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => self.not_started(job, &e, now).await,
        }
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

    async fn schedule(&self, key: &InstanceKey, decision: &Decision, now: Timestamp) -> Result<()> {
        let mut items = Vec::new();
        if let Some(at) = decision.next_check_at {
            items.push(WorkItem {
                instance: key.clone(),
                not_before: at,
            });
        }
        for channel in &decision.wake {
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
