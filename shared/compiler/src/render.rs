//! Turns the checked config and a service's latest release into one
//! [`CompiledInstance`] per release channel, with the service version.
//!
//! Versions: a service's desired version is the version of its latest
//! release; without a release it is `cfg-<hash>` of its compiled jobs, so a
//! config change is a new version that flows through the channels. A config
//! change after a release shows as `<release>+cfg-<hash>`.

pub(crate) mod cloud_run;
pub(crate) mod ecs;
pub(crate) mod manifests;

use std::collections::BTreeMap;

use super::model::*;
use super::template::{Builtin, Reference, Template};
use jiff::SignedDuration;
use vergence_model::error::{Error, Result};
use vergence_model::hashing::sha256_hex;
use vergence_model::{
    ApplicationName, ApplySpec, BuiltinJob, CompiledInstance, CompiledProtection, Desired,
    FetchSpec, GetInfoSpec, InstanceIds, InstanceKey, JobSpec, ParamValue, Precondition,
    ProtectionCheck, Release, ReleaseChannelName, Rollout, ServiceName,
};
use vergence_model::{CloudwatchAlarmCheck, PrometheusCheck, RunnerSpec, SecretRef, Version};

/// Characters of the config hash used in derived versions.
const VERSION_HASH_LEN: usize = 10;

impl ConfigModel {
    /// Fingerprint of everything the service's jobs run, across all release
    /// channels, given release parameter values. Two configs that run the
    /// same commands have the same fingerprint.
    pub fn fingerprint(
        &self,
        app: &ApplicationName,
        service: &ServiceName,
        release_params: &BTreeMap<String, ParamValue>,
    ) -> Result<String> {
        let (application, svc) = self.service(app, service)?;
        let mut specs = Vec::new();
        for channel in &application.release_channels {
            if let Ok(jobs) = self.jobs(application, svc, channel, release_params) {
                specs.push((channel.name.as_str(), jobs));
            }
        }
        let canonical =
            serde_json::to_vec(&specs).map_err(|e| Error::invalid("config", e.to_string()))?;
        Ok(sha256_hex(&canonical))
    }

    /// The desired state of every instance of a service.
    pub fn compile_service(
        &self,
        app: &ApplicationName,
        service: &ServiceName,
        release: Option<&Release>,
    ) -> Result<Vec<(InstanceKey, Desired)>> {
        let (application, svc) = self.service(app, service)?;
        let params = release.map(|r| r.params.clone()).unwrap_or_default();
        let fingerprint = self.fingerprint(app, service, &params)?;
        let hash = &fingerprint[..VERSION_HASH_LEN];
        let version = match release {
            None => Version::from_config(hash),
            Some(r) if r.config_fingerprint == fingerprint => r.version.clone(),
            Some(r) => r.version.with_config(hash),
        };
        let mut out = Vec::new();
        for channel in &application.release_channels {
            let key = InstanceKey::new(app.clone(), service.clone(), channel.name.clone());
            let compiled = self
                .jobs(application, svc, channel, &params)
                .and_then(|jobs| Ok((jobs, self.protections(&key, svc, channel)?)));
            let desired = match compiled {
                Ok((jobs, protections)) => Desired::Ready(Box::new(self.instance(
                    key.clone(),
                    svc,
                    channel,
                    jobs,
                    protections,
                    &version,
                ))),
                Err(reason) => Desired::Unresolved { reason },
            };
            out.push((key, desired));
        }
        Ok(out)
    }

