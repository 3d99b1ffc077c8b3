//! Checks the first-class ECS runtime (`runtime: {ecs: {cluster, region}}`)
//! and the files each service gives it (`service: {ecs: {taskDefinition:
//! FILE, service: FILE}}`): files of the config, templates over the
//! service's parameters, the release channel's constants and the
//! built-ins, holding the RegisterTaskDefinition and CreateService
//! requests Vergence sends.

use jiff::SignedDuration;

use super::Checker;
use super::field_path::FieldPath;
use super::service::ServiceInput;
use crate::config::schema::{EcsRuntimeDoc, RuntimeDoc};
use crate::config::{ParsedDocument, manifests_dir};
use crate::model::{EcsFiles, EcsRuntime, JobTemplate, ReleaseChannel, Runtime};
use crate::render::ecs::{check_service, check_task_definition, parse};
use crate::template::Template;
use vergence_model::{
    ConfigBundle, ConfigError, EcsRunnerSpec, RunnerKind, RunnerSpec, RunnerUse, RunnerUser, Source,
};

/// How long one apply or read may take: a handful of API calls.
const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);
/// A rollout takes minutes; reading it is one DescribeServices.
const DEFAULT_POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(15);
const DEFAULT_STEADY_STATE_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(5);

impl<'a> Checker<'a> {
    /// Checks a runtime with an `ecs` block; `None` when it has errors,
    /// all reported.
    pub(super) fn ecs_runtime(
        &mut self,
        document: &'a ParsedDocument,
        doc: &RuntimeDoc,
        ecs: &EcsRuntimeDoc,
    ) -> Option<Runtime> {
        let source = &document.source;
        let path = FieldPath::root("runtime").key("ecs");
        let before = self.errors.len();
        let cluster = self.ecs_runtime_settings(source, doc, ecs);
        self.runner_uses.push(RunnerUse {
            kind: RunnerKind::Ecs,
            by: RunnerUser::Runtime(doc.name.clone()),
            at: source.location(&path),
        });
        if self.errors.len() != before {
            return None;
        }
        let cluster = cluster?;
        let job = JobTemplate::builtin(&document.dir, ecs.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0));
        // The ECS kind: whoever runs the engine needs AWS credentials for
        // ECS, as for ECS tasks; the job's builtin says it is no task.
        let runner = RunnerSpec::Ecs(EcsRunnerSpec {
            cluster: cluster.clone(),
            region: ecs.region.clone(),
            subnets: Vec::new(),
            security_groups: Vec::new(),
            assign_public_ip: false,
            task_role_arn: None,
            execution_role_arn: None,
            cpu: EcsRunnerSpec::DEFAULT_CPU,
            memory: EcsRunnerSpec::DEFAULT_MEMORY,
            log_group: EcsRunnerSpec::DEFAULT_LOG_GROUP.to_owned(),
        });
        let poll = ecs.poll_interval.map_or(DEFAULT_POLL_INTERVAL, |d| d.0);
        let steady = ecs
            .steady_state_poll_interval
            .map_or(DEFAULT_STEADY_STATE_POLL_INTERVAL, |d| d.0);
        Some(Runtime {
            ecs: Some(EcsRuntime {
                cluster,
                region: ecs.region.clone(),
                adopt: ecs.adopt.map(Into::into).unwrap_or_default(),
            }),
            ..Self::builtin_runtime(doc, runner, job, poll, steady)
        })
    }

    /// Reports the keys an ECS runtime has no use for and its missing or
    /// empty settings; returns its cluster.
    fn ecs_runtime_settings(
        &mut self,
        source: &Source,
        doc: &RuntimeDoc,
        ecs: &EcsRuntimeDoc,
    ) -> Option<String> {
        let root = FieldPath::root("runtime");
        let path = root.key("ecs");
        self.keys_without_effect(
            source,
            doc,
            "an ecs",
            "registers and updates its services' task definitions and ECS services itself",
            &[],
        );
        let cluster = ecs.cluster.clone().filter(|c| !c.trim().is_empty());
        if cluster.is_none() {
            self.err(
                source,
                &path.key("cluster"),
                "required: the name or ARN of the ECS cluster the services run in",
            );
        }
        if ecs.region.as_deref().is_some_and(|r| r.trim().is_empty()) {
            self.err(
                source,
                &path.key("region"),
                "must not be empty (leave it out to use the deployment's own region)",
            );
        }
        cluster
    }

    /// The service's ECS files in `channel`, whose runtime is `runtime`:
    /// required by an ECS runtime, refused by any other. `Err` when the
    /// channel cannot run (reported).
    pub(super) fn service_ecs_files(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        runtime: &Runtime,
    ) -> Result<Option<EcsFiles>, ()> {
        let path = FieldPath::root("service").key("ecs");
        match (&runtime.ecs, &svc.doc.ecs) {
            (None, None) => Ok(None),
            (None, Some(_)) => {
                self.err(
                    svc.source,
                    &path,
                    format!(
                        "has no effect: runtime '{}' (release channel '{}') is not an ecs runtime; a task definition and service file are for a runtime with `ecs: {{cluster}}`",
                        runtime.name, channel.name
                    ),
                );
                Err(())
            }
            (Some(_), None) => {
                self.err(
                    svc.source,
                    &FieldPath::root("service"),
                    format!(
                        "runtime '{}' (release channel '{}') is an ecs runtime: give the service's files with `ecs: {{taskDefinition: FILE, service: FILE}}`",
                        runtime.name, channel.name
                    ),
                );
                Err(())
            }
            (Some(_), Some(doc)) => {
                let task =
                    self.ecs_file(svc, channel, EcsFile::TaskDefinition, &doc.task_definition);
                let service = self.ecs_file(svc, channel, EcsFile::Service, &doc.service);
                match (task, service) {
                    (Some(task_definition), Some(service)) => Ok(Some(EcsFiles {
                        task_definition,
                        service,
                    })),
                    _ => Err(()),
                }
            }
        }
    }

    /// One file of the bundle as a template; a file that uses no template
    /// is checked now, as it will be sent.
    fn ecs_file(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        kind: EcsFile,
        raw: &str,
    ) -> Option<(String, Template)> {
        let key = match kind {
            EcsFile::TaskDefinition => "taskDefinition",
            EcsFile::Service => "service",
        };
        let path = &FieldPath::root("service").key("ecs").key(key);
        self.data_file_template(svc, channel, path, raw, |map| match kind {
            EcsFile::TaskDefinition => check_task_definition(map),
            EcsFile::Service => check_service(map).map(|_| ()),
        })
    }

    /// A data file of the bundle a service names (`raw`, written at
    /// `path`) as a template over the service's values; a file that uses no
    /// template is parsed and `check`ed now, as it will be sent.
    pub(super) fn data_file_template(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        path: &FieldPath,
        raw: &str,
        check: impl Fn(&serde_json::Map<String, serde_json::Value>) -> Result<(), String>,
    ) -> Option<(String, Template)> {
        let Some(file) = manifests_dir(&svc.source.file, raw).filter(|f| is_data_file(f)) else {
            self.err(
                svc.source,
                path,
                format!(
                    "{raw:?} must be a *.json, *.yaml or *.yml file inside the config directory (it is pushed with the config)"
                ),
            );
            return None;
        };
        let bundle: &'a ConfigBundle = self.bundle;
        let Some(text) = bundle.files.get(&file) else {
            self.err(
                svc.source,
                path,
                format!("file {file:?} is not in the config directory"),
            );
            return None;
        };
        let first_new = self.errors.len();
        let template = self.service_template(svc, channel, path, text);
        // The template's errors are the service's, about this file.
        for error in &mut self.errors[first_new..] {
            error.message = format!("in {file}: {}", error.message);
        }
        let template = template?;
        if template.references().next().is_none() {
            let checked =
                parse(&file, text).and_then(|map| check(&map).map_err(|message| (None, message)));
            if let Err((line, message)) = checked {
                self.errors.push(ConfigError {
                    file: file.clone(),
                    line,
                    path: String::new(),
                    message,
                });
                return None;
            }
        }
        Some((file, template))
    }
}

#[derive(Clone, Copy)]
enum EcsFile {
    TaskDefinition,
    Service,
}

/// Files a service may point at for their content (not config documents).
pub(crate) fn is_data_file(file: &str) -> bool {
    [".json", ".yaml", ".yml"]
        .iter()
        .any(|ext| file.ends_with(ext))
}
