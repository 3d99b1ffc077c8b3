//! Runners: where a job runs (a local process, an ECS task, a Cloud Run
//! job, a Kubernetes Job through an agent) with the settings each needs,
//! and where a job's secrets come from.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::diagnostics::ConfigLocation;
use crate::names::{ProtectionName, RuntimeName};

/// Where a job runs, with that runner's settings for this runtime and
/// release channel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum RunnerSpec {
    /// A process on the machine running Vergence (or inside the worker), or
    /// a container there when the program names an image.
    Local,
    /// A Kubernetes Job created by the agent running in the user's cluster.
    Kubernetes(KubernetesRunnerSpec),
    /// An ECS task on Fargate in the user's cluster.
    Ecs(EcsRunnerSpec),
    /// An execution of a Cloud Run job.
    CloudRun(CloudRunRunnerSpec),
    /// An asynchronous invocation of the user's Lambda function, which
    /// runs the job's command in `vergence-wrapper`'s Lambda mode.
    Lambda(LambdaRunnerSpec),
}

impl RunnerSpec {
    pub fn kind(&self) -> RunnerKind {
        match self {
            RunnerSpec::Local => RunnerKind::Local,
            RunnerSpec::Kubernetes(_) => RunnerKind::Kubernetes,
            RunnerSpec::Ecs(_) => RunnerKind::Ecs,
            RunnerSpec::CloudRun(_) => RunnerKind::CloudRun,
            RunnerSpec::Lambda(_) => RunnerKind::Lambda,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// Kubernetes Jobs, created and watched by `vergence-agent` in the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesRunnerSpec {
    /// The agent (by name) that runs jobs in the cluster.
    pub agent: String,
    /// Namespace of the Jobs; the agent's own when not given.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Service account the Job's pod runs as.
    #[serde(default)]
    pub service_account: Option<String>,
}

/// ECS tasks on Fargate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EcsRunnerSpec {
    /// Cluster name or ARN.
    pub cluster: String,
    /// Region of the cluster; the deployment's own region when not given.
    #[serde(default)]
    pub region: Option<String>,
    /// Subnets of the task's network interface (awsvpc).
    pub subnets: Vec<String>,
    #[serde(default)]
    pub security_groups: Vec<String>,
    /// Whether the task gets a public IP (needed to pull images from a
    /// public subnet without a NAT gateway).
    #[serde(default)]
    pub assign_public_ip: bool,
    /// Role the job's code runs as.
    #[serde(default)]
    pub task_role_arn: Option<String>,
    /// Role ECS uses to pull the image, write logs and read secrets.
    #[serde(default)]
    pub execution_role_arn: Option<String>,
    /// Fargate CPU units (256 = ¼ vCPU).
    #[serde(default = "EcsRunnerSpec::default_cpu")]
    pub cpu: u32,
    /// Memory in MiB.
    #[serde(default = "EcsRunnerSpec::default_memory")]
    pub memory: u32,
    /// CloudWatch Logs group the awslogs driver writes the job's output to.
    #[serde(default = "EcsRunnerSpec::default_log_group")]
    pub log_group: String,
}

impl EcsRunnerSpec {
    pub const DEFAULT_CPU: u32 = 256;
    pub const DEFAULT_MEMORY: u32 = 512;
    pub const DEFAULT_LOG_GROUP: &'static str = "/vergence/jobs";

    fn default_cpu() -> u32 {
        Self::DEFAULT_CPU
    }

    fn default_memory() -> u32 {
        Self::DEFAULT_MEMORY
    }

    fn default_log_group() -> String {
        Self::DEFAULT_LOG_GROUP.to_owned()
    }
}

/// Cloud Run jobs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudRunRunnerSpec {
    pub project: String,
    pub region: String,
    /// Service account the job runs as; the project's default when not given.
    #[serde(default)]
    pub service_account: Option<String>,
    /// CPU limit, as Cloud Run writes it (`"1"`, `"2"`).
    #[serde(default)]
    pub cpu: Option<String>,
    /// Memory limit, as Cloud Run writes it (`"512Mi"`, `"2Gi"`).
    #[serde(default)]
    pub memory: Option<String>,
}

/// Invocations of a Lambda function that carries `vergence-wrapper`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LambdaRunnerSpec {
    /// Function name, or its ARN (full or partial, with or without a
    /// version or alias).
    pub function: String,
    /// Region of the function; the deployment's own region when not given
    /// (an ARN names its own).
    #[serde(default)]
    pub region: Option<String>,
    /// Version or alias invoked; the unqualified function (`$LATEST`)
    /// when not given.
    #[serde(default)]
    pub qualifier: Option<String>,
}

impl LambdaRunnerSpec {
    /// The longest a Lambda invocation runs, and so the longest timeout of
    /// a job on this runner.
    pub const MAX_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_mins(15);
}

/// The kinds of runner, without their settings: what a deployment has a
/// runner for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunnerKind {
    Local,
    Kubernetes,
    Ecs,
    CloudRun,
    Lambda,
}

impl RunnerKind {
    pub const ALL: [RunnerKind; 5] = [
        RunnerKind::Local,
        RunnerKind::Kubernetes,
        RunnerKind::Ecs,
        RunnerKind::CloudRun,
        RunnerKind::Lambda,
    ];