    fn instance(
        &self,
        key: InstanceKey,
        svc: &Service,
        channel: &ReleaseChannel,
        jobs: InstanceJobs,
        protections: Vec<CompiledProtection>,
        version: &Version,
    ) -> CompiledInstance {
        let runtime = self.runtimes.get(&jobs.runtime);
        CompiledInstance {
            ids: InstanceIds::of(&key),
            version: version.clone(),
            runtime: jobs.runtime,
            workspace_root: self.root.clone(),
            apply: ApplySpec {
                job: with_version(jobs.apply, version).into(),
                retryable_exit_codes: runtime
                    .map(|r| r.retryable_exit_codes.clone())
                    .unwrap_or_default(),
                retry_policy: runtime.map(|r| r.retry_policy).unwrap_or_default(),
            },
            fetch: jobs
                .fetch
                .zip(runtime.and_then(|r| r.fetch.as_ref()))
                .map(|(job, f)| FetchSpec {
                    job: with_version(job, version).into(),
                    mode: f.mode,
                    poll_interval: f.poll_interval,
                    steady_state_poll_interval: f.steady_state_poll_interval,
                }),
            get_info: jobs
                .get_info
                .zip(runtime.and_then(|r| r.get_info.as_ref()))
                .map(|(job, g)| GetInfoSpec {
                    job: job.into(),
                    poll_interval: g.poll_interval,
                }),
            convergence_grace_period: runtime.map_or(SignedDuration::from_mins(10), |r| {
                r.convergence_grace_period
            }),
            require_approval_before_apply: runtime.is_some_and(|r| r.require_approval_before_apply),
            preconditions: channel.preconditions.clone(),
            downstream: channel.downstream.clone(),
            drift_policy: svc.drift_policy,
            protections,
            auto_rollback: svc.auto_rollback,
            windows: channel.windows.clone(),
            // The channel's own replaces the runtime's.
            rollout: runtime
                .and_then(|r| channel.rollout_of(r))
                .map(|(rollout, _)| rollout.clone()),
            key,
        }
    }

    /// The protections guarding one instance: the release channel's, then
    /// the service's, one per lifecycle point.
    fn protections(
        &self,
        key: &InstanceKey,
        svc: &Service,
        channel: &ReleaseChannel,
    ) -> Result<Vec<CompiledProtection>, String> {
        let ids = InstanceIds::of(key);
        let builtins = Builtins { key, ids: &ids };
        // Values given where a protection is attached use no parameters.
        let no_params = BTreeMap::new();
        let attachment_scope = Scope {
            params: &no_params,
            constants: &channel.constants,
            builtins: &builtins,
        };
        let mut out = Vec::new();
        for usage in channel.protections.iter().chain(&svc.protections) {
            let Some(protection) = self.protections.get(&usage.name) else {
                return Err(format!("protection {} is not defined", usage.name));
            };
            let mut values = BTreeMap::new();
            for decl in &protection.params {
                let value = match usage.values.get(&decl.name) {
                    Some(t) => t.render(|r| attachment_scope.resolve(r))?,
                    None => decl
                        .default
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                };
                values.insert(decl.name.as_str(), value);
            }
            let scope = Scope {
                params: &values,
                ..attachment_scope
            };
            let check = match &protection.check {
                ProtectionTemplate::Alert(alert) => ProtectionCheck::Alert {
                    alert: alert.clone(),
                },
                ProtectionTemplate::Job { job, runner } => {
                    let job = render_job(job, runner, &scope, &BTreeMap::new(), &BTreeMap::new())?;
                    ProtectionCheck::Job {
                        job: std::sync::Arc::new(job),
                    }
                }
                ProtectionTemplate::Metric { check, timeout } => ProtectionCheck::Job {
                    job: std::sync::Arc::new(metric_job(check, *timeout, &scope)?),
                },
            };
            for lifecycle in &usage.lifecycles {
                out.push(CompiledProtection {
                    name: usage.name.clone(),
                    lifecycle: *lifecycle,
                    check: check.clone(),
                    poll_interval: protection.poll_interval,
                    attached_to: usage.attached_to.clone(),
                });
            }
        }
        Ok(out)
    }

