//! The worker: one convergence step per SQS message. Jobs of the local
//! runner run inside the invocation, bounded well under the function's
//! deadline, and their results go back to the step that started them,
//! which records each and decides on it at once. A local job whose own
//! timeout is longer than the worker can give it runs for what it can,
//! and if it is stopped there its result says so (not a bare "timed out"). Jobs of ECS and Cloud
//! Run runtimes are only started here: the step returns at once, and a later
//! step reads the result.
//!
//! A message is either a work message naming an instance, or an "ECS Task
//! State Change" event EventBridge puts on the queue when a job's task
//! stops: the worker steps the instance of that job, which reads the result
//! from ECS and records it once (a second copy of the event steps an
//! instance with nothing left to read).
//!
//! The first-class ECS runtime's apply and fetch are a few ECS API calls
//! the worker makes itself, within the step.
//!
//! Failures are reported per message (`ReportBatchItemFailures`): a
//! retryable error fails only its message, which SQS delivers again; a
//! permanent one marks the instance FAILED with the error and consumes the
//! message. A message on its last delivery before the dead-letter queue is
//! recorded as an event on its instance, so the poison is visible.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures::StreamExt;
use tracing::{Instrument, debug, error, info, info_span, warn};
use vergence_aws::WorkMessage;
use vergence_engine::control::StepFailure;
use vergence_engine::{Engine, JobCompletion, QuietChecks, RunnerRouter, UpstreamHints};
use vergence_model::ports::{JobResultSink, JobStore, Runner, Started, WorkItem, WorkQueue};
use vergence_model::{
    ApplicationName, BuiltinPlatform, InstanceKey, JobHandle, JobOutcome, JobRecord, JobResult,
    RunnerKind, ServiceName,
};
use vergence_runner_cloud_run::CloudRunServices;
use vergence_runner_ecs::{EcsServices, task_state_change};
use vergence_runner_kubernetes::AgentRunner;
use vergence_runner_local::LocalRunner;

use crate::{Deployment, LambdaError};

/// Who the worker's own events are attributed to.
const ACTOR: &str = "worker";

/// Steady-state checks that find nothing write one small item: the next
/// check travels as an SQS delayed message (at most 15 minutes out), and
/// the due index looks at the instance only if that chain of messages
/// broke, an hour behind it. An hour bounds both how late a broken chain
/// is found and how often the whole instance is written again (once an
/// hour per instance; docs/performance.md).
const QUIET_CHECKS: QuietChecks = QuietChecks {
    longest_delay: jiff::SignedDuration::from_secs(vergence_aws::sqs::MAX_DELAY_SECONDS),
    watchdog: jiff::SignedDuration::from_hours(1),
};

/// Steps one invocation runs at once. A batch is at most 10 messages of
/// at most 10 instances each (`vergence_aws::sqs::INSTANCES_PER_MESSAGE`);
/// inline jobs are processes in the function's memory, so not all 100 run
/// at once.
const STEPS_AT_ONCE: usize = 10;

/// Jobs shorter than this are not started at the end of an invocation: the
/// message is retried in a fresh one instead.
const MIN_JOB_TIME: Duration = Duration::from_secs(5);

/// The worker's settings.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Deliveries after which SQS moves a message to the dead-letter queue
    /// (the queue's `maxReceiveCount`).
    pub max_receive_count: u32,
    /// The function's timeout (`VERGENCE_WORKER_TIMEOUT_SECONDS`, the
    /// stack's `WorkerTimeoutSeconds`, which is also the function's
    /// `Timeout`): the one source of how long a local job may run here.
    /// `None` where it is not known, and only each invocation's deadline
    /// bounds local jobs.
    pub function_timeout: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_receive_count: 5,
            function_timeout: None,
        }
    }
}

/// The longest timeout Lambda allows a function (15 minutes).
const MAX_FUNCTION_TIMEOUT: Duration = Duration::from_secs(900);

/// Where template.yaml gives the worker its own timeout.
const WORKER_TIMEOUT_VAR: &str = "VERGENCE_WORKER_TIMEOUT_SECONDS";

