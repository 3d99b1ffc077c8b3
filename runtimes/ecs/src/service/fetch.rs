//! The ECS runtime's fetch: the service's PRIMARY deployment as one
//! object of the structured fetch output. Its version is the one tagged on
//! the deployment's task definition; a task definition Vergence did not
//! register for the instance (changed out of band) is some other version,
//! and one carrying the desired version's tags with other containers or
//! images is drifted; either way the engine applies again (drift
//! remediation).

use aws_sdk_ecs::types::{
    Deployment, DeploymentRolloutState, DeploymentStrategy, Service, ServiceDeployment,
    ServiceDeploymentLifecycleStage, ServiceDeploymentStatus, TaskDefinitionField,
};
use serde_json::{Value, json};
use tracing::info;
use vergence_model::EcsService;
use vergence_model::adoption::{self, Adopt, Takeover};
use vergence_model::ecs::tags;

use super::wire::ResponseBody;
use super::{EcsServices, describe_service, digest, tag_resource};
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
    let seen = version_of(clients, service, found, arn).await?;
    let (running, desired) = primary.map_or((found.running_count(), found.desired_count()), |d| {
        (d.running_count(), d.desired_count())
    });
    let older = found.deployments().len().saturating_sub(1);
    let (status, reason) = match native_deployment(clients, service, found).await? {
        Some(deployment) => native_status(found, &deployment),
        None => status(primary, older, running, desired),
    };
    let mut message = vec![format!("{arn}: {running}/{desired} tasks running")];
    message.extend(reason);
    if older > 0 {
        message.push(format!("{older} older deployment(s) still running"));
    }
    if seen.adopted {
        message.push(format!(
            "adopted: it runs the task definition of {}, so it is tagged as Vergence's",
            service.task_definition_file
        ));
    }
    if let Some(takeover) = &seen.takeover {
        message.push(format!(
            "not Vergence's; applying changes {}",
            takeover.differences.join(", ")
        ));
    }
    Ok(json!({
        "name": service.service_name,
        "objectType": OBJECT_TYPE,
        "versions": [{
            "version": seen.version,
            "active": true,
            "replicas": running,
            "availableReplicas": running,
            "targetReplicas": desired,
            "drifted": seen.drifted,
        }],
        "adopted": seen.adopted,
        "takeover": seen.takeover,
        "status": status,
        "message": message.join("; "),
        "externalLinks": [{
            "type": "DETAIL",
            "name": "ECS console",
            "url": console_url(clients, service),
        }],
    }))
}

/// What the PRIMARY deployment's task definition says about the desired
/// one.
struct Seen {
    /// The version its tags name, or a name for one Vergence did not
    /// register (`web:7, not registered by Vergence`).
    version: String,
    drifted: bool,
    /// It was not Vergence's but ran the file's task definition: tagged
    /// as Vergence's now.
    adopted: bool,
    /// It is not Vergence's and differs: applying takes it over.
    takeover: Option<Takeover>,
}