    /// Renders the jobs of one instance. The error is the reason the
    /// instance cannot be resolved yet (a release parameter is missing).
    fn jobs(
        &self,
        application: &Application,
        svc: &Service,
        channel: &ReleaseChannel,
        release_params: &BTreeMap<String, ParamValue>,
    ) -> Result<InstanceJobs, String> {
        let service_channel = svc.channels.get(&channel.name).ok_or_else(|| {
            format!(
                "service {} has no runtime in release channel {}",
                svc.name, channel.name
            )
        })?;
        let runtime = self
            .runtimes
            .get(&service_channel.runtime)
            .ok_or_else(|| format!("runtime {} is not defined", service_channel.runtime))?;
        let key = InstanceKey::new(
            application.name.clone(),
            svc.name.clone(),
            channel.name.clone(),
        );
        let ids = InstanceIds::of(&key);
        let builtins = Builtins {
            key: &key,
            ids: &ids,
        };
        let service_values = service_values(svc, release_params)?;
        let service_scope = Scope {
            params: &service_values,
            constants: &channel.constants,
            builtins: &builtins,
        };
        let runtime_values = runtime_values(
            runtime,
            svc,
            service_channel,
            release_params,
            &service_scope,
        )?;
        let runtime_scope = Scope {
            params: &runtime_values.text,
            ..service_scope
        };
        let mut extra_env = BTreeMap::new();
        for (name, t) in &service_channel.env {
            extra_env.insert(name.clone(), t.render(|r| service_scope.resolve(r))?);
        }
        let secrets = &runtime_values.secrets;
        let runner = channel.runner_of(runtime);
        let render =
            |job: &JobTemplate| render_job(job, runner, &runtime_scope, secrets, &extra_env);
        let mut jobs = InstanceJobs {
            runtime: runtime.name.clone(),
            apply: render(&runtime.apply)?,
            fetch: runtime.fetch.as_ref().map(|f| render(&f.job)).transpose()?,
            get_info: runtime
                .get_info
                .as_ref()
                .map(|g| render(&g.job))
                .transpose()?,
        };
        let resolve = |r: &Reference| service_scope.resolve(r);
        let rollout = channel.rollout_of(runtime);
        let rollout = rollout.as_ref().map(|(r, whose)| (*r, whose.as_str()));
        if let Some((apply, fetch)) = builtin_jobs(
            runtime,
            service_channel,
            &svc.name,
            &key,
            &ids,
            rollout,
            resolve,
        )? {
            jobs.apply.builtin = Some(apply);
            if let Some(job) = jobs.fetch.as_mut() {
                job.builtin = Some(fetch);
            }
        }
        Ok(jobs)
    }
}

/// A first-class runtime's apply and fetch of one instance, to which
/// `rollout` (with whose it is) applies, if any: what the runtime applies,
/// rendered from the service's files; `None` for a custom runtime.
fn builtin_jobs(
    runtime: &Runtime,
    service_channel: &ServiceChannel,
    service: &ServiceName,
    key: &InstanceKey,
    ids: &InstanceIds,
    rollout: Option<(&Rollout, &str)>,
    resolve: impl Fn(&Reference) -> Option<String>,
) -> Result<Option<(BuiltinJob, BuiltinJob)>, String> {
    let missing = |what: &str, kind: &str| {
        format!(
            "service {service} gives no {what} for {kind} runtime {}",
            runtime.name
        )
    };
    if let Some(kubernetes) = &runtime.kubernetes {
        let manifests = service_channel
            .manifests
            .as_ref()
            .ok_or_else(|| missing("manifests", "kubernetes"))?;
        let namespace = kubernetes.namespace.as_deref();
        let objects = manifests::render(manifests, namespace, kubernetes.adopt, key, ids, resolve)?;
        return Ok(Some((
            BuiltinJob::KubernetesApply(objects.clone()),
            BuiltinJob::KubernetesFetch(objects),
        )));
    }
    if let Some(ecs) = &runtime.ecs {
        let files = service_channel
            .ecs
            .as_ref()
            .ok_or_else(|| missing("task definition", "ecs"))?;
        let service = ecs::render(files, ecs, ids, resolve)?;
        return Ok(Some((
            BuiltinJob::EcsApply(service.clone()),
            BuiltinJob::EcsFetch(service),
        )));
    }
    if let Some(cloud_run) = &runtime.cloud_run {
        let file = service_channel
            .cloud_run
            .as_ref()
            .ok_or_else(|| missing("Cloud Run service", "cloudRun"))?;
        let service = cloud_run::render(file, cloud_run, ids, rollout, resolve)?;
        return Ok(Some((
            BuiltinJob::CloudRunApply(service.clone()),
            BuiltinJob::CloudRunFetch(service),
        )));
    }
    Ok(None)
}

/// The service's parameter values in a release: the release's values, else
/// defaults. A required one without a value waits for a release.
fn service_values<'s>(
    svc: &'s Service,
    release_params: &BTreeMap<String, ParamValue>,
) -> Result<BTreeMap<&'s str, String>, String> {
    let mut values = BTreeMap::new();
    for decl in &svc.params {
        match release_params.get(&decl.name).or(decl.default.as_ref()) {
            Some(value) => {
                values.insert(decl.name.as_str(), value.to_string());
            }
            None if decl.required => {
                return Err(format!(
                    "waiting for a release: service parameter '{}' has no default (vergence release {} VERSION --param {}=…)",
                    decl.name, svc.name, decl.name
                ));
            }
            None => {
                values.insert(decl.name.as_str(), String::new());
            }
        }
    }
    Ok(values)
}