impl WorkerConfig {
    /// The settings template.yaml gives the worker function.
    pub fn from_env() -> Result<Self, LambdaError> {
        Self::with_timeout_var(std::env::var(WORKER_TIMEOUT_VAR).ok().as_deref())
    }

    /// The settings, given the value of `VERGENCE_WORKER_TIMEOUT_SECONDS`.
    fn with_timeout_var(raw: Option<&str>) -> Result<Self, LambdaError> {
        let function_timeout = match raw {
            Some(raw) => {
                let invalid = |message: String| LambdaError::InvalidEnv {
                    name: WORKER_TIMEOUT_VAR,
                    value: raw.to_owned(),
                    message,
                };
                let seconds = raw
                    .trim()
                    .parse::<u64>()
                    .map_err(|e| invalid(e.to_string()))?;
                let timeout = Duration::from_secs(seconds);
                if timeout.is_zero() || timeout > MAX_FUNCTION_TIMEOUT {
                    return Err(invalid(
                        "a Lambda function's timeout is 1 to 900 seconds (the stack parameter WorkerTimeoutSeconds)".into(),
                    ));
                }
                Some(timeout)
            }
            None => None,
        };
        Ok(Self {
            function_timeout,
            ..Self::default()
        })
    }
}

#[allow(missing_debug_implementations)] // holds SDK clients behind trait objects
pub struct Worker {
    deployment: Deployment,
    config: WorkerConfig,
    /// Replaces the local runner (tests inject crashes with it).
    runner: Option<Arc<dyn Runner>>,
    /// What steps learnt about reading instances with their upstream
    /// channels, kept for the container's next batches.
    hints: UpstreamHints,
}

impl Worker {
    pub fn new(deployment: Deployment, config: WorkerConfig) -> Self {
        Self {
            deployment,
            config,
            runner: None,
            hints: UpstreamHints::default(),
        }
    }

    /// The longest a local job runs in this worker, in any invocation:
    /// the function's timeout less the margin kept to record the result.
    /// Fails when the margin leaves no time at all.
    pub fn local_job_limit(&self) -> Result<Option<Duration>, LambdaError> {
        let Some(timeout) = self.config.function_timeout else {
            return Ok(None);
        };
        let margin = self.deployment.config.job_timeout_margin;
        match timeout.checked_sub(margin) {
            Some(limit) if limit >= MIN_JOB_TIME => Ok(Some(limit)),
            _ => Err(LambdaError::InvalidEnv {
                name: "VERGENCE_JOB_TIMEOUT_MARGIN_SECONDS",
                value: margin.as_secs().to_string(),
                message: format!(
                    "the worker's timeout ({}s) less this margin leaves local jobs less than {}s",
                    timeout.as_secs(),
                    MIN_JOB_TIME.as_secs()
                ),
            }),
        }
    }

    /// A worker whose jobs go to `runner` instead of the local runner.
    pub fn with_runner(
        deployment: Deployment,
        config: WorkerConfig,
        runner: Arc<dyn Runner>,
    ) -> Self {
        Self {
            deployment,
            config,
            runner: Some(runner),
            hints: UpstreamHints::default(),
        }
    }