    /// The name used in config (`runner: {ecs: …}`) and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::Local => "local",
            RunnerKind::Kubernetes => "kubernetes",
            RunnerKind::Ecs => "ecs",
            RunnerKind::CloudRun => "cloudRun",
            RunnerKind::Lambda => "lambda",
        }
    }
}

impl fmt::Display for RunnerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A runner the config names, and where: what a deployment must have a
/// runner of that kind for. Read at validate time, so a command can say
/// which jobs it cannot run before any job is due.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunnerUse {
    pub kind: RunnerKind,
    /// Whose jobs run on it.
    pub by: RunnerUser,
    /// The `runner` key of a runtime or protection (the document itself
    /// when it runs on the default local runner), or a release channel's
    /// override of a runtime's runner.
    pub at: ConfigLocation,
}

/// Whose jobs run on a runner: a runtime's apply, fetch and getInfo, or a
/// protection's check.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RunnerUser {
    Runtime(RuntimeName),
    Protection(ProtectionName),
}

impl fmt::Display for RunnerUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunnerUser::Runtime(name) => write!(f, "runtime {name}"),
            RunnerUser::Protection(name) => write!(f, "protection {name}"),
        }
    }
}

/// The kind of deployment a config is checked for: where the jobs of its
/// local runner would run. Which jobs can start depends on it, so the same
/// config can be valid for one and not the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeploymentTarget {
    /// `vergence up` and `vergence serve`: local jobs run on the machine of
    /// the config directory, in it, with docker or podman for images.
    #[default]
    Local,
    /// The Lambda functions: local jobs run inside the worker function,
    /// which has no config directory and no container engine.
    Serverless,
}

impl DeploymentTarget {
    /// The name used on the command line (`--target serverless`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentTarget::Local => "local",
            DeploymentTarget::Serverless => "serverless",
        }
    }
}

impl fmt::Display for DeploymentTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The program of a job of the local runner as written, and where: what
/// a command reads to warn about programs that will not be found.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalProgram {
    /// `cmd[0]` as written, its templates not rendered.
    pub program: String,
    /// Whether it runs in a container of the program's image.
    pub in_container: bool,
    /// The job's working directory, relative to the config directory
    /// (`""` at its top).
    pub working_dir: String,
    /// Where `cmd[0]` is written.
    pub at: ConfigLocation,
}

/// Where a secret's value comes from. Vergence stores only this reference;
/// the value is resolved where the job runs, never stored or logged, and
/// never put on a command line. Each runner reads the sources its platform
/// has (see [`SecretRef::read_by`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SecretRef {
    /// An environment variable of the process that runs the local runner.
    FromEnv(String),
    /// An AWS Secrets Manager secret ARN (ECS's `valueFrom`, which may add
    /// `:json-key:version-stage:version-id`).
    AwsSecretsManager(String),
    /// An SSM Parameter Store parameter ARN or name.
    AwsSsmParameter(String),
    /// A Secret Manager version: `projects/P/secrets/S/versions/V`.
    GcpSecretManager(String),
    /// A key of a Kubernetes Secret in the Job's namespace.
    KubernetesSecret { name: String, key: String },
}

impl SecretRef {
    /// The runner kind that can read this source.
    pub fn read_by(&self) -> RunnerKind {
        match self {
            SecretRef::FromEnv(_) => RunnerKind::Local,
            SecretRef::AwsSecretsManager(_) | SecretRef::AwsSsmParameter(_) => RunnerKind::Ecs,
            SecretRef::GcpSecretManager(_) => RunnerKind::CloudRun,
            SecretRef::KubernetesSecret { .. } => RunnerKind::Kubernetes,
        }
    }

    /// The source as written in config, for messages.
    pub fn describe(&self) -> String {
        match self {
            SecretRef::FromEnv(var) => format!("environment variable {var}"),
            SecretRef::AwsSecretsManager(arn) => format!("AWS Secrets Manager secret {arn}"),
            SecretRef::AwsSsmParameter(name) => format!("SSM parameter {name}"),
            SecretRef::GcpSecretManager(name) => format!("Secret Manager version {name}"),
            SecretRef::KubernetesSecret { name, key } => {
                format!("key {key} of Kubernetes Secret {name}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_specs_are_stored_with_their_kind_and_read_back_with_defaults() {
        let stored = r#"{"kind":"ecs","cluster":"jobs","subnets":["subnet-1"],"securityGroups":[],"assignPublicIp":false}"#;
        let RunnerSpec::Ecs(ecs) = serde_json::from_str::<RunnerSpec>(stored).unwrap() else {
            panic!("an ecs runner");
        };
        assert_eq!(ecs.cpu, EcsRunnerSpec::DEFAULT_CPU);
        assert_eq!(ecs.memory, EcsRunnerSpec::DEFAULT_MEMORY);
        assert_eq!(ecs.log_group, "/vergence/jobs");
        let local = serde_json::to_string(&RunnerSpec::Local).unwrap();
        assert_eq!(local, r#"{"kind":"local"}"#);
        let k8s: RunnerSpec =
            serde_json::from_str(r#"{"kind":"kubernetes","agent":"prod-eu","namespace":null}"#)
                .unwrap();
        assert_eq!(k8s.kind(), RunnerKind::Kubernetes);
    }
}
