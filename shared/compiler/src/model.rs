//! The checked config: every reference resolved, every template parsed, every
//! value typed. Built by [`super::check`]; turned into compiled instances by
//! [`super::render`]. Lookups by name and the typing of a release's
//! parameters are here too, for the control operations.

use std::collections::{BTreeMap, BTreeSet};

use jiff::SignedDuration;

use super::template::Template;
use vergence_model::adoption::Adopt;
use vergence_model::error::{Error, Result};
use vergence_model::{
    ApplicationName, ConfigErrors, DriftPolicy, FetchMode, InstanceKey, Lifecycle, LocalProgram,
    ParamValue, Precondition, ProtectionName, ReleaseChannelName, RetryPolicy, Rollout, RunnerSpec,
    RunnerUse, RuntimeName, SecretRef, ServiceName, TimeWindows,
};

/// A config that passed every check.
#[derive(Clone, Debug)]
pub struct ConfigModel {
    /// Hash of the bundle this model was checked from.
    pub hash: String,
    pub root: Option<String>,
    pub applications: BTreeMap<ApplicationName, Application>,
    pub runtimes: BTreeMap<RuntimeName, Runtime>,
    pub protections: BTreeMap<ProtectionName, Protection>,
    /// Every runner the config names, with where, in file and line order.
    pub runner_uses: Vec<RunnerUse>,
    /// The program of every local job, in file and line order.
    pub local_programs: Vec<LocalProgram>,
    /// What stops local jobs from starting in a serverless deployment, in
    /// file and line order.
    pub serverless_errors: ConfigErrors,
    /// Every file with the applications it concerns, for splitting the
    /// config into per-application parts.
    pub file_applications: BTreeMap<String, BTreeSet<ApplicationName>>,
}

impl ConfigModel {
    /// Every instance the config defines, in a stable order.
    pub fn instance_keys(&self) -> Vec<InstanceKey> {
        let mut keys = Vec::new();
        for app in self.applications.values() {
            for service in app.services.values() {
                for channel in &app.release_channels {
                    keys.push(InstanceKey::new(
                        app.name.clone(),
                        service.name.clone(),
                        channel.name.clone(),
                    ));
                }
            }
        }
        keys
    }

    pub fn application(&self, name: &ApplicationName) -> Result<&Application> {
        self.applications
            .get(name)
            .ok_or_else(|| Error::not_found(format!("application {name}")))
    }

    pub fn service(
        &self,
        app: &ApplicationName,
        name: &ServiceName,
    ) -> Result<(&Application, &Service)> {
        let application = self.application(app)?;
        let service = application
            .services
            .get(name)
            .ok_or_else(|| Error::not_found(format!("service {name} in application {app}")))?;
        Ok((application, service))
    }