    /// Steps the instance of every message; `deadline` is the invocation's.
    pub async fn handle(&self, event: SqsEvent, deadline: Option<Instant>) -> SqsBatchResponse {
        let runner: Arc<dyn Runner> = match &self.runner {
            Some(runner) => runner.clone(),
            None => Arc::new(BoundedRunner {
                inner: LocalRunner::inline(self.completion(), self.deployment.artifacts.clone()),
                sink: self.completion(),
                deadline,
                margin: self.deployment.config.job_timeout_margin,
                // Checked when the worker starts (main); a limit that
                // leaves no time is as good as none here.
                limit: self.local_job_limit().ok().flatten(),
            }),
        };
        let agents = AgentRunner::new(self.deployment.state(), self.deployment.clock.clone());
        // The first-class ECS runtime's calls are made here, with the
        // worker's role, and reported like a local job's result.
        let ecs_services = EcsServices::new(self.deployment.ecs_clients.clone(), self.completion());
        let mut runners = RunnerRouter::new("the worker function")
            .with(RunnerKind::Local, runner)
            .with(RunnerKind::Ecs, self.deployment.ecs.clone())
            .with(RunnerKind::Lambda, self.deployment.lambda.clone())
            .with(RunnerKind::Kubernetes, Arc::new(agents))
            .with_builtin(BuiltinPlatform::Ecs, Arc::new(ecs_services))
            // Metric protections read with the worker's role (CloudWatch)
            // and from the worker's network (Prometheus).
            .with_builtin(
                BuiltinPlatform::Prometheus,
                vergence_metrics::prometheus_runner(
                    self.deployment.metrics_http.clone(),
                    self.completion(),
                ),
            )
            .with_builtin(
                BuiltinPlatform::CloudWatch,
                vergence_metrics::cloudwatch_runner(
                    self.deployment.alarms.clone(),
                    self.completion(),
                ),
            );
        runners = match &self.deployment.cloud_run {
            Ok(cloud_run) => {
                let services =
                    CloudRunServices::new(cloud_run.clients().clone(), self.completion());
                runners
                    .with(RunnerKind::CloudRun, cloud_run.clone())
                    .with_builtin(BuiltinPlatform::CloudRun, Arc::new(services))
            }
            Err(why) => runners.without(RunnerKind::CloudRun, why.clone()),
        };
        let outbox = Arc::new(Outbox::new(self.deployment.work()));
        let engine = Engine::new(
            self.deployment.state(),
            outbox.clone(),
            runners,
            self.deployment.clock.clone(),
        )
        .with_artifacts(self.deployment.artifacts.clone())
        .with_quiet_checks(QUIET_CHECKS)
        .with_upstream_hints(self.hints.clone());
        let mut response = SqsBatchResponse::default();
        let mut failed = |message: &SqsMessage| {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = message.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        };
        // The batch's instances (a message may name several due together)
        // are stepped at once: they are mostly independent checks that
        // wait on DynamoDB, a fetch or a runtime's API, so the invocation
        // (and its bill, and the deadline its jobs share) lasts about as
        // long as its slowest step rather than the sum of them. Instances
        // of one service are stepped in turn, as they came: a channel's
        // step reads its upstream channels, and one step at once with
        // another of the same instance would only lose its write to it.
        let mut dispositions = vec![Disposition::Done; event.records.len()];
        let mut named = Vec::new();
        for (at, message) in event.records.iter().enumerate() {
            match self.instances_of(message).await {
                Ok(keys) => named.extend(keys.into_iter().map(|key| (at, key))),
                Err(disposition) => dispositions[at] = disposition,
            }
        }
        let records = &event.records;
        let turns = same_service_in_turn(named).into_iter().map(|turn| {
            let engine = &engine;
            async move {
                let mut stepped = Vec::with_capacity(turn.len());
                for (at, key) in turn {
                    stepped.push((at, self.step_named(engine, &records[at], key).await));
                }
                stepped
            }
        });
        let stepped: Vec<Vec<(usize, Disposition)>> = futures::stream::iter(turns)
            .buffer_unordered(STEPS_AT_ONCE)
            .collect()
            .await;
        // A message is delivered again when any of its steps asks for it;
        // its other instances then find their step done and do nothing.
        for (at, disposition) in stepped.into_iter().flatten() {
            if disposition == Disposition::Redeliver {
                dispositions[at] = Disposition::Redeliver;
            }
        }
        let mut done = Vec::new();
        for (message, disposition) in event.records.into_iter().zip(dispositions) {
            match disposition {
                Disposition::Redeliver => failed(&message),
                Disposition::Done => done.push(message),
            }
        }
        // What the steps asked for goes out before Lambda deletes their
        // messages. Lost, it would leave their instances to the due index:
        // the messages are delivered again instead.
        if let Err(e) = outbox.flush().await {
            error!(error = %e, "the steps' next messages were not sent; their messages will be delivered again");
            done.iter().for_each(&mut failed);
        }
        response
    }

