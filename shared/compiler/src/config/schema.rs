//! The configuration users write, as typed documents (see docs/config.md).
//!
//! These types mirror the YAML one to one; checking references between
//! documents and resolving templates is the compiler's job.

mod notification;
mod runner;
mod trust;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use jiff::SignedDuration;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer};

use vergence_model::{
    ApplicationName, ProtectionName, ReleaseChannelName, RuntimeName, ServiceName,
};

pub use notification::{NotificationDoc, SlackNotificationDoc, WebhookNotificationDoc};
pub use runner::{
    CloudRunRunnerDoc, EcsRunnerDoc, KubernetesRunnerDoc, LambdaRunnerDoc, LocalRunnerDoc,
    RunnerDoc,
};
pub use trust::TrustDoc;

/// A document: exactly one top-level kind.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DocumentBody {
    Application(Box<ApplicationDoc>),
    Runtime(Box<RuntimeDoc>),
    Service(Box<ServiceDoc>),
    Protection(Box<ProtectionDoc>),
}

impl DocumentBody {
    pub fn kind(&self) -> &'static str {
        match self {
            DocumentBody::Application(_) => "application",
            DocumentBody::Runtime(_) => "runtime",
            DocumentBody::Service(_) => "service",
            DocumentBody::Protection(_) => "protection",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            DocumentBody::Application(d) => d.name.as_str(),
            DocumentBody::Runtime(d) => d.name.as_str(),
            DocumentBody::Service(d) => d.name.as_str(),
            DocumentBody::Protection(d) => d.name.as_str(),
        }
    }
}

/// A positive duration written like `30s`, `10m`, `1h30m`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DurationDoc(pub SignedDuration);

impl fmt::Debug for DurationDoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl JsonSchema for DurationDoc {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A positive duration: a number and a unit, like 30s, 10m or 1h30m.",
            "examples": ["30s", "10m", "1h30m"],
        })
    }
}

/// Both spellings the reader takes (`BLOCK` and `block`).
impl JsonSchema for FailureBehaviorDoc {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "FailureBehavior".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "enum": ["BLOCK", "FAIL", "block", "fail"],
            "description": "BLOCK holds the apply while the protection fails; FAIL fails the version.",
        })
    }
}

impl<'de> Deserialize<'de> for DurationDoc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        parse_duration(&raw)
            .map(DurationDoc)
            .map_err(serde::de::Error::custom)
    }
}

/// Parses a positive duration such as `30s`, `10m`, `1h30m` or `500ms`.
pub fn parse_duration(raw: &str) -> Result<SignedDuration, String> {
    let parsed: SignedDuration = raw.trim().parse().map_err(|_| {
        format!("invalid duration {raw:?}: write a number and a unit, like 30s, 10m or 1h30m")
    })?;
    if parsed.is_negative() || parsed.is_zero() {
        return Err(format!("duration {raw:?} must be greater than zero"));
    }
    Ok(parsed)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeDoc {
    pub name: RuntimeName,
    pub description: Option<String>,
    pub runner: Option<RunnerDoc>,
    pub apply: Option<ApplyDoc>,
    pub fetch: Option<FetchDoc>,
    pub get_info: Option<GetInfoDoc>,
    pub convergence_grace_period: Option<DurationDoc>,
    pub require_approval_before_apply: Option<bool>,
    #[serde(default)]
    pub parameters: Vec<ParameterDoc>,
    /// The first-class ECS runtime: the services' task definitions and
    /// ECS services, applied with the ECS API by Vergence itself.
    pub ecs: Option<EcsRuntimeDoc>,
    /// The first-class Cloud Run runtime: the services' Cloud Run services,
    /// created and updated with the Cloud Run Admin API by Vergence itself.
    pub cloud_run: Option<CloudRunRuntimeDoc>,
    /// The first-class Kubernetes runtime: the agent applies the
    /// services' manifests itself.
    pub kubernetes: Option<KubernetesRuntimeDoc>,
    /// The Terraform runtime: Vergence plans and applies a module itself,
    /// on the runtime's runner.
    pub terraform: Option<TerraformRuntimeDoc>,
    /// How a new version takes the traffic of this runtime's services, in
    /// steps; only a `cloudRun` runtime splits traffic. A release channel's
    /// own `rollout` replaces it.
    pub rollout: Option<RolloutDoc>,
}

/// `terraform: {module, backend, variables, workspace, image, …}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformRuntimeDoc {
    /// `./dir` (a directory of the config, relative to this file), an
    /// absolute path on the runner, or a module source Terraform can fetch.
    pub module: Option<String>,
    /// The same as `module` (the name CONFIG.md gives it).
    pub path: Option<String>,
    /// `-backend-config` settings, each a template.
    pub backend: Option<BTreeMap<String, String>>,
    /// The same as `backend`.
    pub backend_config: Option<BTreeMap<String, String>>,
    /// Input variables (`TF_VAR_name`), each a template.
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
    /// The state's workspace; a template, one per instance by default.
    pub workspace: Option<String>,
    /// An image with terraform (and vergence-wrapper) for container runners.
    pub image: Option<String>,
    /// Where plan and apply run (also accepted at the runtime's top level).
    pub runner: Option<RunnerDoc>,
    /// How long one plan or apply may take.
    pub timeout: Option<DurationDoc>,
    /// How often to plan until converged.
    pub poll_interval: Option<DurationDoc>,
    /// How often to plan once converged (drift detection).
    pub steady_state_poll_interval: Option<DurationDoc>,
    pub retry_policy: Option<RetryPolicyDoc>,
}

