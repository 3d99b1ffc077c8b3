//! [`EcsRunner`]: jobs of `RunnerSpec::Ecs` runtimes as Fargate tasks in
//! the user's cluster. Dispatch registers (once) the task definition of the
//! runtime's image and settings and starts one task per job; poll reads how
//! the task ended, its output and its files; stop stops it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_ecs::types::{DesiredStatus, Task};
use jiff::{SignedDuration, Timestamp};
use tracing::{Span, info, instrument};
use vergence_container::{Ended, Launch};
use vergence_model::ports::{ArtifactStore, JobProgress, Runner};
use vergence_model::{EcsRunnerSpec, JobHandle, JobRecord, JobResult, JobState, RunnerSpec};

use crate::clients::EcsClients;
use crate::error::{EcsError, describe};
use crate::registry::TaskDefinitions;
use crate::task_definition::TaskDefinitionSpec;
use crate::{logs, run_task, task};

/// How the runner treats every job.
#[derive(Clone, Debug)]
pub struct EcsSettings {
    /// Added to a job's timeout for the life of its artifact URLs: a task
    /// may wait for capacity and pull its image before the job starts.
    pub url_margin: SignedDuration,
    /// Most bytes of a task's log stream read as its stdout.
    pub log_read_limit: usize,
}

impl Default for EcsSettings {
    fn default() -> Self {
        Self {
            url_margin: SignedDuration::from_mins(30),
            log_read_limit: JobResult::MAX_STDOUT,
        }
    }
}

/// Runs jobs as ECS tasks on Fargate.
pub struct EcsRunner {
    clients: EcsClients,
    /// Clients of regions other than `clients`' own, made on first use.
    regional: Mutex<HashMap<String, EcsClients>>,
    artifacts: Arc<dyn ArtifactStore>,
    settings: EcsSettings,
    task_definitions: TaskDefinitions,
}

impl std::fmt::Debug for EcsRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EcsRunner")
            .field("region", &self.clients.region())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Where a job's task runs: its runner settings, and the clients and name
/// of its region.
struct Placement<'a> {
    spec: &'a EcsRunnerSpec,
    clients: EcsClients,
    region: String,
}

impl EcsRunner {
    /// A runner calling AWS through `clients` (whose region is the one of
    /// runtimes that name none), keeping job files in `artifacts`.
    pub fn new(
        clients: EcsClients,
        artifacts: Arc<dyn ArtifactStore>,
        settings: EcsSettings,
    ) -> Self {
        Self {
            clients,
            regional: Mutex::new(HashMap::new()),
            artifacts,
            settings,
            task_definitions: TaskDefinitions::default(),
        }
    }

