//! Making sure the Cloud Run job a run needs exists and runs what its
//! template says, without holding a step for long.
//!
//! A job is looked up (GET) the first time this process needs it; a missing
//! one is created, one created meanwhile by another worker (ALREADY_EXISTS)
//! is read back, and one whose template differs (edited by hand) is put
//! back with an update. Jobs found right are remembered for the life of the
//! process, so later runs go straight to RunJob.
//!
//! Creating or updating a job is a long-running operation, and a run needs
//! the job settled. Dispatch looks at the operation a few times
//! ([`CloudRunSettings::settle_polls`], about five seconds by default: a
//! Cloud Run job usually settles in one or two). If it has not settled by
//! then, dispatch does not wait any longer: it returns the Cloud Run job's
//! name as the handle, and a later poll starts the run once the job is
//! ready ([`Readiness::Settling`]). A job that fails to become ready is
//! the job's failure, with the platform's message.

use std::collections::HashSet;
use std::sync::Mutex;

use google_cloud_gax::error::rpc::Code;
use google_cloud_longrunning::model::Operation;
use google_cloud_run_v2::model::Job;
use google_cloud_run_v2::model::condition::State;
use tracing::{info, warn};

use crate::CloudRunSettings;
use crate::clients::CloudRunClients;
use crate::error::CloudRunError;
use crate::template::JobTemplate;

/// Whether a Cloud Run job can be run now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Readiness {
    Ready,
    /// Created or changed, not settled yet.
    Settling,
    /// It will not become ready: why.
    Failed(String),
}

/// The Cloud Run jobs this process has found ready with the right
/// template, by full name.
#[derive(Debug, Default)]
pub(crate) struct KnownJobs(Mutex<HashSet<String>>);

impl KnownJobs {
    fn contains(&self, name: &str) -> bool {
        self.lock().contains(name)
    }

    fn insert(&self, name: &str) {
        self.lock().insert(name.to_owned());
    }

    /// Forgets a job that turned out to be gone (deleted by hand).
    pub(crate) fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Ensures the Cloud Run job `name` exists with `template`; see the module
/// documentation.
pub(crate) async fn ensure(
    clients: &CloudRunClients,
    settings: &CloudRunSettings,
    known: &KnownJobs,
    name: &str,
    template: &JobTemplate,
) -> Result<Readiness, CloudRunError> {
    if known.contains(name) {
        return Ok(Readiness::Ready);
    }
    let readiness = match get(clients, name).await {
        Ok(existing) => reconcile(clients, settings, name, template, &existing).await?,
        Err(e) if e.is_not_found() => create(clients, settings, name, template).await?,
        Err(e) => return Err(e),
    };
    if readiness == Readiness::Ready {
        known.insert(name);
    }
    Ok(readiness)
}

async fn get(clients: &CloudRunClients, name: &str) -> Result<Job, CloudRunError> {
    clients
        .jobs
        .get_job()
        .set_name(name)
        .send()
        .await
        .map_err(CloudRunError::api("getting Cloud Run job", name))
}

async fn create(
    clients: &CloudRunClients,
    settings: &CloudRunSettings,
    name: &str,
    template: &JobTemplate,
) -> Result<Readiness, CloudRunError> {
    let (parent, id) = name.rsplit_once("/jobs/").unwrap_or((name, name));
    info!(cloud_run_job = %name, image = %template.image, "creating the Cloud Run job");
    let created = clients
        .jobs
        .create_job()
        .set_parent(parent)
        .set_job_id(id)
        .set_job(template.to_job())
        .send()
        .await
        .map_err(CloudRunError::api("creating Cloud Run job", name));
    match created {
        Ok(operation) => settle(clients, settings, name, operation).await,
        // Another worker created it between our look and our create.
        Err(e) if e.code() == Some(Code::AlreadyExists) => {
            let existing = get(clients, name).await?;
            reconcile(clients, settings, name, template, &existing).await
        }
        Err(e) => Err(e),
    }
}

/// An existing job: put back if its template was changed, else waited for
/// if it is still settling.
async fn reconcile(
    clients: &CloudRunClients,
    settings: &CloudRunSettings,
    name: &str,
    template: &JobTemplate,
    existing: &Job,
) -> Result<Readiness, CloudRunError> {
    if !template.matches(existing) {
        warn!(cloud_run_job = %name, "the Cloud Run job differs from what Vergence made (edited by hand?); putting it back");
        let operation = clients
            .jobs
            .update_job()
            .set_job(template.to_job().set_name(name))
            .send()
            .await
            .map_err(CloudRunError::api("updating Cloud Run job", name))?;
        return settle(clients, settings, name, operation).await;
    }
    let mut job = existing.clone();
    for look in 0..=settings.settle_polls {
        match readiness_of(&job) {
            Readiness::Settling if look < settings.settle_polls => {
                tokio::time::sleep(settings.settle_interval).await;
                job = get(clients, name).await?;
            }
            readiness => return Ok(readiness),
        }
    }
    Ok(Readiness::Settling)
}

/// Follows a create or update operation for a few looks.
async fn settle(
    clients: &CloudRunClients,
    settings: &CloudRunSettings,
    name: &str,
    mut operation: Operation,
) -> Result<Readiness, CloudRunError> {
    for look in 0..=settings.settle_polls {
        if operation.done {
            return Ok(match operation.error() {
                Some(status) => Readiness::Failed(format!(
                    "Cloud Run job {name} did not become ready: {}",
                    status.message
                )),
                None => Readiness::Ready,
            });
        }
        if look == settings.settle_polls {
            break;
        }
        tokio::time::sleep(settings.settle_interval).await;
        operation = clients
            .jobs
            .get_operation()
            .set_name(&operation.name)
            .send()
            .await
            .map_err(CloudRunError::api("reading operation", &operation.name))?;
    }
    info!(cloud_run_job = %name, "the Cloud Run job has not settled yet; a later poll starts the run");
    Ok(Readiness::Settling)
}

/// Whether a job read back has settled: its terminal condition says so.
pub(crate) fn readiness_of(job: &Job) -> Readiness {
    let Some(condition) = &job.terminal_condition else {
        return Readiness::Settling;
    };
    let settled = job.observed_generation >= job.generation && !job.reconciling;
    match &condition.state {
        State::ConditionSucceeded if settled => Readiness::Ready,
        State::ConditionFailed => Readiness::Failed(format!(
            "Cloud Run job {} is not ready: {}",
            job.name, condition.message
        )),
        _ => Readiness::Settling,
    }
}