/// `kubernetes: {agent, namespace, pollInterval, steadyStatePollInterval, timeout, adopt}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesRuntimeDoc {
    pub agent: Option<String>,
    /// Where namespaced objects that name no namespace go.
    pub namespace: Option<String>,
    /// How often the live objects are read until converged (from the
    /// agent's watch cache, so this costs the cluster nothing).
    pub poll_interval: Option<DurationDoc>,
    /// The backstop read after convergence; drift is reported by the
    /// agent's watch as it happens.
    pub steady_state_poll_interval: Option<DurationDoc>,
    /// How long one apply or read may take.
    pub timeout: Option<DurationDoc>,
    /// What to do with a live Kubernetes object Vergence did not make that differs
    /// from the desired state: `approve` (the default: the first apply
    /// waits for an approval showing the differences) or `apply`. One that
    /// matches is adopted without applying either way.
    pub adopt: Option<AdoptDoc>,
}

/// `ecs: {cluster, region, pollInterval, steadyStatePollInterval, timeout, adopt}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EcsRuntimeDoc {
    /// Cluster name or ARN of the services.
    pub cluster: Option<String>,
    /// Region of the cluster; the deployment's own when not given.
    pub region: Option<String>,
    /// How often the service is read until converged.
    pub poll_interval: Option<DurationDoc>,
    /// How often it is read after convergence, to find drift.
    pub steady_state_poll_interval: Option<DurationDoc>,
    /// How long one apply or read may take.
    pub timeout: Option<DurationDoc>,
    /// What to do with a live ECS service Vergence did not make that differs
    /// from the desired state: `approve` (the default: the first apply
    /// waits for an approval showing the differences) or `apply`. One that
    /// matches is adopted without applying either way.
    pub adopt: Option<AdoptDoc>,
}

/// A service's `ecs: {taskDefinition: FILE, service: FILE}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceEcsDoc {
    /// The RegisterTaskDefinition request (JSON or YAML), relative to the
    /// service's file and inside the config directory.
    pub task_definition: String,
    /// The CreateService request (JSON or YAML) without `cluster` and
    /// `taskDefinition`.
    pub service: String,
}

/// `cloudRun: {project, region, pollInterval, steadyStatePollInterval, timeout, adopt}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudRunRuntimeDoc {
    pub project: Option<String>,
    pub region: Option<String>,
    /// How often the service is read until converged.
    pub poll_interval: Option<DurationDoc>,
    /// How often it is read after convergence, to find drift.
    pub steady_state_poll_interval: Option<DurationDoc>,
    /// How long one apply or read may take.
    pub timeout: Option<DurationDoc>,
    /// What to do with a live Cloud Run service Vergence did not make that differs
    /// from the desired state: `approve` (the default: the first apply
    /// waits for an approval showing the differences) or `apply`. One that
    /// matches is adopted without applying either way.
    pub adopt: Option<AdoptDoc>,
}

