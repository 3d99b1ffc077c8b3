//! Executions: starting one for a Vergence job, finding the one a job
//! already started, reading it, and cancelling it.
//!
//! **Idempotency.** RunJob takes no request id, so a second RunJob for the
//! same Vergence job would start a second execution. Every run carries the
//! job's id in its environment (`VERGENCE_JOB_ID`, one of the context
//! variables every job gets), and Cloud Run records a run's overrides in the
//! execution's task template. Before running, the job's executions are
//! listed newest first and one carrying this id is adopted instead. The
//! search stops at executions created before the Vergence job was recorded
//! (less a margin for clock skew) and after
//! [`CloudRunSettings::adopt_pages`] pages, so it stays cheap on a Cloud Run
//! job with a long history. Two dispatches racing between the list and the
//! run could still both run; the engine's claim on a job before dispatch is
//! what keeps them apart.

use google_cloud_gax::error::rpc::Code;
use google_cloud_run_v2::model::run_job_request::Overrides;
use google_cloud_run_v2::model::run_job_request::overrides::ContainerOverride;
use google_cloud_run_v2::model::{EnvVar, Execution, Task};
use jiff::{SignedDuration, Timestamp};
use vergence_container::Launch;
use vergence_model::JobRecord;

use crate::CloudRunSettings;
use crate::clients::CloudRunClients;
use crate::error::CloudRunError;
use crate::template::CONTAINER;

/// The variable that marks an execution as a Vergence job's.
pub(crate) const JOB_ID_VAR: &str = "VERGENCE_JOB_ID";

/// Executions created this long before the Vergence job was recorded are
/// still searched: the clocks of Cloud Run and the worker may disagree.
const CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(5);

/// Executions listed per page while searching.
const PAGE_SIZE: i32 = 50;

/// The execution of `cloud_run_job` that carries `job`'s id, if one was
/// started (see the module documentation).
pub(crate) async fn find(
    clients: &CloudRunClients,
    settings: &CloudRunSettings,
    cloud_run_job: &str,
    job: &JobRecord,
) -> Result<Option<Execution>, CloudRunError> {
    let since = job
        .created_at
        .checked_sub(CLOCK_SKEW)
        .unwrap_or(job.created_at);
    let mut token = String::new();
    for _ in 0..settings.adopt_pages {
        let listed = clients
            .executions
            .list_executions()
            .set_parent(cloud_run_job)
            .set_page_size(PAGE_SIZE)
            .set_page_token(&token)
            .send()
            .await
            .map_err(CloudRunError::api("listing executions of", cloud_run_job));
        let page = match listed {
            Ok(page) => page,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        for execution in page.executions {
            if carries(&execution, job.id.as_str()) {
                return Ok(Some(execution));
            }
            if created_at(&execution).is_some_and(|at| at < since) {
                return Ok(None);
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(None);
        }
        token = page.next_page_token;
    }
    Ok(None)
}

/// Whether the execution's template carries the job id.
fn carries(execution: &Execution, job_id: &str) -> bool {
    execution.template.iter().any(|template| {
        template.containers.iter().any(|container| {
            container
                .env
                .iter()
                .any(|var| var.name == JOB_ID_VAR && var.value().is_some_and(|v| v == job_id))
        })
    })
}

/// Runs `cloud_run_job` once for `launch`: the program's arguments and
/// every plain variable as overrides, one task, `timeout`. Returns the
/// execution as the run's operation first describes it, without waiting.
pub(crate) async fn run(
    clients: &CloudRunClients,
    cloud_run_job: &str,
    launch: &Launch,
    timeout: SignedDuration,
) -> Result<Execution, CloudRunError> {
    let env = launch
        .env
        .iter()
        .map(|(name, value)| EnvVar::new().set_name(name).set_value(value));
    let mut container = ContainerOverride::new().set_name(CONTAINER).set_env(env);
    // Without a program the image's entrypoint and arguments run as built;
    // with one, its arguments replace the template's (none: cleared).
    if let Some(args) = launch.command.get(1..) {
        container = container
            .set_args(args.iter().cloned())
            .set_clear_args(args.is_empty());
    }
    let overrides = Overrides::new()
        .set_container_overrides([container])
        .set_task_count(1)
        .set_timeout(google_cloud_wkt::Duration::clamp(
            timeout.as_secs(),
            timeout.subsec_nanos(),
        ));
    let operation = clients
        .jobs
        .run_job()
        .set_name(cloud_run_job)
        .set_overrides(overrides)
        .send()
        .await
        .map_err(CloudRunError::api("running Cloud Run job", cloud_run_job))?;
    if let Some(status) = operation.error() {
        return Err(CloudRunError::Operation {
            operation: "running Cloud Run job",
            resource: cloud_run_job.to_owned(),
            message: status.message.clone(),
        });
    }
    let no_execution = |detail: String| CloudRunError::NoExecution {
        job: cloud_run_job.to_owned(),
        detail,
    };
    let metadata = operation
        .metadata
        .ok_or_else(|| no_execution(format!("operation {} has no metadata", operation.name)))?;
    metadata
        .to_msg::<Execution>()
        .map_err(|e| no_execution(e.to_string()))
}

/// The execution `name`; `None` when it no longer exists.
pub(crate) async fn get(
    clients: &CloudRunClients,
    name: &str,
) -> Result<Option<Execution>, CloudRunError> {
    let got = clients
        .executions
        .get_execution()
        .set_name(name)
        .send()
        .await
        .map_err(CloudRunError::api("reading execution", name));
    match got {
        Ok(execution) => Ok(Some(execution)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The execution's first task (Vergence runs one), if it has one.
pub(crate) async fn first_task(
    clients: &CloudRunClients,
    execution: &str,
) -> Result<Option<Task>, CloudRunError> {
    let listed = clients
        .tasks
        .list_tasks()
        .set_parent(execution)
        .set_page_size(1)
        .send()
        .await
        .map_err(CloudRunError::api("listing tasks of", execution))?;
    Ok(listed.tasks.into_iter().min_by_key(|t| t.index))
}

/// Asks Cloud Run to cancel the execution. An execution that already
/// ended, or no longer exists, is fine.
pub(crate) async fn cancel(clients: &CloudRunClients, name: &str) -> Result<(), CloudRunError> {
    let cancelled = clients
        .executions
        .cancel_execution()
        .set_name(name)
        .send()
        .await
        .map_err(CloudRunError::api("cancelling execution", name));
    match cancelled {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.code(), Some(Code::NotFound | Code::FailedPrecondition)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// When the execution was created, as Cloud Run says.
pub(crate) fn created_at(execution: &Execution) -> Option<Timestamp> {
    execution.create_time.as_ref().and_then(timestamp)
}

/// A protobuf timestamp as a `jiff` one.
pub(crate) fn timestamp(at: &google_cloud_wkt::Timestamp) -> Option<Timestamp> {
    Timestamp::new(at.seconds(), at.nanos()).ok()
}
