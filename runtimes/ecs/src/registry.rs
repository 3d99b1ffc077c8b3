//! The task definitions the runner has made sure of: a family found in ECS
//! (DescribeTaskDefinition) or registered by this process is remembered,
//! so each image and settings cost one ECS call per process, and a new
//! process (another Lambda instance) reuses what an earlier one registered.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use aws_sdk_ecs::types::TaskDefinitionStatus;
use tracing::{info, warn};

use crate::clients::EcsClients;
use crate::error::{EcsError, describe};
use crate::task_definition::TaskDefinitionSpec;

/// Task definition family → ARN of a revision known to exist. The family
/// hashes the region too, so it is unique across regions.
#[derive(Debug, Default)]
pub struct TaskDefinitions {
    known: Mutex<HashMap<String, String>>,
}

impl TaskDefinitions {
    /// The ARN of `definition`, registered when no revision of its family
    /// exists yet.
    pub async fn ensure(
        &self,
        clients: &EcsClients,
        definition: &TaskDefinitionSpec,
    ) -> Result<String, EcsError> {
        let family = definition.family();
        if let Some(arn) = self.known(&family) {
            return Ok(arn);
        }
        let arn = match existing(clients, &family).await? {
            Some(arn) => arn,
            None => register(clients, definition, &family).await?,
        };
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(family, arn.clone());
        Ok(arn)
    }

    fn known(&self, family: &str) -> Option<String> {
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(family)
            .cloned()
    }
}

/// The newest active revision of `family`, if there is one. ECS answers a
/// family it does not know with a ClientException; any other problem with
/// the family shows when registering it.
async fn existing(clients: &EcsClients, family: &str) -> Result<Option<String>, EcsError> {
    match clients
        .ecs
        .describe_task_definition()
        .task_definition(family)
        .send()
        .await
    {
        Ok(found) => Ok(found
            .task_definition()
            .filter(|d| d.status() == Some(&TaskDefinitionStatus::Active))
            .and_then(|d| d.task_definition_arn())
            .map(str::to_owned)),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_client_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(EcsError::DescribeTaskDefinition {
            family: family.to_owned(),
            detail: describe(&e),
            source: Box::new(e),
        }),
    }
}

async fn register(
    clients: &EcsClients,
    definition: &TaskDefinitionSpec,
    family: &str,
) -> Result<String, EcsError> {
    create_log_group(clients, &definition.log_group).await;
    let registered = definition
        .register(clients.ecs.register_task_definition())?
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
        .unwrap_or(family)
        .to_owned();
    info!(family, task_definition = %arn, "registered a task definition");
    Ok(arn)
}

/// Creates the log group awslogs writes to, if Vergence may: a task whose
/// log group is missing fails to start. Without the right, the group must
/// exist already (docs/runners/ecs.md).
async fn create_log_group(clients: &EcsClients, group: &str) {
    match clients
        .logs
        .create_log_group()
        .log_group_name(group)
        .send()
        .await
    {
        Ok(_) => info!(group, "created the log group of ECS jobs"),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_already_exists_exception()) => {}
        Err(e) => {
            warn!(group, error = %describe(&e), "could not create the log group of ECS jobs; it must exist");
        }
    }
}