/// `adopt:` of a first-class runtime (see `vergence_model::adoption`).
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AdoptDoc {
    Approve,
    Apply,
}

impl From<AdoptDoc> for vergence_model::adoption::Adopt {
    fn from(doc: AdoptDoc) -> Self {
        match doc {
            AdoptDoc::Approve => Self::Approve,
            AdoptDoc::Apply => Self::Apply,
        }
    }
}

/// A service's `cloudRun: {service: FILE}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceCloudRunDoc {
    /// The Cloud Run service (Admin API v2 `Service`, JSON or YAML),
    /// relative to the service's file and inside the config directory.
    pub service: String,
}

/// A service's `kubernetes: {manifests: DIR}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceKubernetesDoc {
    /// A directory of YAML manifests, relative to the service's file and
    /// inside the config directory.
    pub manifests: String,
}

/// The settings of a first-class runtime block (kept loose on purpose: it is
/// only parsed to be rejected with a clear message).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirstClassDoc {
    pub cluster: Option<String>,
    pub region: Option<String>,
    pub project: Option<String>,
    pub agent: Option<String>,
    pub path: Option<String>,
    pub backend_config: Option<BTreeMap<String, String>>,
    pub image: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskConfigDoc {
    pub program: ProgramDoc,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramDoc {
    pub image: Option<String>,
    #[serde(default)]
    pub cmd: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyDoc {
    pub task_config: TaskConfigDoc,
    #[serde(default)]
    pub retryable_exit_codes: Vec<i32>,
    pub retry_policy: Option<RetryPolicyDoc>,
    pub timeout: Option<DurationDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicyDoc {
    pub base_interval: Option<DurationDoc>,
    pub max_interval: Option<DurationDoc>,
    pub max_attempts: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FetchModeDoc {
    ExitCode,
    Structured,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchDoc {
    pub task_config: TaskConfigDoc,
    pub mode: Option<FetchModeDoc>,
    pub poll_interval: Option<DurationDoc>,
    pub steady_state_poll_interval: Option<DurationDoc>,
    #[serde(default)]
    pub outputs: Vec<String>,
    pub timeout: Option<DurationDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetInfoDoc {
    pub task_config: TaskConfigDoc,
    pub poll_interval: Option<DurationDoc>,
    pub timeout: Option<DurationDoc>,
}

/// A declared parameter: a name and exactly one type block.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParameterDoc {
    pub name: String,
    pub description: Option<String>,
    pub required: Option<bool>,
    pub string: Option<StringParamDoc>,
    pub int: Option<IntParamDoc>,
    pub docker_image: Option<StringParamDoc>,
    pub secret: Option<SecretParamDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StringParamDoc {
    pub default_value: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntParamDoc {
    pub default_value: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretParamDoc {}

/// A parameter value: a name and exactly one typed value.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParameterValueDoc {
    pub name: String,
    pub string: Option<String>,
    /// Text so a template such as `{{.Params.replicas}}` can supply it.
    pub int: Option<String>,
    pub docker_image: Option<String>,
    pub secret: Option<SecretValueDoc>,
}

/// A secret's source, as a service gives it for a runtime's `secret`
/// parameter, or a notification for its URL and signing secret: exactly
/// one of these keys (checked by the checker, so every mistake is reported
/// with the others).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretValueDoc {
    /// An environment variable of the process running the local runner
    /// (or sending notifications).
    pub from_env: Option<String>,
    /// A Secrets Manager secret ARN (read by ECS, and by whatever sends
    /// notifications, when it sends).
    pub aws_secrets_manager: Option<String>,
    /// An SSM parameter ARN or name (read by ECS, and by whatever sends
    /// notifications, when it sends).
    pub aws_ssm_parameter: Option<String>,
    /// `projects/P/secrets/S/versions/V` (read by Cloud Run).
    pub gcp_secret_manager: Option<String>,
    /// A key of a Kubernetes Secret in the Job's namespace.
    pub kubernetes_secret: Option<KubernetesSecretDoc>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesSecretDoc {
    pub name: Option<String>,
    pub key: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDoc {
    pub name: ApplicationName,
    pub description: Option<String>,
    pub release_channels: Vec<ReleaseChannelDoc>,
    /// Who to tell about the events people act on (docs/notifications.md).
    #[serde(default)]
    pub notifications: Vec<NotificationDoc>,
    /// CI jobs trusted by their own OIDC token instead of a stored API
    /// token, with the scopes each may use (docs/security.md).
    #[serde(default)]
    pub trust: Vec<TrustDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseChannelDoc {
    pub name: ReleaseChannelName,
    #[serde(default)]
    pub runtimes: Vec<RuntimeRefDoc>,
    #[serde(default)]
    pub constants: Vec<ConstantDoc>,
    #[serde(default)]
    pub preconditions: Vec<PreconditionDoc>,
    /// When applies may run; none = any time.
    #[serde(default)]
    pub allowed_times: Vec<TimeWindowDoc>,
    /// Freezes: when applies may not run, even inside an allowed window.
    #[serde(default)]
    pub denied_times: Vec<DenyWindowDoc>,
    #[serde(default)]
    pub protections: Vec<ProtectionAttachmentDoc>,
    /// How a new version takes the traffic in this channel, in steps;
    /// replaces its runtimes' own. Every runtime the channel lists must be
    /// a `cloudRun` one.
    pub rollout: Option<RolloutDoc>,
}

/// `rollout: {steps: [10, 50, 100], bake: 5m}`: the new version gets each
/// step's share of the traffic, the previous one keeps the rest, and each
/// step short of 100% is held `bake` while the channel's protections pass.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutDoc {
    /// The new version's share of the traffic at each step, in percent:
    /// increasing, each 1 to 100, the last 100.
    #[serde(default)]
    pub steps: Vec<RolloutStepDoc>,
    /// How long each step short of 100% is held, its checks passing,
    /// before the next: `5m` unless given; `0s` moves on at the first pass.
    pub bake: Option<BakeDoc>,
}

/// One step of a rollout as written. Read as text and checked by the
/// checker, so `10.5` or `ten` is an error at its line, not one that drops
/// the whole document.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct RolloutStepDoc(pub String);

impl JsonSchema for RolloutStepDoc {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "RolloutStep".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "description": "The new version's share of the traffic at this step, in percent.",
        })
    }
}

/// A rollout's bake time as written: a duration that, unlike the others,
/// may be zero, so it is read as text and checked by the checker.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct BakeDoc(pub String);

impl JsonSchema for BakeDoc {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Bake".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "How long each step is held: a number and a unit, like 5m or 30s; 0s to move on at the first pass.",
            "examples": ["5m", "30s", "0s"],
        })
    }
}

/// `{days: mon-fri, hours: 9-17, timezone: Europe/Berlin}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeWindowDoc {
    pub days: Option<String>,
    pub hours: Option<String>,
    pub timezone: Option<String>,
}

/// A one-off freeze `{name, start, end}` (RFC 3339 instants) or a
/// recurring one `{name, days, hours, timezone}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DenyWindowDoc {
    pub name: Option<String>,
    pub start: Option<String>,
    pub end: Option<String>,
    pub days: Option<String>,
    pub hours: Option<String>,
    pub timezone: Option<String>,
}

