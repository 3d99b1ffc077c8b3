//! [`CloudRunRunner`]: the [`Runner`] port over Cloud Run jobs.
//!
//! A job's handle is its execution's full name. While the Cloud Run job it
//! needs is still settling (see `jobs.rs`), the handle is the Cloud Run
//! job's name instead, and a later poll starts the run. A job dispatched
//! whose handle was never recorded (the worker died between RunJob and
//! recording it) is found by the id its execution carries.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use google_cloud_run_v2::model::Execution;
use jiff::{SignedDuration, Timestamp};
use tracing::{Span, debug, info, instrument};
use vergence_container::{self as container, Launch};
use vergence_model::ports::{ArtifactStore, JobProgress, Runner};
use vergence_model::{CloudRunRunnerSpec, JobHandle, JobRecord, JobResult, JobState, RunnerSpec};

use crate::CloudRunSettings;
use crate::clients::CloudRunClients;
use crate::error::CloudRunError;
use crate::executions::{self, timestamp};
use crate::jobs::{self, KnownJobs, Readiness};
use crate::logs::ExecutionLogs;
use crate::outcome;
use crate::template::JobTemplate;

/// Runs jobs whose spec says [`RunnerSpec::CloudRun`] as executions of
/// Cloud Run jobs.
pub struct CloudRunRunner {
    clients: CloudRunClients,
    artifacts: Arc<dyn ArtifactStore>,
    settings: CloudRunSettings,
    known: KnownJobs,
}

impl fmt::Debug for CloudRunRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudRunRunner")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Where a dispatched job is, as its handle says.
enum Started {
    /// An execution, by full name.
    Execution(String),
    /// Not started yet: the Cloud Run job it waits for, by full name.
    Waiting(String),
}

impl Started {
    /// What the handle recorded for a dispatched job says, if it has one.
    fn recorded(job: &JobRecord) -> Option<Self> {
        match &job.state {
            JobState::Dispatched {
                handle: Some(handle),
                ..
            } => Some(Self::of(handle)),
            _ => None,
        }
    }

    fn of(handle: &JobHandle) -> Self {
        let name = handle.as_str().to_owned();
        if name.contains("/executions/") {
            Started::Execution(name)
        } else {
            Started::Waiting(name)
        }
    }

    fn handle(self) -> JobHandle {
        match self {
            Started::Execution(name) | Started::Waiting(name) => JobHandle(name),
        }
    }
}

impl CloudRunRunner {
    /// A runner driving Cloud Run through `clients`, handing files to jobs
    /// through URLs of `artifacts`.
    /// The clients it calls Cloud Run with (shared with the first-class
    /// Cloud Run runtime's [`crate::CloudRunServices`]).
    pub fn clients(&self) -> &CloudRunClients {
        &self.clients
    }

    pub fn new(
        clients: CloudRunClients,
        artifacts: Arc<dyn ArtifactStore>,
        settings: CloudRunSettings,
    ) -> Self {
        Self {
            clients,
            artifacts,
            settings,
            known: KnownJobs::default(),
        }
    }

    /// Prepares the launch and starts it (or finds it started).
    async fn start(&self, job: &JobRecord) -> Result<Started, CloudRunError> {
        let spec = cloud_run_spec(job)?;
        let ttl = job
            .spec
            .timeout
            .checked_add(self.settings.url_ttl)
            .unwrap_or(SignedDuration::MAX);
        let launch = Launch::prepare(job, self.artifacts.as_ref(), ttl)
            .await
            .map_err(CloudRunError::Launch)?;
        let template = JobTemplate::of(&launch.image, &launch.command, &launch.secrets, spec)?;
        let name = job_name(spec, &template.id());
        Span::current().record("cloud_run_job", name.as_str());
        // A second pass only when the run found the Cloud Run job gone
        // (deleted by hand since this process last saw it).
        for pass in 0..2 {
            match jobs::ensure(&self.clients, &self.settings, &self.known, &name, &template).await?
            {
                Readiness::Ready => {}
                Readiness::Settling => return Ok(Started::Waiting(name)),
                Readiness::Failed(message) => return Err(CloudRunError::Launch(message)),
            }
            if let Some(execution) =
                executions::find(&self.clients, &self.settings, &name, job).await?
            {
                info!(execution = %execution.name, "the job already has an execution; adopting it");
                return Ok(Started::Execution(execution.name));
            }
            match executions::run(&self.clients, &name, &launch, job.spec.timeout).await {
                Ok(execution) => {
                    info!(execution = %execution.name, "started");
                    return Ok(Started::Execution(execution.name));
                }
                Err(e) if e.is_not_found() && pass == 0 => self.known.forget(&name),
                Err(e) => return Err(e),
            }
        }
        Err(CloudRunError::Launch(format!(
            "Cloud Run job {name} disappeared while it was being run"
        )))
    }

    /// Where a dispatched job is: its execution's progress, found by its
    /// handle (or by its id when it has none).
    async fn progress_of(&self, job: &JobRecord) -> Result<JobProgress, CloudRunError> {
        let execution = match Started::recorded(job) {
            Some(Started::Execution(name)) => executions::get(&self.clients, &name).await?,
            Some(Started::Waiting(name)) => {
                match executions::find(&self.clients, &self.settings, &name, job).await? {
                    Some(execution) => Some(execution),
                    None => return self.start_waiting(job).await,
                }
            }
            None => self.find_unrecorded(job).await?,
        };
        let Some(execution) = execution else {
            return Ok(JobProgress::Unknown);
        };
        record_execution(&execution.name);
        self.progress(job, &execution).await
    }