/// The version a task definition was registered for, and whether it was
/// changed since: its tags when Vergence registered it for this instance;
/// otherwise the service is someone else's, adopted when it runs exactly
/// what the file describes (the drift check's comparison), else a takeover.
async fn version_of(
    clients: &EcsClients,
    service: &EcsService,
    found: &Service,
    arn: &str,
) -> Result<Seen, EcsError> {
    let answer = ResponseBody::default();
    let described = clients
        .ecs
        .describe_task_definition()
        .task_definition(arn)
        .include(TaskDefinitionField::Tags)
        .customize()
        .config_override(answer.config())
        .send()
        .await
        .map_err(|e| EcsError::DescribeTaskDefinition {
            family: arn.to_owned(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    let live = answer.take();
    if !live["taskDefinition"].is_object() {
        return Err(EcsError::IncompleteAnswer {
            operation: "DescribeTaskDefinition",
            missing: "the task definition's JSON",
        });
    }
    let differences = differences(service, &live["taskDefinition"]);
    let tag = |key: &str| {
        described
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
    };
    let name = arn.rsplit('/').next().unwrap_or(arn);
    let mut seen = Seen {
        version: format!("{name}, not registered by Vergence"),
        drifted: false,
        adopted: false,
        takeover: None,
    };
    // The service is Vergence's when it carries the instance's tag (its
    // create put it there) or runs a task definition registered for it.
    let ours = found.tags().iter().any(|t| {
        t.key() == Some(tags::SERVICE_ID) && t.value() == Some(service.service_id.as_str())
    });
    match tag(tags::VERSION) {
        Some(version) if tag(tags::SERVICE_ID) == Some(service.service_id.as_str()) => {
            seen.drifted = version == service.version
                && (tag(tags::DIGEST) != Some(digest(service).as_str()) || !differences.is_empty());
            seen.version = version.to_owned();
        }
        // Changed out of band: drift, remediated as ever.
        _ if ours => {}
        _ if differences.is_empty() => {
            mark(clients, service, found, arn).await?;
            seen.version.clone_from(&service.version);
            seen.adopted = true;
        }
        _ if service.adopt == Adopt::Approve => {
            seen.takeover = Some(Takeover {
                object: format!("ECS service {}", service.service_name),
                differences,
            });
        }
        _ => {}
    }
    Ok(seen)
}

/// How the registered task definition differs from the file's, field by
/// field (tags are no field of it): drift on one Vergence registered, and
/// whether a service it did not make can be adopted.
fn differences(service: &EcsService, registered: &Value) -> Vec<String> {
    let mut wanted: Value = serde_json::from_str(&service.task_definition).unwrap_or_default();
    if let Some(fields) = wanted.as_object_mut() {
        fields.remove("tags");
    }
    let mut live = registered.clone();
    // ECS keeps the task's size in units ("1024"), whatever the file wrote
    // ("1 vCPU", "1 GB"): compared as written, a task definition Vergence
    // registered itself would read as drift after every apply.
    for side in [&mut wanted, &mut live] {
        let Some(fields) = side.as_object_mut() else {
            continue;
        };
        for (key, unit) in [("cpu", "vcpu"), ("memory", "gb")] {
            if let Some(units) = fields.get(key).and_then(|v| in_units(v, unit)) {
                fields.insert(key.to_owned(), Value::String(units));
            }
        }
    }
    adoption::differences(&wanted, &live)
}

/// A task size written with its unit (`1 vCPU`, `0.5 vcpu`, `2GB`), as ECS
/// stores it: 1024 units per vCPU, MiB for memory.
fn in_units(written: &Value, unit: &str) -> Option<String> {
    let text = written.as_str()?.trim().to_ascii_lowercase();
    let amount: f64 = text.strip_suffix(unit)?.trim().parse().ok()?;
    let units = amount * 1024.0;
    (units.is_finite() && units >= 0.0 && units.fract() == 0.0).then(|| format!("{units}"))
}

/// Marks a service Vergence did not make, which runs the file's task
/// definition, as Vergence's: the tags its own registrations and services
/// carry, so later fetches and applies treat it as one of them.
async fn mark(
    clients: &EcsClients,
    service: &EcsService,
    found: &Service,
    arn: &str,
) -> Result<(), EcsError> {
    tag_resource(
        clients,
        arn,
        &[
            (tags::SERVICE_ID, service.service_id.as_str()),
            (tags::VERSION, service.version.as_str()),
            (tags::DIGEST, digest(service).as_str()),
        ],
    )
    .await?;
    if let Some(service_arn) = found.service_arn() {
        tag_resource(
            clients,
            service_arn,
            &[(tags::SERVICE_ID, service.service_id.as_str())],
        )
        .await?;
    }
    info!(cluster = %service.cluster, service = %service.service_name, task_definition = %arn, version = %service.version, "adopted the ECS service");
    Ok(())
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

/// The service's current deployment when ECS itself shifts its traffic
/// (a CANARY, LINEAR or BLUE_GREEN strategy): its lifecycle stage and its
/// own rollback (on alarms, on the circuit breaker) are the rollout's
/// state. `None` for a rolling deployment, which the deployments of
/// DescribeServices say all of.
async fn native_deployment(
    clients: &EcsClients,
    service: &EcsService,
    found: &Service,
) -> Result<Option<ServiceDeployment>, EcsError> {
    let native = found
        .deployment_configuration()
        .and_then(|c| c.strategy())
        .is_some_and(|s| !matches!(s, DeploymentStrategy::Rolling));
    let Some(arn) = found.current_service_deployment().filter(|_| native) else {
        return Ok(None);
    };
    let described = clients
        .ecs
        .describe_service_deployments()
        .service_deployment_arns(arn)
        .send()
        .await
        .map_err(|e| EcsError::DescribeServiceDeployments {
            service: service.service_name.clone(),
            deployment: arn.to_owned(),
            detail: describe(&e),
            source: Box::new(e),
        })?;
    Ok(described.service_deployments().first().cloned())
}

/// The rollout state of a deployment ECS shifts itself: PENDING with its
/// lifecycle stage while it runs, FAILED once ECS rolls it back (alarms,
/// circuit breaker, or a stop), with ECS's reason.
fn native_status(
    found: &Service,
    deployment: &ServiceDeployment,
) -> (&'static str, Option<String>) {
    let config = found.deployment_configuration();
    let strategy = config
        .and_then(|c| c.strategy())
        .map_or("", DeploymentStrategy::as_str);
    let shift = match config {
        Some(c) if strategy == "CANARY" => c
            .canary_configuration()
            .and_then(|k| k.canary_percent())
            .map(|p| format!(" of {p}% first")),
        Some(c) if strategy == "LINEAR" => c
            .linear_configuration()
            .and_then(|l| l.step_percent())
            .map(|p| format!(" by {p}% steps")),
        _ => None,
    }
    .unwrap_or_default();
    let stage = deployment
        .lifecycle_stage()
        .map_or("starting", ServiceDeploymentLifecycleStage::as_str);
    let triggered = deployment
        .alarms()
        .map(|a| a.triggered_alarm_names().join(", "))
        .filter(|names| !names.is_empty())
        .map(|names| format!(" (alarms in ALARM: {names})"))
        .unwrap_or_default();
    let why = deployment
        .rollback()
        .and_then(|r| r.reason())
        .or(deployment.status_reason())
        .unwrap_or("no reason given");
    match deployment.status() {
        Some(ServiceDeploymentStatus::Successful) => ("SUCCEEDED", None),
        Some(
            ServiceDeploymentStatus::RollbackRequested
            | ServiceDeploymentStatus::RollbackInProgress
            | ServiceDeploymentStatus::RollbackSuccessful
            | ServiceDeploymentStatus::RollbackFailed
            | ServiceDeploymentStatus::Stopped,
        ) => (
            "FAILED",
            Some(format!(
                "ECS rolled the {strategy} deployment back ({}){triggered}: {why}",
                deployment
                    .status()
                    .map_or("", ServiceDeploymentStatus::as_str)
            )),
        ),
        _ => (
            "PENDING",
            Some(format!(
                "ECS {strategy} deployment{shift}: {stage}{triggered}"
            )),
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::in_units;
    use serde_json::json;

    #[test]
    fn task_sizes_written_with_units_compare_as_ecs_keeps_them() {
        assert_eq!(in_units(&json!("1 vCPU"), "vcpu").as_deref(), Some("1024"));
        assert_eq!(
            in_units(&json!("0.25 vcpu"), "vcpu").as_deref(),
            Some("256")
        );
        assert_eq!(in_units(&json!("2GB"), "gb").as_deref(), Some("2048"));
        assert_eq!(in_units(&json!("0.5 GB"), "gb").as_deref(), Some("512"));
        // Already in units, or not a size ECS reads: compared as written.
        assert_eq!(in_units(&json!("1024"), "vcpu"), None);
        assert_eq!(in_units(&json!(512), "gb"), None);
        assert_eq!(in_units(&json!("lots GB"), "gb"), None);
    }
}
