//! The ECS runtime's apply: register the task definition (once per
//! version and content), then create the ECS service or update it to it.

use aws_sdk_ecs::types::{
    ContainerDefinition, DeploymentRolloutState, Service, TaskDefinitionField, TaskDefinitionStatus,
};
use serde_json::{Map, Value, json};
use tracing::info;
use vergence_model::ecs::tags;
use vergence_model::{EcsService, JobRecord};

use super::wire::RequestBody;
use super::{EcsServices, describe_service, digest, request, tag_resource};
use crate::clients::EcsClients;
use crate::error::{EcsError, describe};

/// CreateService members UpdateService does not take: fixed once the
/// service exists.
const CREATE_ONLY: [&str; 5] = [
    "serviceName",
    "launchType",
    "role",
    "schedulingStrategy",
    "tags",
];

impl EcsServices {
    /// Makes the ECS service run the job's version; returns what was done.
    pub(super) async fn apply(
        &self,
        service: &EcsService,
        job: &JobRecord,
    ) -> Result<String, EcsError> {
        let clients = self.clients_for(service);
        let definition = request(service, "task definition", &service.task_definition)?;
        let family = definition
            .get("family")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut done = Vec::new();
        let arn = match reusable(&clients, &family, service).await? {
            Some(arn) => {
                done.push(format!(
                    "task definition {arn} is already registered for {}",
                    service.version
                ));
                arn
            }
            None => {
                let arn = register(&clients, &family, service, definition).await?;
                done.push(format!(
                    "registered task definition {arn} for {}",
                    service.version
                ));
                arn
            }
        };
        let settings = request(service, "service settings", &service.settings)?;
        let existing = describe_service(&clients, service).await?;
        done.push(match existing {
            Some(s) if s.status() == Some("DRAINING") => {
                return Err(EcsError::ServiceDraining {
                    cluster: service.cluster.clone(),
                    service: service.service_name.clone(),
                });
            }
            Some(existing) => {
                let updated = update(&clients, service, &arn, settings, &existing).await?;
                take_over(&clients, service, &existing).await?;
                updated
            }
            None => create(&clients, service, &arn, settings, job).await?,
        });
        Ok(done.join("\n"))
    }
}

/// The newest revision of `family` when it is exactly what this apply
/// would register (same service id, version and digest): a retried or
/// repeated apply then registers nothing new. ECS answers a family it
/// does not know with a ClientException.
async fn reusable(
    clients: &EcsClients,
    family: &str,
    service: &EcsService,
) -> Result<Option<String>, EcsError> {
    let found = match clients
        .ecs
        .describe_task_definition()
        .task_definition(family)
        .include(TaskDefinitionField::Tags)
        .send()
        .await
    {
        Ok(found) => found,
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_client_exception()) =>
        {
            return Ok(None);
        }
        Err(e) => {
            return Err(EcsError::DescribeTaskDefinition {
                family: family.to_owned(),
                detail: describe(&e),
                source: Box::new(e),
            });
        }
    };
    let tag = |key: &str| {
        found
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
    };
    let ours = tag(tags::SERVICE_ID) == Some(service.service_id.as_str())
        && tag(tags::VERSION) == Some(service.version.as_str())
        && tag(tags::DIGEST) == Some(digest(service).as_str());
    Ok(found
        .task_definition()
        .filter(|d| ours && d.status() == Some(&TaskDefinitionStatus::Active))
        .and_then(|d| d.task_definition_arn())
        .map(str::to_owned))
}