    /// Where finished jobs are reported: the job record, then a message.
    pub fn completion(&self) -> Arc<JobCompletion> {
        Arc::new(JobCompletion::new(
            self.deployment.state(),
            self.deployment.work(),
            self.deployment.clock.clone(),
        ))
    }

    /// The instances `message` asks to step: those it names, or the
    /// instance of the job whose task an ECS event says stopped. `Err`:
    /// what becomes of a message that leaves nothing to step.
    async fn instances_of(&self, message: &SqsMessage) -> Result<Vec<InstanceKey>, Disposition> {
        let id = message.message_id.as_deref().unwrap_or_default();
        let body = message.body.as_deref().unwrap_or_default();
        match WorkMessage::parse(body) {
            Ok(work) => Ok(work.instances().cloned().collect()),
            Err(e) => match self.task_stopped(id, body).await {
                Ok(Some(key)) => Ok(vec![key]),
                Ok(None) => Err(Disposition::Done),
                Err(Disposition::Redeliver) => Err(Disposition::Redeliver),
                Err(Disposition::Done) => {
                    // Nothing names an instance: retrying cannot help.
                    error!(message_id = %id, error = %e, "dropping a malformed work message");
                    Err(Disposition::Done)
                }
            },
        }
    }

    /// Steps `key`, one of the instances `message` named.
    async fn step_named(
        &self,
        engine: &Engine,
        message: &SqsMessage,
        key: InstanceKey,
    ) -> Disposition {
        // Every line logged for this step, down to the adapters' spans,
        // carries the instance it is about.
        let span = info_span!(
            "work",
            message_id = %message.message_id.as_deref().unwrap_or_default(),
            application = %key.application,
            service = %key.service,
            release_channel = %key.release_channel,
        );
        self.step_instance(engine, message, key)
            .instrument(span)
            .await
    }

    /// The instance whose job's task an ECS event says stopped. `Ok(None)`:
    /// an event to pass over (a task Vergence did not start, one still on
    /// its way, a job this deployment does not know). `Err(Done)`: not an
    /// ECS event at all; `Err(Redeliver)`: the job could not be read now.
    async fn task_stopped(&self, id: &str, body: &str) -> Result<Option<InstanceKey>, Disposition> {
        let change = match task_state_change(body) {
            Ok(Some(change)) if change.is_stopped() => change,
            Ok(_) => return Ok(None),
            Err(_) => return Err(Disposition::Done),
        };
        match self.deployment.store.as_ref().get_job(&change.job).await {
            Ok(Some(job)) => {
                info!(message_id = %id, job = %change.job, task = %change.task.as_str(), "a job's task stopped");
                Ok(Some(job.instance))
            }
            Ok(None) => {
                // Another deployment's job on a shared cluster, or one
                // whose record has expired.
                info!(message_id = %id, job = %change.job, "passing over a stopped task of an unknown job");
                Ok(None)
            }
            Err(e) => {
                warn!(message_id = %id, job = %change.job, error = %e, "could not read the job of a stopped task");
                Err(Disposition::Redeliver)
            }
        }
    }