/// A protection attached to a release channel or a service.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectionAttachmentDoc {
    #[serde(rename = "ref")]
    pub reference: ProtectionRefDoc,
    pub lifecycle: Vec<LifecycleDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectionRefDoc {
    pub name: ProtectionName,
    /// Values for the protection's parameters.
    #[serde(default)]
    pub parameters: Vec<ParameterValueDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum LifecycleDoc {
    PreApproval(EmptyDoc),
    Deployment(DeploymentLifecycleDoc),
    PostDeployment(PostDeploymentLifecycleDoc),
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmptyDoc {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentLifecycleDoc {
    pub failure_behavior: Option<FailureBehaviorDoc>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub enum FailureBehaviorDoc {
    #[serde(rename = "BLOCK", alias = "block")]
    Block,
    #[serde(rename = "FAIL", alias = "fail")]
    Fail,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostDeploymentLifecycleDoc {
    pub delay_check_duration: Option<DurationDoc>,
    pub check_duration: Option<DurationDoc>,
}

/// A runtime a release channel offers, with the settings of its runner
/// this channel changes (of the same kind as the runtime's runner).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRefDoc {
    pub runtime: RuntimeName,
    pub runner: Option<RunnerDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConstantDoc {
    pub name: String,
    pub string: Option<ConstantValueDoc>,
    pub int: Option<ConstantValueDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConstantValueDoc {
    pub value: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PreconditionDoc {
    ReleaseChannelStable(ReleaseChannelStableDoc),
    ManualApproval(ManualApprovalDoc),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseChannelStableDoc {
    pub release_channel: ReleaseChannelName,
    pub duration: Option<DurationDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManualApprovalDoc {
    pub name: String,
    pub description: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDoc {
    pub name: ServiceName,
    pub application: Option<ApplicationName>,
    pub description: Option<String>,
    /// Which of the release channel's runtimes to use, when it has several.
    pub runtime: Option<RuntimeName>,
    pub custom: Option<CustomDoc>,
    /// The manifests a first-class Kubernetes runtime applies.
    pub kubernetes: Option<ServiceKubernetesDoc>,
    /// The task definition and service settings a first-class ECS runtime
    /// applies.
    pub ecs: Option<ServiceEcsDoc>,
    /// The Cloud Run service a first-class Cloud Run runtime applies.
    pub cloud_run: Option<ServiceCloudRunDoc>,
    /// Parameters set per release (by CI).
    #[serde(default)]
    pub parameters: Vec<ParameterDoc>,
    #[serde(default)]
    pub per_release_channel: Vec<PerReleaseChannelDoc>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub drift_policy: Option<DriftPolicyDoc>,
    /// Protections for this service in every release channel.
    #[serde(default)]
    pub protections: Vec<ProtectionAttachmentDoc>,
    pub auto_rollback: Option<AutoRollbackDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoRollbackDoc {
    #[serde(default)]
    pub disabled: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomDoc {
    #[serde(default)]
    pub parameter_values: Vec<ParameterValueDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PerReleaseChannelDoc {
    pub release_channel: ReleaseChannelName,
    pub runtime: Option<RuntimeName>,
    pub custom: Option<CustomDoc>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DriftPolicyDoc {
    Remediate,
    DetectOnly,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectionDoc {
    pub name: ProtectionName,
    pub description: Option<String>,
    pub runner: Option<RunnerDoc>,
    /// The check to run (exit 0 = pass); or `alert` instead.
    pub task_config: Option<TaskConfigDoc>,
    /// An alert set from outside (`vergence alert set NAME firing`); the
    /// protection passes while it is not firing.
    pub alert: Option<String>,
    /// A PromQL query held to a threshold.
    pub prometheus: Option<PrometheusDoc>,
    /// CloudWatch alarms, none of which may be in ALARM.
    pub cloudwatch_alarm: Option<CloudwatchAlarmDoc>,
    pub poll_interval: Option<DurationDoc>,
    pub timeout: Option<DurationDoc>,
    #[serde(default)]
    pub parameters: Vec<ParameterDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusDoc {
    /// The server's base URL, e.g. `http://prometheus:9090`.
    pub url: String,
    pub query: String,
    pub threshold: ThresholdDoc,
    /// How long a series must be outside the threshold before it fails.
    #[serde(rename = "for")]
    pub for_: Option<DurationDoc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdDoc {
    pub min: Option<f64>,
    pub max: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudwatchAlarmDoc {
    pub names: Vec<String>,
    pub region: Option<String>,
}
