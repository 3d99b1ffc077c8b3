//! [`AgentJobs`]: the Vergence side of the agent protocol. The API's agent
//! routes call it once the caller is known to be the agent it names.
//!
//! A task is built when it is handed out, from the job record as it is
//! then, so a job that ended or was stopped meanwhile is dropped from the
//! queue instead of being started late.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use tracing::{info, instrument, warn};
use vergence_container::{self as container, Ended, Launch, PlatformLogs};
use vergence_model::agent::protocol::{
    AgentReport, JobEnd, JobFinished, ManifestsJob, ObjectsChanged, PollRequest, ReportAnswer,
    RunJob, SecretKeyRef, StopJob, Task, TaskDetails,
};
use vergence_model::ports::{
    self, AgentDesk, ArtifactStore, Clock, InstanceFilter, JobResultSink, StateStore, WorkItem,
    WorkQueue,
};
use vergence_model::{
    AGENT_LEASE, AgentName, AgentState, AgentTask, AgentWork, Desired, InstanceKey, InstanceRecord,
    JobRecord, JobResult, RunnerSpec, SecretRef, Status,
};

use crate::error::KubernetesError;
use crate::{agent_of, job_labels, job_name};

/// How long the URLs in a task stay valid beyond the job's own timeout: a
/// task may wait in the queue, and the pod for its image.
const URL_SLACK: SignedDuration = SignedDuration::from_mins(30);

/// An agent's record is written again by a poll once its `last_seen` is
/// this old, or when what the agent says of itself changed. An idle agent
/// polls every couple of seconds; writing its record each time would be
/// most of what an idle agent costs on DynamoDB (docs/cost.md). Well
/// within `AGENT_STALE_AFTER`, after which an agent counts as gone.
const SEEN_WRITTEN_EVERY: SignedDuration = SignedDuration::from_secs(30);

/// Hands agents their work and records what they report.
pub struct AgentJobs {
    store: Arc<dyn StateStore>,
    artifacts: Arc<dyn ArtifactStore>,
    results: Arc<dyn JobResultSink>,
    queue: Arc<dyn WorkQueue>,
    clock: Arc<dyn Clock>,
    /// The record of each agent as this desk last read or wrote it. A
    /// poll that finds it fresh here neither reads nor writes the store:
    /// an api container serves an agent's polls one after another, and
    /// reading the record every 2 s was a third of an idle agent's reads
    /// (docs/cost.md). Another container reads it once, then keeps it.
    seen: Mutex<BTreeMap<AgentName, AgentState>>,
}

impl fmt::Debug for AgentJobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentJobs").finish_non_exhaustive()
    }
}