    async fn step_instance(
        &self,
        engine: &Engine,
        message: &SqsMessage,
        key: InstanceKey,
    ) -> Disposition {
        match engine.step(&key).await {
            Ok(report) if report.quiet => {
                // Most of a converged deployment's messages: a line each
                // at info would be most of its log bill (docs/cost.md).
                debug!(status = ?report.status, "checked: nothing to do");
                Disposition::Done
            }
            Ok(report) => {
                info!(status = ?report.status, jobs = report.dispatched.len(), "stepped");
                Disposition::Done
            }
            Err(e) if e.is_retryable() => {
                let receives = receive_count(message);
                if receives >= self.config.max_receive_count {
                    error!(error = %e, receives, "giving up: the message goes to the dead-letter queue");
                    let control = self.deployment.control();
                    if let Err(record) = control
                        .record_step_failure(&key, &e.to_string(), StepFailure::GaveUp, ACTOR)
                        .await
                    {
                        warn!(error = %record, "could not record the dead-lettered step");
                    }
                } else {
                    warn!(error = %e, receives, "step failed; the message will be delivered again");
                }
                Disposition::Redeliver
            }
            Err(e) => {
                error!(error = %e, "step failed permanently");
                let control = self.deployment.control();
                match control
                    .record_step_failure(&key, &e.to_string(), StepFailure::Permanent, ACTOR)
                    .await
                {
                    Ok(()) => Disposition::Done,
                    // Could not even record it: let SQS try again.
                    Err(_) => Disposition::Redeliver,
                }
            }
        }
    }
}

/// The steps' requests for later steps, held until the batch's steps are
/// over and then sent together: the next checks of a batch of 10 quiet
/// checks are one `SendMessageBatch`, not 10 (docs/cost.md).
struct Outbox {
    queue: Arc<dyn WorkQueue>,
    held: std::sync::Mutex<Vec<WorkItem>>,
}

impl Outbox {
    fn new(queue: Arc<dyn WorkQueue>) -> Self {
        Self {
            queue,
            held: std::sync::Mutex::default(),
        }
    }

    async fn flush(&self) -> vergence_model::Result<()> {
        let items = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        if items.is_empty() {
            return Ok(());
        }
        self.queue.enqueue(&items).await
    }
}

#[async_trait]
impl WorkQueue for Outbox {
    async fn enqueue(&self, items: &[WorkItem]) -> vergence_model::Result<()> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(items);
        Ok(())
    }
}

/// The instances `named` (each with the index of its message) in groups
/// to step at once, each holding one service's (any of its channels) in
/// the order they came.
fn same_service_in_turn(named: Vec<(usize, InstanceKey)>) -> Vec<Vec<(usize, InstanceKey)>> {
    let mut groups: Vec<Vec<(usize, InstanceKey)>> = Vec::with_capacity(named.len());
    let mut by_service: std::collections::HashMap<(ApplicationName, ServiceName), usize> =
        std::collections::HashMap::new();
    for (at, key) in named {
        let service = (key.application.clone(), key.service.clone());
        match by_service.get(&service) {
            Some(&group) => groups[group].push((at, key)),
            None => {
                by_service.insert(service, groups.len());
                groups.push(vec![(at, key)]);
            }
        }
    }
    groups
}

/// What becomes of one message after its step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disposition {
    /// Consumed: stepped, or recorded as failed for good.
    Done,
    /// Reported as a batch item failure, so SQS delivers it again.
    Redeliver,
}

fn receive_count(message: &SqsMessage) -> u32 {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The local runner, with each job's timeout cut to what the worker can
/// give it — the function's timeout less a margin, and what is left of
/// this invocation — so a job never outlives the function and its result
/// is always recorded. A job stopped at such a cut, before its own
/// timeout, fails saying why instead of as "timed out".
struct BoundedRunner {
    inner: LocalRunner,
    /// Where `dispatch` hands results: the engine takes them from `start`.
    sink: Arc<dyn JobResultSink>,
    deadline: Option<Instant>,
    margin: Duration,
    /// [`Worker::local_job_limit`].
    limit: Option<Duration>,
}

/// A job's timeout cut to what the worker can give it, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cut {
    /// What the job runs for here.
    allowed: Duration,
    /// Its own timeout.
    configured: jiff::SignedDuration,
    /// The function's limit for local jobs when that is what cut it,
    /// rather than what this invocation had left.
    by_function: Option<Duration>,
    margin: Duration,
}

