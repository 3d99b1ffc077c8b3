//! The worker: one convergence step per SQS message. Jobs of the local
//! runner run inside the invocation, bounded well under the function's
//! deadline, and their results go back to the step that started them,
//! which records each and decides on it at once. Jobs of ECS and Cloud
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
use tracing::{Instrument, error, info, info_span, warn};
use vergence_aws::WorkMessage;
use vergence_engine::control::StepFailure;
use vergence_engine::{Engine, JobCompletion, RunnerRouter};
use vergence_model::ports::{JobStore, Runner, Started};
use vergence_model::{BuiltinPlatform, InstanceKey, JobHandle, JobRecord, RunnerKind};
use vergence_runner_cloud_run::CloudRunServices;
use vergence_runner_ecs::{EcsServices, task_state_change};
use vergence_runner_kubernetes::AgentRunner;
use vergence_runner_local::LocalRunner;

use crate::Deployment;

/// Who the worker's own events are attributed to.
const ACTOR: &str = "worker";

/// Jobs shorter than this are not started at the end of an invocation: the
/// message is retried in a fresh one instead.
const MIN_JOB_TIME: Duration = Duration::from_secs(5);

/// The worker's settings.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Deliveries after which SQS moves a message to the dead-letter queue
    /// (the queue's `maxReceiveCount`).
    pub max_receive_count: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_receive_count: 5,
        }
    }
}

#[allow(missing_debug_implementations)] // holds SDK clients behind trait objects
pub struct Worker {
    deployment: Deployment,
    config: WorkerConfig,
    /// Replaces the local runner (tests inject crashes with it).
    runner: Option<Arc<dyn Runner>>,
}

impl Worker {
    pub fn new(deployment: Deployment, config: WorkerConfig) -> Self {
        Self {
            deployment,
            config,
            runner: None,
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
        }
    }

    /// Steps the instance of every message; `deadline` is the invocation's.
    pub async fn handle(&self, event: SqsEvent, deadline: Option<Instant>) -> SqsBatchResponse {
        let runner: Arc<dyn Runner> = match &self.runner {
            Some(runner) => runner.clone(),
            None => Arc::new(BoundedRunner {
                inner: LocalRunner::inline(self.completion(), self.deployment.artifacts.clone()),
                deadline,
                margin: self.deployment.config.job_timeout_margin,
            }),
        };
        let agents = AgentRunner::new(self.deployment.state(), self.deployment.clock.clone());
        // The first-class ECS runtime's calls are made here, with the
        // worker's role, and reported like a local job's result.
        let ecs_services = EcsServices::new(self.deployment.ecs_clients.clone(), self.completion());
        let mut runners = RunnerRouter::new("the worker function")
            .with(RunnerKind::Local, runner)
            .with(RunnerKind::Ecs, self.deployment.ecs.clone())
            .with(RunnerKind::Kubernetes, Arc::new(agents))
            .with_builtin(BuiltinPlatform::Ecs, Arc::new(ecs_services));
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
        let engine = Engine::new(
            self.deployment.state(),
            self.deployment.work(),
            runners,
            self.deployment.clock.clone(),
        )
        .with_artifacts(self.deployment.artifacts.clone());
        let mut response = SqsBatchResponse::default();
        for message in event.records {
            if self.handle_message(&engine, &message).await == Disposition::Redeliver {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = message.message_id.clone().unwrap_or_default();
                response.batch_item_failures.push(failure);
            }
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

    async fn handle_message(&self, engine: &Engine, message: &SqsMessage) -> Disposition {
        let id = message.message_id.as_deref().unwrap_or_default();
        let body = message.body.as_deref().unwrap_or_default();
        let key = match WorkMessage::parse(body) {
            Ok(work) => work.instance,
            Err(e) => match self.task_stopped(id, body).await {
                Ok(Some(key)) => key,
                Ok(None) => return Disposition::Done,
                Err(Disposition::Redeliver) => return Disposition::Redeliver,
                Err(Disposition::Done) => {
                    // Nothing names an instance: retrying cannot help.
                    error!(message_id = %id, error = %e, "dropping a malformed work message");
                    return Disposition::Done;
                }
            },
        };
        // Every line logged for this message, down to the adapters' spans,
        // carries the instance it is about.
        let span = info_span!(
            "work",
            message_id = %id,
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

/// The local runner, with each job's timeout cut to what is left of the
/// invocation minus a margin, so a job never outlives the function and its
/// result is always recorded.
struct BoundedRunner {
    inner: LocalRunner,
    deadline: Option<Instant>,
    margin: Duration,
}

impl BoundedRunner {
    /// The job with its timeout cut to what is left of the invocation;
    /// refused when too little is left to start it.
    fn bounded(&self, job: &JobRecord) -> vergence_model::Result<JobRecord> {
        let mut bounded = job.clone();
        let Some(deadline) = self.deadline else {
            return Ok(bounded);
        };
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(self.margin);
        if left < MIN_JOB_TIME {
            return Err(vergence_model::Error::Runner {
                runner: "local".into(),
                message: "too little time left in this invocation to start the job".into(),
            });
        }
        let left = jiff::SignedDuration::try_from(left).unwrap_or(jiff::SignedDuration::MAX);
        if left < bounded.spec.timeout {
            bounded.spec.timeout = left;
        }
        Ok(bounded)
    }
}

#[async_trait]
impl Runner for BoundedRunner {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        self.inner.dispatch(&self.bounded(job)?).await
    }

    /// The result comes back to the step, which records it with its next
    /// decision instead of stepping the instance again through the queue.
    async fn start(&self, job: &JobRecord) -> vergence_model::Result<Started> {
        self.inner.start(&self.bounded(job)?).await
    }
}