impl AgentJobs {
    /// `results` records a job's result once and wakes its instance;
    /// `queue` wakes the instances that waited for an agent that is back.
    pub fn new(
        store: Arc<dyn StateStore>,
        artifacts: Arc<dyn ArtifactStore>,
        results: Arc<dyn JobResultSink>,
        queue: Arc<dyn WorkQueue>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            artifacts,
            results,
            queue,
            clock,
            seen: Mutex::default(),
        }
    }

    /// Whether `agent` was alive before this poll, if this desk's copy of
    /// its record is recent enough that the poll need not write it again:
    /// then nothing is read or written. `None`: ask [`Self::record`].
    fn fresh(&self, agent: &AgentName, poll: &PollRequest, now: Timestamp) -> Option<bool> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.get(agent)
            .filter(|state| seen_lately(state, poll, now))
            .map(|state| state.is_alive(now))
    }

    /// Reads `agent`'s record, writes it again unless it was written
    /// lately with what the poll says, and remembers it; whether the agent
    /// was alive before this poll.
    async fn record(
        &self,
        agent: &AgentName,
        poll: &PollRequest,
        now: Timestamp,
    ) -> vergence_model::Result<bool> {
        let known = self.store.get_agent(agent).await?;
        let was_alive = known.as_ref().is_some_and(|state| state.is_alive(now));
        match known {
            Some(state) if seen_lately(&state, poll, now) => self.remember(state),
            _ => {
                let state = AgentState {
                    name: agent.clone(),
                    last_seen: now,
                    version: poll.version.clone(),
                    namespace: poll.namespace.clone(),
                    cluster: poll.cluster.clone(),
                };
                self.store.touch_agent(&state).await?;
                self.remember(state);
            }
        }
        Ok(was_alive)
    }

    fn remember(&self, state: AgentState) {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.insert(state.name.clone(), state);
    }

    /// Steps the blocked instances now: some waited for this agent, which
    /// is back (or new), and need not wait for their next look.
    async fn wake_blocked(&self, now: Timestamp) -> vergence_model::Result<()> {
        let blocked: Vec<WorkItem> = self
            .store
            .list_instances(&InstanceFilter::default())
            .await?
            .into_iter()
            .filter(|record| record.state.status == Status::Blocked)
            .map(|record| WorkItem {
                instance: record.key,
                not_before: now,
            })
            .collect();
        if blocked.is_empty() {
            return Ok(());
        }
        self.queue.enqueue(&blocked).await
    }

    /// The task for a leased item, or `None` when there is nothing left to
    /// do (the item is then taken off the queue).
    async fn task_for(
        &self,
        agent: &AgentName,
        work: &AgentWork,
    ) -> Result<Option<Task>, KubernetesError> {
        let job = self
            .store
            .get_job(work.task.job_id())
            .await
            .map_err(KubernetesError::store("reading the job of a task"))?;
        let details = match (&work.task, job) {
            (AgentTask::RunJob { .. }, Some(job)) if job.result().is_none() => {
                if let Some(builtin) = &job.spec.builtin {
                    return Ok(Some(Task {
                        work_id: work.id.clone(),
                        details: TaskDetails::Manifests(ManifestsJob {
                            job_id: job.id.clone(),
                            work: builtin.clone(),
                            deadline_seconds: deadline_seconds(&job),
                        }),
                    }));
                }
                match self.run_job(agent, &job).await? {
                    Ok(run) => Some(TaskDetails::RunJob(run)),
                    Err(message) => {
                        // It can never start: a result now, not a retry.
                        warn!(job = %job.id, %message, "the job cannot run as a Kubernetes Job");
                        let result = JobResult::not_started(message, self.clock.now());
                        self.results
                            .job_finished(&job, result)
                            .await
                            .map_err(KubernetesError::store("recording a job that cannot start"))?;
                        None
                    }
                }
            }
            (AgentTask::StopJob { reason, .. }, Some(job)) => {
                let (_, spec) = agent_of(&job)?;
                Some(TaskDetails::StopJob(StopJob {
                    job_id: job.id.clone(),
                    job_name: job_name(&job.id),
                    namespace: spec.namespace.clone(),
                    reason: reason.clone(),
                }))
            }
            // Ended, or forgotten: nothing to run.
            _ => None,
        };
        if details.is_none() {
            self.store
                .finish_agent_work(agent, &work.id)
                .await
                .map_err(KubernetesError::store("dropping a task with nothing to do"))?;
        }
        Ok(details.map(|details| Task {
            work_id: work.id.clone(),
            details,
        }))
    }

    /// What the agent needs to create the job's Kubernetes Job; `Err` with
    /// a sentence when the job cannot run there.
    async fn run_job(
        &self,
        agent: &AgentName,
        job: &JobRecord,
    ) -> Result<Result<RunJob, String>, KubernetesError> {
        let (_, spec) = agent_of(job)?;
        let ttl = job
            .spec
            .timeout
            .checked_add(URL_SLACK)
            .unwrap_or(SignedDuration::MAX);
        let launch = match Launch::prepare(job, self.artifacts.as_ref(), ttl).await {
            Ok(launch) => launch,
            Err(message) => return Ok(Err(message)),
        };
        let secret_env = match secret_refs(&launch.secrets) {
            Ok(refs) => refs,
            Err(e) => return Ok(Err(e.to_string())),
        };
        Ok(Ok(RunJob {
            job_id: job.id.clone(),
            job_name: job_name(&job.id),
            namespace: spec.namespace.clone(),
            service_account: spec.service_account.clone(),
            image: launch.image,
            command: launch.command,
            env: launch.env,
            secret_env,
            active_deadline_seconds: deadline_seconds(job),
            labels: job_labels(job, agent),
        }))
    }

    /// The job's result from the agent's report: the streams the wrapper
    /// uploaded when it ran, else the pod log.
    async fn result_of(
        &self,
        job: &JobRecord,
        finished: JobFinished,
    ) -> Result<JobResult, KubernetesError> {
        let ended = match finished.ended {
            JobEnd::Exited { exit_code } => Ended::Exited(exit_code),
            JobEnd::PlatformFailed { message } => Ended::PlatformFailed(message),
            JobEnd::TimedOut => Ended::TimedOut,
            JobEnd::Stopped { reason } => Ended::Stopped(reason),
        };
        let captured = container::captured_streams(job, self.artifacts.as_ref())
            .await
            .map_err(KubernetesError::store("reading the job's captured streams"))?;
        let logs = captured.unwrap_or(PlatformLogs {
            stdout: finished.log,
            stderr: finished.log_tail,
        });
        let outputs = container::outputs(job, self.artifacts.as_ref())
            .await
            .map_err(KubernetesError::store("reading the job's outputs"))?;
        Ok(container::result(
            ended,
            logs,
            outputs,
            finished.started_at,
            finished.finished_at,
        ))
    }

    async fn report(
        &self,
        agent: &AgentName,
        report: AgentReport,
    ) -> Result<Option<ReportAnswer>, KubernetesError> {
        let Some(job_id) = report.job_id() else {
            let AgentReport::ObjectsChanged(changed) = report else {
                return Ok(None);
            };
            return self.objects_changed(agent, &changed).await;
        };
        let job = self
            .store
            .get_job(job_id)
            .await
            .map_err(KubernetesError::store("reading the reported job"))?;
        // Only the agent a job was queued for may report it.
        let Some(job) = job.filter(|job| agent_of(job).is_ok_and(|(a, _)| a == *agent)) else {
            return Ok(None);
        };
        let recorded = match report {
            AgentReport::JobFinished(finished) => {
                let fresh = job.result().is_none();
                if fresh {
                    let result = self.result_of(&job, finished).await?;
                    info!(job = %job.id, outcome = ?result.outcome, exit_code = ?result.exit_code, "the agent reported the job ended");
                    self.results
                        .job_finished(&job, result)
                        .await
                        .map_err(KubernetesError::store("recording the job's result"))?;
                }
                fresh
            }
            AgentReport::JobStopped(_) => {
                self.finish(agent, &AgentWork::stop_id(&job.id)).await?;
                true
            }
            AgentReport::ObjectsChanged(_) => false,
        };
        // Either way the Kubernetes Job is done with: nothing to hand out again.
        self.finish(agent, &AgentWork::run_id(&job.id)).await?;
        Ok(Some(ReportAnswer { recorded }))
    }

    /// The agent's watch saw an instance's objects change: the instance is
    /// looked at now (a fresh fetch, as `vergence up` asks for) rather than
    /// at its next poll. `None` unless the instance's runtime is this
    /// agent's, so an agent learns nothing of, and wakes nothing in,
    /// another's work.
    async fn objects_changed(
        &self,
        agent: &AgentName,
        changed: &ObjectsChanged,
    ) -> Result<Option<ReportAnswer>, KubernetesError> {
        let Some(key) = instance_key(changed) else {
            return Ok(None);
        };
        let looked_at =
            ports::update_instance(self.store.as_ref(), self.clock.as_ref(), &key, |r| {
                runs_on(r, agent).then(|| {
                    r.state.checks_requested = true;
                    Vec::new()
                })
            })
            .await;
        match looked_at {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(None),
            // Busy with other writes, each of which steps it anyway.
            Err(vergence_model::Error::Conflict { .. }) => {
                return Ok(Some(ReportAnswer { recorded: false }));
            }
            Err(e) => return Err(KubernetesError::store("asking for a fresh look")(e)),
        }
        info!(instance = %key, changes = ?changed.changes, "the agent saw the instance's objects change; looking now");
        let wake = WorkItem {
            instance: key,
            not_before: self.clock.now(),
        };
        self.queue
            .enqueue(std::slice::from_ref(&wake))
            .await
            .map_err(KubernetesError::store("waking the changed instance"))?;
        Ok(Some(ReportAnswer { recorded: true }))
    }

    async fn finish(&self, agent: &AgentName, id: &str) -> Result<(), KubernetesError> {
        self.store
            .finish_agent_work(agent, id)
            .await
            .map_err(KubernetesError::store("taking done work off the queue"))?;
        Ok(())
    }
}