impl Cut {
    /// The cut of a job whose own timeout is `configured`, when the
    /// worker's `limit` for local jobs or what is `left` of the invocation
    /// (both less the margin) is shorter.
    fn of(
        configured: jiff::SignedDuration,
        limit: Option<Duration>,
        left: Option<Duration>,
        margin: Duration,
    ) -> Option<Cut> {
        let allowed = [limit, left].into_iter().flatten().min()?;
        let allowed_signed =
            jiff::SignedDuration::try_from(allowed).unwrap_or(jiff::SignedDuration::MAX);
        if allowed_signed >= configured {
            return None;
        }
        // A fresh invocation has a moment less than the function's limit
        // left: that is still the function's limit at work. Much less,
        // and the messages before this one took it.
        let by_function = limit.filter(|limit| allowed + MIN_JOB_TIME >= *limit);
        Some(Cut {
            allowed,
            configured,
            by_function,
            margin,
        })
    }

    /// The result of a job stopped at the cut: the platform (the worker
    /// function) ended it before its own timeout, and what to do about it.
    fn explain(&self, mut result: JobResult) -> JobResult {
        // Whole seconds, as people count them: a fresh invocation's
        // 4m 29.9s is the function's 4m 30s.
        let allowed = jiff::SignedDuration::from_secs(self.allowed.as_secs_f64().round() as i64);
        let why = match self.by_function {
            Some(limit) => format!(
                "the longest a local job runs in the worker function (the stack parameter \
                 WorkerTimeoutSeconds, {}s, less {}s to record the result); run it on the ecs \
                 or cloudRun runner, shorten it, or raise WorkerTimeoutSeconds (at most 900)",
                (limit + self.margin).as_secs(),
                self.margin.as_secs()
            ),
            None => "what was left of the worker function's invocation (the messages before it \
                     in the batch took the rest)"
                .to_owned(),
        };
        result.outcome = JobOutcome::PlatformFailed {
            message: format!(
                "stopped after {}, before its own timeout of {}: {why}",
                vergence_engine::human(allowed),
                vergence_engine::human(self.configured)
            ),
        };
        result
    }
}

impl BoundedRunner {
    /// The job with its timeout cut to what the worker can give it (and
    /// the cut, when there was one); refused when too little is left of
    /// this invocation to start it.
    fn bounded(&self, job: &JobRecord) -> vergence_model::Result<(JobRecord, Option<Cut>)> {
        let mut bounded = job.clone();
        let left = self.deadline.map(|deadline| {
            deadline
                .saturating_duration_since(Instant::now())
                .saturating_sub(self.margin)
        });
        if left.is_some_and(|left| left < MIN_JOB_TIME) {
            return Err(vergence_model::Error::Runner {
                runner: "local".into(),
                message: "too little time left in this invocation to start the job".into(),
            });
        }
        let Some(cut) = Cut::of(bounded.spec.timeout, self.limit, left, self.margin) else {
            return Ok((bounded, None));
        };
        Arc::make_mut(&mut bounded.spec).timeout =
            jiff::SignedDuration::try_from(cut.allowed).unwrap_or_default();
        Ok((bounded, Some(cut)))
    }
}