    /// A job waiting for its Cloud Run job: started once that is ready.
    async fn start_waiting(&self, job: &JobRecord) -> Result<JobProgress, CloudRunError> {
        match self.start(job).await {
            Ok(_) => Ok(JobProgress::Running),
            Err(CloudRunError::Launch(message)) => Ok(JobProgress::Finished(
                JobResult::not_started(message, Timestamp::now()),
            )),
            Err(e) => Err(e),
        }
    }

    /// A dispatched job without a handle: its execution, if it has one.
    async fn find_unrecorded(&self, job: &JobRecord) -> Result<Option<Execution>, CloudRunError> {
        let spec = cloud_run_spec(job)?;
        let Some(image) = &job.spec.image else {
            return Ok(None);
        };
        let template = JobTemplate::of(image, &job.spec.cmd, &job.spec.secret_env, spec)?;
        let name = job_name(spec, &template.id());
        executions::find(&self.clients, &self.settings, &name, job).await
    }

    /// The progress of a job whose execution is `execution`.
    async fn progress(
        &self,
        job: &JobRecord,
        execution: &Execution,
    ) -> Result<JobProgress, CloudRunError> {
        let Some(finished_at) = execution.completion_time.as_ref().and_then(timestamp) else {
            return Ok(JobProgress::Running);
        };
        let captured = container::captured_streams(job, self.artifacts.as_ref())
            .await
            .map_err(CloudRunError::Artifacts)?;
        if captured.is_none() && self.logs_may_lag(job, finished_at) {
            debug!("the execution ended moments ago; its logs may still be on their way");
            return Ok(JobProgress::Running);
        }
        let task = if outcome::needs_task(execution) {
            executions::first_task(&self.clients, &execution.name).await?
        } else {
            None
        };
        let ended = outcome::ended(execution, task.as_ref());
        let logs = match captured {
            Some(logs) => logs,
            None => self.platform_logs(job, execution).await?,
        };
        let outputs = container::outputs(job, self.artifacts.as_ref())
            .await
            .map_err(CloudRunError::Artifacts)?;
        let started_at = execution
            .start_time
            .as_ref()
            .or(execution.create_time.as_ref())
            .and_then(timestamp);
        Ok(JobProgress::Finished(container::result(
            ended,
            logs,
            outputs,
            started_at,
            finished_at,
        )))
    }

    /// Cloud Logging can lag an execution's end by seconds: within
    /// [`CloudRunSettings::log_grace`] of it the job is still reported as
    /// running, unless its deadline is that close (the engine would then
    /// take a finished job for a stuck one).
    fn logs_may_lag(&self, job: &JobRecord, finished_at: Timestamp) -> bool {
        let now = Timestamp::now();
        let grace =
            SignedDuration::try_from(self.settings.log_grace).unwrap_or(SignedDuration::ZERO);
        now < finished_at.checked_add(grace).unwrap_or(finished_at) && now < job.deadline
    }

    async fn platform_logs(
        &self,
        job: &JobRecord,
        execution: &Execution,
    ) -> Result<container::PlatformLogs, CloudRunError> {
        let spec = cloud_run_spec(job)?;
        let logs = ExecutionLogs {
            project: &spec.project,
            region: &spec.region,
            job: id_of(&execution.job),
            execution: id_of(&execution.name),
            since: execution
                .create_time
                .map(String::from)
                .unwrap_or_else(|| job.created_at.to_string()),
        };
        logs.read(&self.clients, &self.settings).await
    }
}

#[async_trait]
impl Runner for CloudRunRunner {
    #[instrument(skip_all, fields(job = %job.id, project, region, cloud_run_job, execution))]
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        record_location(job);
        let started = self.start(job).await?;
        if let Started::Execution(name) = &started {
            record_execution(name);
        }
        Ok(Some(started.handle()))
    }

    #[instrument(skip_all, fields(job = %job.id, project, region, cloud_run_job, execution))]
    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        record_location(job);
        Ok(self.progress_of(job).await?)
    }

    #[instrument(skip_all, fields(job = %job.id, project, region, cloud_run_job, execution))]
    async fn stop(&self, job: &JobRecord, reason: &str) -> vergence_model::Result<()> {
        record_location(job);
        let execution = match Started::recorded(job) {
            Some(Started::Execution(name)) => Some(name),
            Some(Started::Waiting(name)) => {
                executions::find(&self.clients, &self.settings, &name, job)
                    .await?
                    .map(|e| e.name)
            }
            None => self.find_unrecorded(job).await?.map(|e| e.name),
        };
        let Some(execution) = execution else {
            return Ok(());
        };
        record_execution(&execution);
        info!(%reason, "cancelling the execution");
        Ok(executions::cancel(&self.clients, &execution).await?)
    }
}

fn cloud_run_spec(job: &JobRecord) -> Result<&CloudRunRunnerSpec, CloudRunError> {
    match &job.spec.runner {
        RunnerSpec::CloudRun(spec) => Ok(spec),
        other => Err(CloudRunError::WrongRunner {
            job: job.id.to_string(),
            runner: other.name(),
        }),
    }
}

fn record_location(job: &JobRecord) {
    if let RunnerSpec::CloudRun(spec) = &job.spec.runner {
        let span = Span::current();
        span.record("project", spec.project.as_str());
        span.record("region", spec.region.as_str());
    }
}

/// Names the execution (and its Cloud Run job) in the current span.
fn record_execution(name: &str) {
    let span = Span::current();
    span.record("execution", name);
    if let Some((cloud_run_job, _)) = name.split_once("/executions/") {
        span.record("cloud_run_job", cloud_run_job);
    }
}

/// The full name of the Cloud Run job `id` in the runner's project and region.
fn job_name(spec: &CloudRunRunnerSpec, id: &str) -> String {
    format!(
        "projects/{}/locations/{}/jobs/{id}",
        spec.project, spec.region
    )
}

/// The last segment of a resource name.
fn id_of(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}