fn instance_key(changed: &ObjectsChanged) -> Option<InstanceKey> {
    Some(InstanceKey::new(
        changed.application.parse().ok()?,
        changed.service.parse().ok()?,
        changed.release_channel.parse().ok()?,
    ))
}

/// Whether the instance's runtime applies through `agent`.
fn runs_on(record: &InstanceRecord, agent: &AgentName) -> bool {
    let Desired::Ready(compiled) = &record.desired else {
        return false;
    };
    matches!(&compiled.apply.job.runner, RunnerSpec::Kubernetes(spec) if spec.agent == agent.as_str())
}

/// The job's secret variables as Secret key references; any other source
/// is an error naming the variable (the compiler already refuses them, so
/// this only guards records from elsewhere).
fn secret_refs(
    secrets: &BTreeMap<String, SecretRef>,
) -> Result<BTreeMap<String, SecretKeyRef>, KubernetesError> {
    secrets
        .iter()
        .map(|(variable, source)| match source {
            SecretRef::KubernetesSecret { name, key } => Ok((
                variable.clone(),
                SecretKeyRef {
                    name: name.clone(),
                    key: key.clone(),
                },
            )),
            other => Err(KubernetesError::Secret {
                variable: variable.clone(),
                source_described: other.describe(),
            }),
        })
        .collect()
}