/// The runtime's parameter values in one instance.
#[derive(Default)]
struct RuntimeValues<'r> {
    text: BTreeMap<&'r str, String>,
    /// Secret parameters, passed to jobs by reference, never rendered.
    secrets: BTreeMap<&'r str, SecretRef>,
}

/// The runtime's parameter values: the service's values for this release
/// channel (rendered in `service_scope`), else defaults.
fn runtime_values<'r>(
    runtime: &'r Runtime,
    svc: &Service,
    service_channel: &ServiceChannel,
    release_params: &BTreeMap<String, ParamValue>,
    service_scope: &Scope<'_>,
) -> Result<RuntimeValues<'r>, String> {
    let mut values = RuntimeValues::default();
    for decl in &runtime.params {
        match service_channel.values.get(&decl.name) {
            Some(ValueTemplate::Text(t)) => {
                let rendered = t.render(|r| service_scope.resolve(r))?;
                if decl.kind == ParamKind::Int && rendered.parse::<i64>().is_err() {
                    return Err(format!(
                        "parameter '{}' rendered to {rendered:?}, which is not an integer",
                        decl.name
                    ));
                }
                values.text.insert(&decl.name, rendered);
            }
            Some(ValueTemplate::Secret(secret)) => {
                values.secrets.insert(decl.name.as_str(), secret.clone());
            }
            None => {
                let value = passed_through(decl, svc, release_params)?;
                values.text.insert(&decl.name, value);
            }
        }
    }
    Ok(values)
}

/// The value of a runtime parameter the service gives no value: a service
/// parameter of the same name passes straight through, so a release can
/// set a runtime parameter without a template in between; else the
/// runtime's default.
fn passed_through(
    decl: &ParamDecl,
    svc: &Service,
    release_params: &BTreeMap<String, ParamValue>,
) -> Result<String, String> {
    let passed = svc
        .params
        .iter()
        .find(|p| p.name == decl.name)
        .and_then(|p| release_params.get(&p.name).or(p.default.as_ref()));
    let value = passed
        .or(decl.default.as_ref())
        .map(ToString::to_string)
        .unwrap_or_default();
    if decl.kind == ParamKind::Int && passed.is_some() && value.parse::<i64>().is_err() {
        return Err(format!(
            "parameter '{}' is {value:?}, which is not an integer",
            decl.name
        ));
    }
    Ok(value)
}

#[derive(serde::Serialize)]
struct InstanceJobs {
    runtime: vergence_model::RuntimeName,
    apply: JobSpec,
    fetch: Option<JobSpec>,
    get_info: Option<JobSpec>,
}

/// A first-class runtime's job learns the version it applies or checks
/// for only now: the version is derived from the jobs' hash.
fn with_version(mut job: JobSpec, version: &Version) -> JobSpec {
    match job.builtin.as_mut() {
        Some(BuiltinJob::KubernetesApply(objects) | BuiltinJob::KubernetesFetch(objects)) => {
            objects.version = version.to_string();
        }
        Some(BuiltinJob::EcsApply(service) | BuiltinJob::EcsFetch(service)) => {
            service.version = version.to_string();
        }
        Some(BuiltinJob::CloudRunApply(service) | BuiltinJob::CloudRunFetch(service)) => {
            service.version = version.to_string();
        }
        // A protection's check reads the same whatever the version.
        Some(BuiltinJob::Prometheus(_) | BuiltinJob::CloudwatchAlarm(_)) | None => {}
    }
    job
}

