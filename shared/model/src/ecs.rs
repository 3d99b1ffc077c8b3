//! The first-class ECS runtime's desired state for one service instance:
//! the rendered task definition and service settings, applied and read by
//! whoever runs the engine (the worker function, `vergence up`/`serve`)
//! with the ECS API, in-process and without a container.

use serde::{Deserialize, Serialize};

/// One ECS service as a release wants it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EcsService {
    /// Cluster name or ARN.
    pub cluster: String,
    /// Region of the cluster; the deployment's own when not given.
    #[serde(default)]
    pub region: Option<String>,
    /// The ECS service's name (the settings file's `serviceName`).
    pub service_name: String,
    /// The RegisterTaskDefinition request as compact JSON, rendered from
    /// the service's file, without Vergence's tags (kept as text so specs
    /// stay hashable and byte-stable).
    pub task_definition: String,
    /// The CreateService request as compact JSON without `cluster`,
    /// `serviceName` and `taskDefinition`, which Vergence sets.
    pub settings: String,
    /// The instance's service id, tagged on what the apply registers.
    pub service_id: String,
    /// The version tagged on the task definition.
    pub version: String,
    /// The task definition file (for people): `ecs/web-task.json`.
    pub task_definition_file: String,
    /// The service settings file (for people): `ecs/web-service.json`.
    pub service_file: String,
    /// What to do with a live ECS service Vergence did not make that differs
    /// from this (the runtime's `adopt`); one that matches is adopted.
    #[serde(default, skip_serializing_if = "crate::adoption::Adopt::is_default")]
    pub adopt: crate::adoption::Adopt,
}

impl EcsService {
    /// What an operator runs to do by hand what the apply does.
    pub fn aws_cli(&self) -> String {
        let region = self
            .region
            .as_deref()
            .map(|r| format!(" --region {r}"))
            .unwrap_or_default();
        format!(
            "aws ecs register-task-definition{region} --cli-input-json file://<{task} rendered for {version}> --tags key={sid},value={service_id} key={ver},value={version} && aws ecs update-service{region} --cluster {cluster} --service {service} --task-definition <the registered ARN> --cli-input-json file://<{settings} rendered> (create-service when it does not exist)",
            task = self.task_definition_file,
            settings = self.service_file,
            version = self.version,
            sid = tags::SERVICE_ID,
            service_id = self.service_id,
            ver = tags::VERSION,
            cluster = self.cluster,
            service = self.service_name,
        )
    }
}

/// Tags on the task definitions the ECS runtime registers: how a fetch
/// tells which version a service runs, and whether anyone changed it.
pub mod tags {
    /// The instance's service id.
    pub const SERVICE_ID: &str = "vergence:service-id";
    /// The service version the task definition was registered for.
    pub const VERSION: &str = "vergence:version";
    /// SHA-256 of the registered request (without tags): a task definition
    /// re-registered by hand with the same tags but other content shows.
    pub const DIGEST: &str = "vergence:digest";
}