    fn placement<'a>(&self, job: &'a JobRecord) -> Result<Placement<'a>, EcsError> {
        let RunnerSpec::Ecs(spec) = &job.spec.runner else {
            return Err(EcsError::NotAnEcsJob {
                job: job.id.to_string(),
                runner: job.spec.runner.name(),
            });
        };
        let own = self.clients.region();
        let (clients, region) = match (&spec.region, own) {
            (Some(wanted), Some(own)) if *wanted == own => (self.clients.clone(), own),
            (Some(wanted), _) => (self.clients_in(wanted), wanted.clone()),
            (None, Some(own)) => (self.clients.clone(), own),
            (None, None) => {
                return Err(EcsError::NoRegion {
                    cluster: spec.cluster.clone(),
                });
            }
        };
        Ok(Placement {
            spec,
            clients,
            region,
        })
    }

    fn clients_in(&self, region: &str) -> EcsClients {
        let mut regional = self.regional.lock().unwrap_or_else(PoisonError::into_inner);
        regional
            .entry(region.to_owned())
            .or_insert_with(|| self.clients.in_region(region))
            .clone()
    }

    /// Starts the job's task, or finds the one already started for it.
    #[instrument(name = "ecs.dispatch", skip_all, fields(job = %job.id, cluster = cluster(job), task = tracing::field::Empty))]
    async fn start(&self, job: &JobRecord) -> Result<JobHandle, EcsError> {
        let placement = self.placement(job)?;
        run_task::check_job_id(job)?;
        // A redelivered dispatch, or a racing worker, finds the task the
        // first one started: clientToken makes RunTask idempotent on ECS
        // for a while, but the task's `startedBy` is the lasting record.
        if let Some(arn) = self.find_task(&placement, job).await? {
            Span::current().record("task", arn.as_str());
            info!(task = %arn, "the job's task was already started; adopting it");
            return Ok(JobHandle(arn));
        }
        let ttl = job.spec.timeout.saturating_add(self.settings.url_margin);
        let launch = Launch::prepare(job, self.artifacts.as_ref(), ttl)
            .await
            .map_err(|message| EcsError::Launch { message })?;
        let definition = TaskDefinitionSpec::new(
            placement.spec,
            &placement.region,
            &launch.image,
            &launch.secrets,
        )?
        .running(&launch.command);
        let family = definition.family();
        let task_definition = self
            .task_definitions
            .ensure(&placement.clients, &definition)
            .await?;
        let overrides = run_task::overrides(&launch)?;
        let request = run_task::request(
            placement.clients.ecs.run_task(),
            placement.spec,
            job,
            &task_definition,
            overrides,
        )?;
        let arn = run_task::started_task(request.send().await, &placement.spec.cluster, &family)?;
        Span::current().record("task", arn.as_str());
        info!(task = %arn, task_definition = %task_definition, "started the job's task");
        Ok(JobHandle(arn))
    }

    /// The task started for `job` (its `startedBy`), running or stopped.
    /// ListTasks lists running tasks unless asked for stopped ones, which
    /// ECS keeps visible for about an hour.
    async fn find_task(
        &self,
        placement: &Placement<'_>,
        job: &JobRecord,
    ) -> Result<Option<String>, EcsError> {
        for status in [DesiredStatus::Running, DesiredStatus::Stopped] {
            let listed = placement
                .clients
                .ecs
                .list_tasks()
                .cluster(&placement.spec.cluster)
                .started_by(job.id.as_str())
                .desired_status(status)
                .send()
                .await
                .map_err(|e| EcsError::ListTasks {
                    cluster: placement.spec.cluster.clone(),
                    job: job.id.to_string(),
                    detail: describe(&e),
                    source: Box::new(e),
                })?;
            if let Some(arn) = listed.task_arns().first() {
                return Ok(Some(arn.clone()));
            }
        }
        Ok(None)
    }

    /// Where the job's task is now.
    #[instrument(name = "ecs.poll", skip_all, fields(job = %job.id, cluster = cluster(job), task = tracing::field::Empty))]
    async fn progress(&self, job: &JobRecord) -> Result<JobProgress, EcsError> {
        let placement = self.placement(job)?;
        let Some(arn) = self.task_of(&placement, job).await? else {
            return Ok(JobProgress::Unknown);
        };
        Span::current().record("task", arn.as_str());
        let Some(task) = self.describe_task(&placement, &arn).await? else {
            return Ok(JobProgress::Unknown);
        };
        let Some(ended) = task::ended(&task) else {
            return Ok(JobProgress::Running);
        };
        let result = self.result(&placement, job, &task, &arn, ended).await?;
        info!(outcome = %result.outcome, exit_code = ?result.exit_code, "the job's task stopped");
        Ok(JobProgress::Finished(result))
    }

    /// The task's ARN: the handle recorded at dispatch, or the task found by
    /// its `startedBy` when the handle was never recorded.
    async fn task_of(
        &self,
        placement: &Placement<'_>,
        job: &JobRecord,
    ) -> Result<Option<String>, EcsError> {
        match &job.state {
            JobState::Dispatched {
                handle: Some(handle),
                ..
            } => Ok(Some(handle.as_str().to_owned())),
            _ => self.find_task(placement, job).await,
        }
    }

    /// The task as ECS describes it; `None` when ECS no longer knows it
    /// (`MISSING`: stopped long ago, or never started).
    async fn describe_task(
        &self,
        placement: &Placement<'_>,
        arn: &str,
    ) -> Result<Option<Task>, EcsError> {
        let described = placement
            .clients
            .ecs
            .describe_tasks()
            .cluster(&placement.spec.cluster)
            .tasks(arn)
            .send()
            .await
            .map_err(|e| EcsError::DescribeTasks {
                cluster: placement.spec.cluster.clone(),
                task: arn.to_owned(),
                detail: describe(&e),
                source: Box::new(e),
            })?;
        Ok(described
            .tasks()
            .iter()
            .find(|t| t.task_arn() == Some(arn))
            .cloned())
    }

    /// The result of a stopped task: the streams the wrapper uploaded, or
    /// else the task's log stream; the declared outputs it uploaded.
    async fn result(
        &self,
        placement: &Placement<'_>,
        job: &JobRecord,
        task: &Task,
        arn: &str,
        ended: Ended,
    ) -> Result<JobResult, EcsError> {
        let artifacts = |source| EcsError::Artifacts {
            job: job.id.to_string(),
            source,
        };
        let captured = vergence_container::captured_streams(job, self.artifacts.as_ref())
            .await
            .map_err(artifacts)?;
        let output = match captured {
            Some(streams) => streams,
            None => {
                logs::read(
                    &placement.clients.logs,
                    &placement.spec.log_group,
                    &logs::stream_name(task::task_id(arn)),
                    self.settings.log_read_limit,
                )
                .await?
            }
        };
        let outputs = vergence_container::outputs(job, self.artifacts.as_ref())
            .await
            .map_err(artifacts)?;
        let finished = task::stopped_at(task).unwrap_or_else(Timestamp::now);
        Ok(vergence_container::result(
            ended,
            output,
            outputs,
            task::started_at(task),
            finished,
        ))
    }

    /// Stops the job's task; a task already stopped, or unknown, is fine.
    #[instrument(name = "ecs.stop", skip_all, fields(job = %job.id, cluster = cluster(job), task = tracing::field::Empty))]
    async fn halt(&self, job: &JobRecord, reason: &str) -> Result<(), EcsError> {
        let placement = self.placement(job)?;
        let Some(arn) = self.task_of(&placement, job).await? else {
            return Ok(());
        };
        Span::current().record("task", arn.as_str());
        match placement
            .clients
            .ecs
            .stop_task()
            .cluster(&placement.spec.cluster)
            .task(&arn)
            .reason(task::stop_reason(reason))
            .send()
            .await
        {
            Ok(_) => {
                info!(reason, "stopped the job's task");
                Ok(())
            }
            Err(e) if is_task_not_found(&e) => Ok(()),
            Err(e) => Err(EcsError::StopTask {
                cluster: placement.spec.cluster.clone(),
                task: arn,
                detail: describe(&e),
                source: Box::new(e),
            }),
        }
    }
}

/// ECS's answer to StopTask of a task it does not know (long gone).
fn is_task_not_found(
    error: &aws_sdk_ecs::error::SdkError<aws_sdk_ecs::operation::stop_task::StopTaskError>,
) -> bool {
    error.as_service_error().is_some_and(|e| {
        e.is_invalid_parameter_exception()
            && aws_sdk_ecs::error::ProvideErrorMetadata::message(e)
                .is_some_and(|m| m.contains("not found"))
    })
}

/// The cluster of an ECS job, for spans.
fn cluster(job: &JobRecord) -> &str {
    match &job.spec.runner {
        RunnerSpec::Ecs(spec) => &spec.cluster,
        _ => "",
    }
}

#[async_trait]
impl Runner for EcsRunner {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        Ok(Some(self.start(job).await?))
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(self.progress(job).await?)
    }

    async fn stop(&self, job: &JobRecord, reason: &str) -> vergence_model::Result<()> {
        Ok(self.halt(job, reason).await?)
    }
}
