//! The checked config: every reference resolved, every template parsed, every
//! value typed. Built by [`super::check`]; turned into compiled instances by
//! [`super::render`].

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::template::Template;
use vergence_model::{
    ApplicationName, DriftPolicy, FetchMode, Lifecycle, ParamValue, Precondition, ProtectionName,
    ReleaseChannelName, RetryPolicy, RunnerSpec, RuntimeName, SecretRef, ServiceName, TimeWindows,
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
}

#[derive(Clone, Debug)]
pub struct Application {
    pub name: ApplicationName,
    /// In the order written; promotion order comes from preconditions.
    pub release_channels: Vec<ReleaseChannel>,
    pub services: BTreeMap<ServiceName, Service>,
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

/// A command, image and environment whose strings are templates.
#[derive(Clone, Debug)]
pub struct JobTemplate {
    pub runner: RunnerSpec,
    pub image: Option<Template>,
    pub cmd: Vec<Template>,
    pub env: BTreeMap<String, Template>,
    pub working_dir: String,
    pub timeout: SignedDuration,
    pub outputs: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Runtime {
    pub name: RuntimeName,
    pub params: Vec<ParamDecl>,
    pub apply: JobTemplate,
    pub retryable_exit_codes: Vec<i32>,
    pub retry_policy: RetryPolicy,
    pub fetch: Option<FetchTemplate>,
    pub get_info: Option<GetInfoTemplate>,
    pub convergence_grace_period: SignedDuration,
    pub require_approval_before_apply: bool,
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
    Job(JobTemplate),
    Alert(String),
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
}

#[derive(Clone, Debug)]
pub enum ValueTemplate {
    /// A value rendered with the service's parameters, constants and built-ins.
    Text(Template),
    Secret(SecretRef),
}