/// The job's timeout in whole seconds, at least one (0 is not a valid
/// `activeDeadlineSeconds`).
fn deadline_seconds(job: &JobRecord) -> u64 {
    u64::try_from(job.spec.timeout.as_secs())
        .unwrap_or(0)
        .max(1)
}

fn after(now: Timestamp, by: SignedDuration) -> Timestamp {
    now.checked_add(by).unwrap_or(now)
}

/// Whether `state`, the agent's record, was written recently enough, and
/// says what the agent says of itself now: the poll then writes nothing.
fn seen_lately(state: &AgentState, poll: &PollRequest, now: Timestamp) -> bool {
    state.last_seen <= now
        && now.duration_since(state.last_seen) < SEEN_WRITTEN_EVERY
        && state.version == poll.version
        && state.namespace == poll.namespace
        && state.cluster == poll.cluster
}

#[async_trait]
impl AgentDesk for AgentJobs {
    #[instrument(name = "agent.check_in", skip_all, fields(agent = %agent, running = poll.running.len()))]
    async fn check_in(&self, agent: &AgentName, poll: &PollRequest) -> vergence_model::Result<()> {
        let now = self.clock.now();
        let was_alive = match self.fresh(agent, poll, now) {
            Some(was_alive) => was_alive,
            None => self.record(agent, poll, now).await?,
        };
        let running: Vec<String> = poll.running.iter().map(AgentWork::run_id).collect();
        self.store
            .renew_agent_work(agent, &running, after(now, AGENT_LEASE))
            .await?;
        if !was_alive {
            info!("the agent is connected (again)");
            self.wake_blocked(now).await?;
        }
        Ok(())
    }

    #[instrument(name = "agent.hand_out", skip_all, fields(agent = %agent))]
    async fn hand_out(&self, agent: &AgentName, limit: usize) -> vergence_model::Result<Vec<Task>> {
        let now = self.clock.now();
        let leased = self
            .store
            .lease_agent_work(agent, now, after(now, AGENT_LEASE), limit)
            .await?;
        let mut tasks = Vec::with_capacity(leased.len());
        for work in &leased {
            if work.deliveries > 1 {
                info!(work = %work.id, deliveries = work.deliveries, "handing out again: the lease of an earlier delivery ran out");
            }
            if let Some(task) = self.task_for(agent, work).await? {
                tasks.push(task);
            }
        }
        Ok(tasks)
    }

    #[instrument(name = "agent.report", skip_all, fields(agent = %agent, about = %report.subject()))]
    async fn take_report(
        &self,
        agent: &AgentName,
        report: AgentReport,
    ) -> vergence_model::Result<Option<ReportAnswer>> {
        Ok(self.report(agent, report).await?)
    }
}
