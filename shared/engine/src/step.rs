//! `Engine::step`: one idempotent convergence attempt for one instance.
//!
//! Load, decide, persist (conditional on the revision read, with the new
//! jobs and events in the same write), then dispatch. A job is recorded
//! before it is dispatched, claimed by the commit that records it, so a
//! redelivered message or a second worker never starts it twice. A job its
//! runner ran inline is decided on again in the same step, from what the
//! step stored, so a local job costs one step instead of two; its result is
//! recorded with that decision, in the same write.
//!
//! [`facts`] loads what a decision depends on; [`jobs`] hands jobs to
//! runners and records their results.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use jiff::Timestamp;
use tracing::{debug, instrument, warn};

use super::{Decision, RunnerRouter, Settled, UpstreamView, decide, settled};
use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    ArtifactStore, Clock, InstanceChange, InstanceCommit, MAX_CONFLICT_RETRIES, StateStore,
    WorkItem, WorkQueue,
};
use vergence_model::{
    Event, InstanceKey, InstanceRecord, JobId, JobRecord, JobResult, Precondition,
    ReleaseChannelName, Status,
};

mod facts;
mod jobs;
mod quiet;

pub use facts::load_facts;
pub use jobs::JobCompletion;
pub use quiet::QuietChecks;

use facts::Upstream;
use jobs::{Handed, claimed, ended_with};
use quiet::Quietly;

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
    /// A steady-state check that found nothing and was kept apart from
    /// the instance (see [`QuietChecks`]).
    pub quiet: bool,
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
    /// Checks that find nothing kept cheap, where the queue can carry the
    /// next check (see [`QuietChecks`]).
    quiet: Option<QuietChecks>,
    hints: UpstreamHints,
}

/// Which upstream channels each instance's preconditions looked at when
/// this process last stepped it: a step reads them together with the
/// instance, in one request where the store can
/// ([`vergence_model::ports::InstanceStore::get_instances`]), instead of
/// reading the instance first to learn them. Only a guess at what to read:
/// when the instance's preconditions changed, the step reads what they
/// name and decides on that.
#[derive(Clone, Debug, Default)]
pub struct UpstreamHints(Arc<Mutex<HashMap<InstanceKey, Vec<ReleaseChannelName>>>>);

impl UpstreamHints {
    fn get(&self, key: &InstanceKey) -> Vec<ReleaseChannelName> {
        let hints = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        hints.get(key).cloned().unwrap_or_default()
    }

    fn set(&self, key: &InstanceKey, channels: Vec<ReleaseChannelName>) {
        let mut hints = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        hints.insert(key.clone(), channels);
    }
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
            quiet: None,
            hints: UpstreamHints::default(),
        }
    }

    /// Keeps what steps learn about which upstream channels to read with
    /// each instance in `hints`, which outlives this engine (a worker makes
    /// an engine per batch of messages, and keeps the hints for the next).
    pub fn with_upstream_hints(mut self, hints: UpstreamHints) -> Self {
        self.hints = hints;
        self
    }

    /// Keeps checks that find nothing cheap: the next check travels as a
    /// delayed message and the due index only watches (see [`QuietChecks`]).
    pub fn with_quiet_checks(mut self, quiet: QuietChecks) -> Self {
        self.quiet = Some(quiet);
        self
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
        // The upstream channels as read with the instance, or before.
        let mut upstream = None;
        loop {
            let (record, job, read) = match known.take() {
                Some((record, job)) => (record, Some(job), upstream.take()),
                None => match self.read(key, progress).await? {
                    Ok(read) => read,
                    Err(gone) => return Ok(*gone),
                },
            };
            let now = self.clock.now();
            let facts = self.facts(&record, job, now, read).await?;
            let decision = decide(&record, &facts);
            upstream = Some(facts.upstream.clone());
            if conflicts == 0 && progress.absorbed == 0 {
                match self
                    .check_quietly(key, &record, (&decision, &facts.upstream), now, progress)
                    .await
                {
                    Ok(Quietly::Not) => {}
                    Ok(Quietly::Done(report)) => return Ok(*report),
                    // Found something: decide on it, or again after a conflict.
                    Ok(Quietly::Found(next)) => {
                        conflicts += usize::from(next.is_none());
                        known = next.map(|next| *next);
                        continue;
                    }
                    Err(e) => return Err(self.failed_after(key, progress, e).await),
                }
            }
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

    /// The instance and its job in flight, read once, with the upstream
    /// channels its preconditions look at when the hint had them right;
    /// or, when it no longer exists, the step's report.
    async fn read(
        &self,
        key: &InstanceKey,
        progress: &mut Progress,
    ) -> Result<
        std::result::Result<(InstanceRecord, Option<JobRecord>, Option<Upstream>), Box<StepReport>>,
    > {
        let hinted = self.hints.get(key);
        let mut keys = vec![key.clone()];
        keys.extend(hinted.iter().map(|channel| key.in_channel(channel)));
        let mut found = self.store.get_instances(&keys).await?.into_iter();
        let Some(record) = found.next().flatten() else {
            self.schedule(key, None, &progress.wake).await?;
            let progress = std::mem::take(progress);
            return Ok(Err(Box::new(StepReport {
                events: progress.events,
                dispatched: progress.dispatched,
                ..StepReport::default()
            })));
        };
        let wanted: Vec<ReleaseChannelName> = record
            .desired
            .compiled()
            .map(|spec| {
                Precondition::upstream_channels(&spec.preconditions)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let upstream = if wanted == hinted {
            let views = hinted.into_iter().zip(found);
            Some(
                views
                    .filter_map(|(channel, upstream)| Some((channel, UpstreamView::of(&upstream?))))
                    .collect(),
            )
        } else {
            self.hints.set(key, wanted);
            None
        };
        let job = self.in_flight_job(&record).await?;
        Ok(Ok((record, job, upstream)))
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
            match self.start(job, now).await? {
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
        next.watchdog_at = self.quiet.and_then(|quiet| quiet.watchdog_for(&next, now));
        next.quiet_checks = 0;
        next.updated_at = now;
        let mut events = decision.events.clone();
        let scope = format!("{}@{}", record.key.storage_id(), record.revision + 1);
        Event::assign_ids(&mut events, &scope);
        next.revision = self
            .store
            .commit(InstanceCommit {
                change: InstanceChange::Put(Box::new(next.clone())),
                expected_revision: Some(record.revision),
                new_jobs: decision.jobs.iter().map(|j| claimed(j, now)).collect(),
                finished_jobs: finished
                    .iter()
                    .map(|(job, result)| (job.id.clone(), result.clone()))
                    .collect(),
                events: events.clone(),
            })
            .await?;
        Ok((events, next))
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
            quiet: false,
        }
    }
}

/// Where a step goes after starting a stored decision's jobs.
#[derive(Debug)]
enum Then {
    /// Decide again on the instance as stored, its job in flight ended.
    DecideOn(Box<InstanceRecord>, Box<JobRecord>),
    Done(Box<StepReport>),
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