async fn register(
    clients: &EcsClients,
    family: &str,
    service: &EcsService,
    mut definition: Map<String, Value>,
) -> Result<String, EcsError> {
    add_tags(
        &mut definition,
        [
            (tags::SERVICE_ID, service.service_id.clone()),
            (tags::VERSION, service.version.clone()),
            (tags::DIGEST, digest(service)),
        ],
    );
    let registered = clients
        .ecs
        .register_task_definition()
        .family(family)
        .container_definitions(ContainerDefinition::builder().build())
        .customize()
        .config_override(RequestBody::of(definition))
        .send()
        .await
        .map_err(|e| EcsError::RegisterTaskDefinition {
            family: family.to_owned(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    let arn = registered
        .task_definition()
        .and_then(|d| d.task_definition_arn())
        .ok_or(EcsError::IncompleteAnswer {
            operation: "RegisterTaskDefinition",
            missing: "the task definition's ARN",
        })?
        .to_owned();
    info!(family, task_definition = %arn, version = %service.version, "registered the ECS runtime's task definition");
    Ok(arn)
}

async fn create(
    clients: &EcsClients,
    service: &EcsService,
    arn: &str,
    mut settings: Map<String, Value>,
    job: &JobRecord,
) -> Result<String, EcsError> {
    settings.insert("cluster".into(), json!(service.cluster));
    settings.insert("taskDefinition".into(), json!(arn));
    // The job id makes a create retried by the SDK or a racing worker one
    // create (ECS keeps client tokens for a while; the service's existence
    // is the lasting record, found by the next apply's DescribeServices).
    settings.insert("clientToken".into(), json!(job.id.as_str()));
    add_tags(
        &mut settings,
        [(tags::SERVICE_ID, service.service_id.clone())],
    );
    clients
        .ecs
        .create_service()
        .service_name(&service.service_name)
        .customize()
        .config_override(RequestBody::of(settings))
        .send()
        .await
        .map_err(|e| EcsError::CreateService {
            cluster: service.cluster.clone(),
            service: service.service_name.clone(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    info!(cluster = %service.cluster, service = %service.service_name, "created the ECS service");
    Ok(format!(
        "created service {} in cluster {} with {arn}",
        service.service_name, service.cluster
    ))
}

async fn update(
    clients: &EcsClients,
    service: &EcsService,
    arn: &str,
    mut settings: Map<String, Value>,
    existing: &Service,
) -> Result<String, EcsError> {
    for key in CREATE_ONLY {
        settings.remove(key);
    }
    settings.insert("cluster".into(), json!(service.cluster));
    settings.insert("service".into(), json!(service.service_name));
    settings.insert("taskDefinition".into(), json!(arn));
    // Updating a service to the task definition whose rollout failed
    // changes nothing in ECS; a retried apply must really try again.
    let retry = failed_rollout_of(existing, arn);
    if retry {
        settings.insert("forceNewDeployment".into(), json!(true));
    }
    clients
        .ecs
        .update_service()
        .service(&service.service_name)
        .customize()
        .config_override(RequestBody::of(settings))
        .send()
        .await
        .map_err(|e| EcsError::UpdateService {
            cluster: service.cluster.clone(),
            service: service.service_name.clone(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    info!(cluster = %service.cluster, service = %service.service_name, task_definition = %arn, retry, "updated the ECS service");
    Ok(format!(
        "updated service {} in cluster {} to {arn}{}",
        service.service_name,
        service.cluster,
        if retry {
            " (a new deployment: the last one of it failed)"
        } else {
            ""
        }
    ))
}

/// A service Vergence did not create (taken over by this apply) gets the
/// instance's tag its creates carry, so it is Vergence's from now on: a
/// task definition changed by hand later is drift, not someone else's
/// service. UpdateService takes no tags.
async fn take_over(
    clients: &EcsClients,
    service: &EcsService,
    existing: &Service,
) -> Result<(), EcsError> {
    let tagged = existing.tags().iter().any(|t| {
        t.key() == Some(tags::SERVICE_ID) && t.value() == Some(service.service_id.as_str())
    });
    match existing.service_arn() {
        Some(arn) if !tagged => {
            tag_resource(
                clients,
                arn,
                &[(tags::SERVICE_ID, service.service_id.as_str())],
            )
            .await
        }
        _ => Ok(()),
    }
}

/// Whether the service's PRIMARY deployment is of `arn` and failed.
fn failed_rollout_of(service: &Service, arn: &str) -> bool {
    service.deployments().iter().any(|d| {
        d.status() == Some("PRIMARY")
            && d.task_definition() == Some(arn)
            && d.rollout_state() == Some(&DeploymentRolloutState::Failed)
    })
}

/// Adds Vergence's tags to a request's own.
fn add_tags<const N: usize>(request: &mut Map<String, Value>, ours: [(&str, String); N]) {
    let list = request
        .entry("tags")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = list {
        for (key, value) in ours {
            list.push(json!({"key": key, "value": value}));
        }
    }
}