#[async_trait]
impl Runner for BoundedRunner {
    /// Runs the job as `start` does and hands its result to the sink, as
    /// a runner that only dispatches would.
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        match self.start(job).await? {
            Started::Finished(result) => {
                self.sink.job_finished(job, result).await?;
                Ok(None)
            }
            Started::Running(handle) => Ok(handle),
        }
    }

    fn runs_inline(&self, job: &JobRecord) -> bool {
        self.inner.runs_inline(job)
    }

    /// The result comes back to the step, which records it with its next
    /// decision instead of stepping the instance again through the queue.
    async fn start(&self, job: &JobRecord) -> vergence_model::Result<Started> {
        let (bounded, cut) = self.bounded(job)?;
        Ok(match (self.inner.start(&bounded).await?, cut) {
            (Started::Finished(result), Some(cut)) if result.outcome == JobOutcome::TimedOut => {
                Started::Finished(cut.explain(result))
            }
            (started, _) => started,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use jiff::{SignedDuration, Timestamp};

    use super::*;

    const MARGIN: Duration = Duration::from_secs(30);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn key(service: &str, channel: &str) -> InstanceKey {
        InstanceKey::new(
            ApplicationName::parse("shop").unwrap(),
            ServiceName::parse(service).unwrap(),
            vergence_model::ReleaseChannelName::parse(channel).unwrap(),
        )
    }

    #[test]
    fn a_services_instances_are_stepped_in_turn_and_other_services_at_once() {
        let named = vec![
            (0, key("api", "staging")),
            (0, key("web", "prod")),
            (1, key("api", "prod")),
            (2, key("api", "staging")),
            (2, key("db", "prod")),
        ];
        let groups: Vec<Vec<(usize, String)>> = same_service_in_turn(named)
            .into_iter()
            .map(|group| {
                group
                    .into_iter()
                    .map(|(at, k)| (at, format!("{}/{}", k.service, k.release_channel)))
                    .collect()
            })
            .collect();
        let step = |at: usize, name: &str| (at, name.to_owned());
        assert_eq!(
            groups,
            [
                vec![
                    step(0, "api/staging"),
                    step(1, "api/prod"),
                    step(2, "api/staging")
                ],
                vec![step(0, "web/prod")],
                vec![step(2, "db/prod")],
            ]
        );
    }

    #[test]
    fn a_job_that_fits_is_not_cut() {
        let five_minutes = SignedDuration::from_mins(5);
        assert_eq!(Cut::of(five_minutes, None, None, MARGIN), None);
        assert_eq!(
            Cut::of(five_minutes, Some(secs(870)), Some(secs(869)), MARGIN),
            None
        );
    }

    #[test]
    fn a_job_longer_than_the_worker_allows_is_cut_to_the_functions_limit_and_says_so() {
        // WorkerTimeoutSeconds 300, a fresh invocation (a moment less left).
        let left = Duration::from_millis(269_900);
        let cut = Cut::of(
            SignedDuration::from_mins(30),
            Some(secs(270)),
            Some(left),
            MARGIN,
        )
        .unwrap();
        assert_eq!(cut.allowed, left);
        assert_eq!(cut.by_function, Some(secs(270)));
        let result = JobResult::without_output(JobOutcome::TimedOut, Timestamp::UNIX_EPOCH);
        let JobOutcome::PlatformFailed { message } = cut.explain(result).outcome else {
            panic!("a platform failure");
        };
        assert_eq!(
            message,
            "stopped after 4m 30s, before its own timeout of 30m: the longest a local job runs in \
             the worker function (the stack parameter WorkerTimeoutSeconds, 300s, less 30s to \
             record the result); run it on the ecs or cloudRun runner, shorten it, or raise \
             WorkerTimeoutSeconds (at most 900)"
        );
    }

    #[test]
    fn a_job_started_late_in_an_invocation_says_the_invocation_was_ending() {
        // Earlier messages of the batch took all but 2 minutes.
        let cut = Cut::of(
            SignedDuration::from_mins(4),
            Some(secs(270)),
            Some(secs(120)),
            MARGIN,
        )
        .unwrap();
        assert_eq!((cut.allowed, cut.by_function), (secs(120), None));
        let result = JobResult::without_output(JobOutcome::TimedOut, Timestamp::UNIX_EPOCH);
        assert_eq!(
            cut.explain(result).outcome.to_string(),
            "failed on its platform: stopped after 2m, before its own timeout of 4m: what was left \
             of the worker function's invocation (the messages before it in the batch took the rest)"
        );
    }

    #[test]
    fn the_worker_timeout_is_read_from_the_stack_within_lambdas_limits() {
        let timeout = |raw| WorkerConfig::with_timeout_var(raw).map(|c| c.function_timeout);
        assert_eq!(timeout(None).unwrap(), None);
        assert_eq!(timeout(Some("300")).unwrap(), Some(secs(300)));
        for wrong in ["0", "901", "5m"] {
            let error = timeout(Some(wrong)).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!(
                    "environment variable VERGENCE_WORKER_TIMEOUT_SECONDS=\"{wrong}\" is invalid"
                )),
                "{error}"
            );
        }
    }
}
