//! [`EcsServices`]: the first-class ECS runtime. Its apply and fetch are a
//! few ECS API calls made in-process by whoever runs the engine (the
//! worker function, `vergence up`/`serve`), with no container:
//!
//! - apply registers the service's task definition tagged with the
//!   instance's service id, version and content digest (reusing the newest
//!   revision when it already is exactly that, so a retried apply registers
//!   nothing new), then creates the ECS service or updates it to that
//!   revision with the settings file's values;
//! - fetch reads the service (DescribeServices) and the task definition of
//!   its PRIMARY deployment with its tags, and prints the structured fetch
//!   JSON the engine interprets for every runtime: the version the tags
//!   name, the task counts, and the deployment's rollout state.
//!
//! A job's result is reported at once through the [`JobResultSink`] (the
//! same path a local process's result takes); `poll` carries the job out
//! again, which both operations allow, for a result that was lost.

mod apply;
mod fetch;
mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use aws_sdk_ecs::types::{Service, ServiceField, Tag};
use jiff::Timestamp;
use serde_json::{Map, Value};
use tracing::{instrument, warn};
use vergence_model::ports::{JobProgress, JobResultSink, Runner};
use vergence_model::{
    BuiltinJob, EcsService, JobHandle, JobRecord, JobResult, hashing::sha256_hex,
};

use crate::clients::EcsClients;
use crate::error::{EcsError, describe};

/// Applies and reads the ECS services of first-class ECS runtimes.
pub struct EcsServices {
    clients: EcsClients,
    /// Clients of regions other than `clients`' own, made on first use.
    regional: Mutex<HashMap<String, EcsClients>>,
    sink: Arc<dyn JobResultSink>,
}

impl std::fmt::Debug for EcsServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EcsServices")
            .field("region", &self.clients.region())
            .finish_non_exhaustive()
    }
}

impl EcsServices {
    /// Calls ECS through `clients` (whose region is the one of runtimes
    /// that name none) and reports results to `sink`.
    pub fn new(clients: EcsClients, sink: Arc<dyn JobResultSink>) -> Self {
        Self {
            clients,
            regional: Mutex::new(HashMap::new()),
            sink,
        }
    }

    /// Carries out one job of an ECS runtime; what ECS refused is the
    /// result's exit 1 and stderr, as a program's failure would be.
    #[instrument(name = "ecs.service", skip_all, fields(job = %job.id, kind = %job.kind))]
    pub async fn carry_out(&self, job: &JobRecord) -> JobResult {
        let started = Instant::now();
        let done = match &job.spec.builtin {
            Some(BuiltinJob::EcsApply(service)) => self.apply(service, job).await,
            Some(BuiltinJob::EcsFetch(service)) => self.fetch(service).await,
            _ => Err(EcsError::NotAnEcsServiceJob {
                job: job.id.to_string(),
            }),
        };
        let done = done.map_err(|e| {
            warn!(error = %e, "the ECS runtime's job failed");
            e.to_string()
        });
        JobResult::of_call(done, started.elapsed(), Timestamp::now())
    }

    fn clients_for(&self, service: &EcsService) -> EcsClients {
        match &service.region {
            Some(region) if self.clients.region().as_deref() != Some(region.as_str()) => {
                let mut regional = self.regional.lock().unwrap_or_else(PoisonError::into_inner);
                regional
                    .entry(region.clone())
                    .or_insert_with(|| self.clients.in_region(region))
                    .clone()
            }
            _ => self.clients.clone(),
        }
    }
}

#[async_trait]
impl Runner for EcsServices {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        let result = self.carry_out(job).await;
        // A result that cannot be recorded now is found again by `poll`.
        if let Err(e) = self.sink.job_finished(job, result).await {
            warn!(job = %job.id, error = %e, "recording the ECS runtime's result failed; a later check carries the job out again");
        }
        Ok(None)
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(JobProgress::Finished(self.carry_out(job).await))
    }
}

/// The instance's ECS service as ECS describes it; `None` when there is
/// none, or only a deleted one (INACTIVE).
async fn describe_service(
    clients: &EcsClients,
    service: &EcsService,
) -> Result<Option<Service>, EcsError> {
    let described = clients
        .ecs
        .describe_services()
        .cluster(&service.cluster)
        .services(&service.service_name)
        .include(ServiceField::Tags)
        .send()
        .await
        .map_err(|e| EcsError::DescribeServices {
            cluster: service.cluster.clone(),
            service: service.service_name.clone(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    Ok(described
        .services()
        .iter()
        .find(|s| s.status() != Some("INACTIVE"))
        .cloned())
}

/// One of the service's rendered requests as a JSON object.
fn request(
    service: &EcsService,
    what: &'static str,
    text: &str,
) -> Result<Map<String, Value>, EcsError> {
    serde_json::from_str(text).map_err(|source| EcsError::InvalidServiceRequest {
        service: service.service_name.clone(),
        what,
        source,
    })
}

/// The digest tagged on the task definition: of the request as rendered,
/// before Vergence's tags are added.
fn digest(service: &EcsService) -> String {
    sha256_hex(service.task_definition.as_bytes())
}

/// Adds tags to an ECS resource (a service, a task definition).
pub(super) async fn tag_resource(
    clients: &EcsClients,
    arn: &str,
    pairs: &[(&str, &str)],
) -> Result<(), EcsError> {
    let tags = pairs
        .iter()
        .map(|(key, value)| Tag::builder().key(*key).value(*value).build())
        .collect();
    clients
        .ecs
        .tag_resource()
        .resource_arn(arn)
        .set_tags(Some(tags))
        .send()
        .await
        .map_err(|e| EcsError::TagResource {
            resource: arn.to_owned(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    Ok(())
}