/// Renders one job template to run on `runner`: templates filled from
/// `scope`, secret parameters passed by reference (never rendered into the
/// spec), and the service's own `env` on top of the template's.
fn render_job(
    job: &JobTemplate,
    runner: &RunnerSpec,
    scope: &Scope<'_>,
    secrets: &BTreeMap<&str, SecretRef>,
    extra_env: &BTreeMap<String, String>,
) -> Result<JobSpec, String> {
    let mut env = BTreeMap::new();
    let mut secret_env = BTreeMap::new();
    for (name, t) in &job.env {
        match t.sole_reference() {
            Some(Reference::Param(p)) if secrets.contains_key(p.as_str()) => {
                secret_env.insert(name.clone(), secrets[p.as_str()].clone());
            }
            _ => {
                env.insert(name.clone(), t.render(|r| scope.resolve(r))?);
            }
        }
    }
    // The service's environment is more specific than the runtime's.
    env.extend(extra_env.clone());
    Ok(JobSpec {
        runner: runner.clone(),
        image: job
            .image
            .as_ref()
            .map(|t| t.render(|r| scope.resolve(r)))
            .transpose()?,
        cmd: job
            .cmd
            .iter()
            .map(|t| t.render(|r| scope.resolve(r)))
            .collect::<Result<_, _>>()?,
        env,
        secret_env,
        working_dir: job.working_dir.clone(),
        timeout: job.timeout,
        outputs: job.outputs.clone(),
        builtin: None,
    })
}

/// A metric protection's check as a job the engine's own process carries
/// out (the local runner's place: the worker, `vergence up`), rendered
/// for one instance.
fn metric_job(
    check: &MetricTemplate,
    timeout: SignedDuration,
    scope: &Scope<'_>,
) -> Result<JobSpec, String> {
    let render = |t: &Template| t.render(|r| scope.resolve(r));
    let builtin = match check {
        MetricTemplate::Prometheus {
            url,
            query,
            threshold,
            for_,
        } => BuiltinJob::Prometheus(PrometheusCheck {
            url: render(url)?,
            query: render(query)?,
            threshold: *threshold,
            for_: *for_,
        }),
        MetricTemplate::CloudwatchAlarm { names, region } => {
            BuiltinJob::CloudwatchAlarm(CloudwatchAlarmCheck {
                names: names.iter().map(render).collect::<Result<_, _>>()?,
                region: region.as_ref().map(render).transpose()?,
            })
        }
    };
    Ok(JobSpec {
        runner: RunnerSpec::Local,
        image: None,
        cmd: Vec::new(),
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        working_dir: String::new(),
        timeout,
        outputs: Vec::new(),
        builtin: Some(builtin),
    })
}

struct Builtins<'a> {
    key: &'a InstanceKey,
    ids: &'a InstanceIds,
}

impl Builtins<'_> {
    fn value(&self, builtin: Builtin) -> String {
        match builtin {
            Builtin::ApplicationName => self.key.application.to_string(),
            Builtin::ApplicationId => self.ids.application_id.clone(),
            Builtin::ReleaseChannelName => self.key.release_channel.to_string(),
            Builtin::ReleaseChannelId => self.ids.release_channel_id.clone(),
            Builtin::ServiceName => self.key.service.to_string(),
            Builtin::ServiceId => self.ids.service_id.clone(),
        }
    }
}

/// What the templates of one instance resolve against: parameter values
/// (the service's or the runtime's), the release channel's constants and
/// the built-ins.
#[derive(Clone, Copy)]
struct Scope<'s> {
    params: &'s BTreeMap<&'s str, String>,
    constants: &'s BTreeMap<String, String>,
    builtins: &'s Builtins<'s>,
}

impl Scope<'_> {
    fn resolve(&self, reference: &Reference) -> Option<String> {
        match reference {
            Reference::Param(name) => self.params.get(name.as_str()).cloned(),
            Reference::Constant(name) => self.constants.get(name).cloned(),
            Reference::Builtin(b) => Some(self.builtins.value(*b)),
        }
    }
}

/// Release channels in promotion order: every channel after the ones its
/// preconditions wait for, otherwise in the order written.
pub fn promotion_order(application: &Application) -> Vec<ReleaseChannelName> {
    let mut ordered: Vec<ReleaseChannelName> = Vec::new();
    while ordered.len() < application.release_channels.len() {
        let before = ordered.len();
        for channel in &application.release_channels {
            if ordered.contains(&channel.name) {
                continue;
            }
            let ready = Precondition::upstream_channels(&channel.preconditions)
                .all(|u| ordered.contains(u));
            if ready {
                ordered.push(channel.name.clone());
            }
        }
        if ordered.len() == before {
            // Cycles are rejected by the checker; stop rather than loop.
            break;
        }
    }
    ordered
}
