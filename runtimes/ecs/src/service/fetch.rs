//! The ECS runtime's fetch: the service's PRIMARY deployment as one
//! object of the structured fetch output. Its version is the one tagged on
//! the deployment's task definition; a task definition Vergence did not
//! register for the instance (changed out of band) is some other version,
//! and one carrying the desired version's tags with other containers or
//! images is drifted; either way the engine applies again (drift
//! remediation).

use std::collections::BTreeSet;

use aws_sdk_ecs::types::{
    Deployment, DeploymentRolloutState, Service, TaskDefinition, TaskDefinitionField,
};
use serde_json::{Value, json};
use vergence_model::EcsService;
use vergence_model::ecs::tags;

use super::{EcsServices, describe_service, digest};
use crate::clients::EcsClients;
use crate::error::{EcsError, describe};

const OBJECT_TYPE: &str = "ECSService";

impl EcsServices {
    /// The structured fetch output of the instance's ECS service.
    pub(super) async fn fetch(&self, service: &EcsService) -> Result<String, EcsError> {
        let clients = self.clients_for(service);
        let object = match describe_service(&clients, service).await? {
            None => json!({
                "name": service.service_name,
                "objectType": OBJECT_TYPE,
                "versions": [],
                "status": "PENDING",
                "message": format!("there is no ECS service {} in cluster {}", service.service_name, service.cluster),
            }),
            Some(found) => observe(&clients, service, &found).await?,
        };
        Ok(json!({ "objects": [object] }).to_string())
    }
}

/// What the running service says about the desired one.
async fn observe(
    clients: &EcsClients,
    service: &EcsService,
    found: &Service,
) -> Result<Value, EcsError> {
    let primary = found
        .deployments()
        .iter()
        .find(|d| d.status() == Some("PRIMARY"));
    let arn = primary
        .and_then(Deployment::task_definition)
        .or(found.task_definition())
        .ok_or(EcsError::IncompleteAnswer {
            operation: "DescribeServices",
            missing: "the service's task definition",
        })?;
    let (version, drifted) = version_of(clients, service, arn).await?;
    let (running, desired) = primary.map_or((found.running_count(), found.desired_count()), |d| {
        (d.running_count(), d.desired_count())
    });
    let older = found.deployments().len().saturating_sub(1);
    let (status, reason) = status(primary, older, running, desired);
    let mut message = vec![format!("{arn}: {running}/{desired} tasks running")];
    message.extend(reason);
    if older > 0 {
        message.push(format!("{older} older deployment(s) still running"));
    }
    Ok(json!({
        "name": service.service_name,
        "objectType": OBJECT_TYPE,
        "versions": [{
            "version": version,
            "active": true,
            "replicas": running,
            "availableReplicas": running,
            "targetReplicas": desired,
            "drifted": drifted,
        }],
        "status": status,
        "message": message.join("; "),
        "externalLinks": [{
            "type": "DETAIL",
            "name": "ECS console",
            "url": console_url(clients, service),
        }],
    }))
}

/// The version a task definition was registered for, and whether it was
/// changed since: its tags when Vergence registered it for this instance;
/// otherwise it names itself (`web:7, not registered by Vergence`).
async fn version_of(
    clients: &EcsClients,
    service: &EcsService,
    arn: &str,
) -> Result<(String, bool), EcsError> {
    let described = clients
        .ecs
        .describe_task_definition()
        .task_definition(arn)
        .include(TaskDefinitionField::Tags)
        .send()
        .await
        .map_err(|e| EcsError::DescribeTaskDefinition {
            family: arn.to_owned(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    let tag = |key: &str| {
        described
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
    };
    let name = arn.rsplit('/').next().unwrap_or(arn);
    match tag(tags::VERSION) {
        Some(version) if tag(tags::SERVICE_ID) == Some(service.service_id.as_str()) => {
            let drifted = version == service.version
                && (tag(tags::DIGEST) != Some(digest(service).as_str())
                    || described
                        .task_definition()
                        .is_some_and(|d| !same_containers(service, d)));
            Ok((version.to_owned(), drifted))
        }
        _ => Ok((format!("{name}, not registered by Vergence"), false)),
    }
}

/// Whether the registered task definition has the file's containers with
/// their images: tags copied onto a revision registered by hand carry
/// over, but what it runs shows.
fn same_containers(service: &EcsService, registered: &TaskDefinition) -> bool {
    let rendered: Value = serde_json::from_str(&service.task_definition).unwrap_or_default();
    let wanted: BTreeSet<(&str, &str)> = rendered["containerDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default(),
                c["image"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let running: BTreeSet<(&str, &str)> = registered
        .container_definitions()
        .iter()
        .map(|c| (c.name().unwrap_or_default(), c.image().unwrap_or_default()))
        .collect();
    wanted == running
}

/// The object's status from its PRIMARY deployment's rollout state; a
/// deployment without one (another deployment controller) is done when
/// it alone runs every task it wants.
fn status(
    primary: Option<&Deployment>,
    older: usize,
    running: i32,
    desired: i32,
) -> (&'static str, Option<String>) {
    let reason = primary
        .and_then(Deployment::rollout_state_reason)
        .map(str::to_owned);
    let state = match primary.and_then(Deployment::rollout_state) {
        Some(DeploymentRolloutState::Completed) => "SUCCEEDED",
        Some(DeploymentRolloutState::Failed) => "FAILED",
        Some(_) => "PENDING",
        None if older == 0 && running == desired => "SUCCEEDED",
        None => "PENDING",
    };
    (state, reason)
}

fn console_url(clients: &EcsClients, service: &EcsService) -> String {
    let region = service
        .region
        .clone()
        .or_else(|| clients.region())
        .unwrap_or_default();
    let cluster = service
        .cluster
        .rsplit('/')
        .next()
        .unwrap_or(&service.cluster);
    format!(
        "https://{region}.console.aws.amazon.com/ecs/v2/clusters/{cluster}/services/{}/deployments?region={region}",
        service.service_name
    )
}