    /// The application of a service named without one: the only one that has it.
    pub fn application_of(&self, service: &ServiceName) -> Result<ApplicationName> {
        let owners: Vec<&ApplicationName> = self
            .applications
            .values()
            .filter(|a| a.services.contains_key(service))
            .map(|a| &a.name)
            .collect();
        match owners.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(Error::not_found(format!("service {service}"))),
            several => Err(Error::invalid(
                "app",
                format!(
                    "service {service} exists in several applications ({}); name one",
                    several
                        .iter()
                        .map(|a| a.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// Types raw `NAME=VALUE` release parameters against the service's
    /// declarations. Unknown names and missing required values are errors.
    pub fn release_params(
        &self,
        app: &ApplicationName,
        service: &ServiceName,
        raw: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, ParamValue>> {
        vergence_model::release::check_param_sizes(raw)?;
        let (_, svc) = self.service(app, service)?;
        let mut typed = BTreeMap::new();
        for (name, value) in raw {
            let Some(decl) = svc.params.iter().find(|p| &p.name == name) else {
                let declared: Vec<&str> = svc.params.iter().map(|p| p.name.as_str()).collect();
                return Err(Error::invalid(
                    format!("param {name}"),
                    format!(
                        "service {service} declares no parameter '{name}' (it declares: {})",
                        if declared.is_empty() {
                            "none".to_owned()
                        } else {
                            declared.join(", ")
                        }
                    ),
                ));
            };
            let parsed = match decl.kind {
                ParamKind::String => ParamValue::String(value.clone()),
                ParamKind::DockerImage => {
                    super::check::check_docker_image(value)
                        .map_err(|e| Error::invalid(format!("param {name}"), e))?;
                    ParamValue::DockerImage(value.clone())
                }
                ParamKind::Int => ParamValue::Int(value.parse().map_err(|_| {
                    Error::invalid(
                        format!("param {name}"),
                        format!("{value:?} is not an integer"),
                    )
                })?),
                ParamKind::Secret => {
                    return Err(Error::invalid(
                        format!("param {name}"),
                        "secret parameters cannot be set by a release",
                    ));
                }
            };
            typed.insert(name.clone(), parsed);
        }
        for decl in &svc.params {
            if decl.required && !typed.contains_key(&decl.name) {
                return Err(Error::invalid(
                    format!("param {}", decl.name),
                    format!(
                        "service {service} requires parameter '{}' in every release",
                        decl.name
                    ),
                ));
            }
        }
        Ok(typed)
    }
}

#[derive(Clone, Debug)]
pub struct Application {
    pub name: ApplicationName,
    /// In the order written; promotion order comes from preconditions.
    pub release_channels: Vec<ReleaseChannel>,
    pub services: BTreeMap<ServiceName, Service>,
    /// Who is told about which events (docs/notifications.md).
    pub notifications: Vec<vergence_model::notification::NotificationRule>,
    /// The CI jobs trusted by their OIDC token (docs/security.md).
    pub trust: Vec<vergence_model::trust::TrustRule>,
}

impl Application {
    pub fn channel(&self, name: &ReleaseChannelName) -> Option<&ReleaseChannel> {
        self.release_channels.iter().find(|c| &c.name == name)
    }
}

#[derive(Clone, Debug)]
pub struct ReleaseChannel {
    pub name: ReleaseChannelName,
    pub runtimes: Vec<RuntimeName>,
    pub constants: BTreeMap<String, String>,
    pub preconditions: Vec<Precondition>,
    /// Channels whose preconditions name this one.
    pub downstream: Vec<ReleaseChannelName>,
    pub protections: Vec<ProtectionUse>,
    pub windows: TimeWindows,
    /// The runner of each runtime whose runner this channel overrides: the
    /// runtime's own with the channel's settings merged over it.
    pub runner_overrides: BTreeMap<RuntimeName, RunnerSpec>,
    /// The channel's own rollout, which replaces its runtimes'.
    pub rollout: Option<Rollout>,
}

impl ReleaseChannel {
    /// The runner `runtime`'s jobs run on in this channel.
    pub fn runner_of<'r>(&'r self, runtime: &'r Runtime) -> &'r RunnerSpec {
        self.runner_overrides
            .get(&runtime.name)
            .unwrap_or(&runtime.runner)
    }

    /// The rollout of `runtime`'s instances in this channel, the channel's
    /// own before the runtime's, with whose it is ("release channel
    /// 'prod'"), for messages.
    pub fn rollout_of<'r>(&'r self, runtime: &'r Runtime) -> Option<(&'r Rollout, String)> {
        if let Some(rollout) = &self.rollout {
            return Some((rollout, format!("release channel '{}'", self.name)));
        }
        let rollout = runtime.cloud_run.as_ref()?.rollout.as_ref()?;
        Some((rollout, format!("runtime '{}'", runtime.name)))
    }
}

/// The kind of a declared parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    String,
    Int,
    DockerImage,
    Secret,
}

impl ParamKind {
    pub fn name(self) -> &'static str {
        match self {
            ParamKind::String => "string",
            ParamKind::Int => "int",
            ParamKind::DockerImage => "dockerImage",
            ParamKind::Secret => "secret",
        }
    }
}

#[derive(Clone, Debug)]
pub struct ParamDecl {
    pub name: String,
    pub kind: ParamKind,
    pub required: bool,
    pub default: Option<ParamValue>,
}

/// A command, image and environment whose strings are templates. Its
/// runner is its runtime's (per release channel) or its protection's.
#[derive(Clone, Debug)]
pub struct JobTemplate {
    pub image: Option<Template>,
    pub cmd: Vec<Template>,
    pub env: BTreeMap<String, Template>,
    pub working_dir: String,
    pub timeout: SignedDuration,
    pub outputs: Vec<String>,
}

impl JobTemplate {
    /// The job of a first-class runtime, which runs no program: only where
    /// (for local paths in messages) and how long.
    pub fn builtin(working_dir: &str, timeout: SignedDuration) -> Self {
        Self {
            image: None,
            cmd: Vec::new(),
            env: BTreeMap::new(),
            working_dir: working_dir.to_owned(),
            timeout,
            outputs: Vec::new(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Runtime {
    pub name: RuntimeName,
    /// Where its jobs run, unless a release channel overrides it.
    pub runner: RunnerSpec,
    pub params: Vec<ParamDecl>,
    pub apply: JobTemplate,
    pub retryable_exit_codes: Vec<i32>,
    pub retry_policy: RetryPolicy,
    pub fetch: Option<FetchTemplate>,
    pub get_info: Option<GetInfoTemplate>,
    pub convergence_grace_period: SignedDuration,
    pub require_approval_before_apply: bool,
    /// Set for the first-class Kubernetes runtime, whose apply and fetch
    /// are the agent's own (server-side apply, watch-backed read) of each
    /// service's manifests.
    pub kubernetes: Option<KubernetesRuntime>,
    /// Set for the first-class ECS runtime, whose apply and fetch are ECS
    /// API calls made by Vergence itself with each service's files.
    pub ecs: Option<EcsRuntime>,
    /// Set for the first-class Cloud Run runtime, whose apply and fetch are
    /// Cloud Run Admin API calls made by Vergence itself.
    pub cloud_run: Option<CloudRunRuntime>,
}

/// A first-class Cloud Run runtime's own settings.
#[derive(Clone, Debug)]
pub struct CloudRunRuntime {
    pub project: String,
    pub region: String,
    pub adopt: Adopt,
    /// Only a Cloud Run runtime carries a rollout: its revisions are what
    /// traffic can be split between.
    pub rollout: Option<Rollout>,
}

/// A first-class ECS runtime's own settings.
#[derive(Clone, Debug)]
pub struct EcsRuntime {
    pub cluster: String,
    /// The deployment's own region when unset.
    pub region: Option<String>,
    pub adopt: Adopt,
}

/// A service's ECS files for one release channel: each a template, with
/// its path relative to the config root.
#[derive(Clone, Debug)]
pub struct EcsFiles {
    pub task_definition: (String, Template),
    pub service: (String, Template),
}

/// A first-class Kubernetes runtime's own settings (its agent is its runner).
#[derive(Clone, Debug)]
pub struct KubernetesRuntime {
    /// Where namespaced objects that name none go; the agent's own if unset.
    pub namespace: Option<String>,
    pub adopt: Adopt,
}

/// A service's manifests for one release channel: each file a template.
#[derive(Clone, Debug)]
pub struct Manifests {
    /// The directory, relative to the config root.
    pub dir: String,
    /// Path (relative to the config root) and template of each file, in
    /// path order.
    pub files: Vec<(String, Template)>,
}

impl Runtime {
    pub fn param(&self, name: &str) -> Option<&ParamDecl> {
        self.params.iter().find(|p| p.name == name)
    }
}

#[derive(Clone, Debug)]
pub struct FetchTemplate {
    pub job: JobTemplate,
    pub mode: FetchMode,
    pub poll_interval: SignedDuration,
    pub steady_state_poll_interval: SignedDuration,
}

#[derive(Clone, Debug)]
pub struct GetInfoTemplate {
    pub job: JobTemplate,
    pub poll_interval: SignedDuration,
}

#[derive(Clone, Debug)]
pub struct Service {
    pub name: ServiceName,
    /// Parameters set per release.
    pub params: Vec<ParamDecl>,
    pub channels: BTreeMap<ReleaseChannelName, ServiceChannel>,
    pub drift_policy: DriftPolicy,
    pub protections: Vec<ProtectionUse>,
    pub auto_rollback: bool,
}

/// A `protection` document.
#[derive(Clone, Debug)]
pub struct Protection {
    pub name: ProtectionName,
    pub params: Vec<ParamDecl>,
    pub check: ProtectionTemplate,
    pub poll_interval: SignedDuration,
}

#[derive(Clone, Debug)]
pub enum ProtectionTemplate {
    /// A check job, run on the protection's own runner wherever the
    /// protection is attached.
    Job {
        job: Box<JobTemplate>,
        runner: RunnerSpec,
    },
    Alert(String),
    /// A query of a metric system, carried out by whoever runs the engine.
    Metric {
        check: MetricTemplate,
        timeout: SignedDuration,
    },
}

/// A metric protection's query, its text templates not rendered yet.
#[derive(Clone, Debug)]
pub enum MetricTemplate {
    Prometheus {
        url: Template,
        query: Template,
        threshold: vergence_model::Threshold,
        for_: SignedDuration,
    },
    CloudwatchAlarm {
        names: Vec<Template>,
        region: Option<Template>,
    },
}

/// A protection attached somewhere, with its parameter values (which may
/// use constants and builtins) and the lifecycle points it guards.
#[derive(Clone, Debug)]
pub struct ProtectionUse {
    pub name: ProtectionName,
    pub values: BTreeMap<String, Template>,
    pub lifecycles: Vec<Lifecycle>,
    pub attached_to: String,
}

/// What a service runs in one release channel.
#[derive(Clone, Debug)]
pub struct ServiceChannel {
    pub runtime: RuntimeName,
    /// Values for the runtime's parameters (service-wide, overridden per channel).
    pub values: BTreeMap<String, ValueTemplate>,
    /// Extra environment for every job of the instance.
    pub env: BTreeMap<String, Template>,
    /// What a first-class Kubernetes runtime applies for the service.
    pub manifests: Option<Manifests>,
    /// What a first-class ECS runtime applies for the service.
    pub ecs: Option<EcsFiles>,
    /// The Cloud Run service file (path, template) a first-class Cloud
    /// Run runtime applies for the service.
    pub cloud_run: Option<(String, Template)>,
}

#[derive(Clone, Debug)]
pub enum ValueTemplate {
    /// A value rendered with the service's parameters, constants and built-ins.
    Text(Template),
    Secret(SecretRef),
}
