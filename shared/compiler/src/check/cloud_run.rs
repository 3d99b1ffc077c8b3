//! Checks the first-class Cloud Run runtime (`runtime: {cloudRun:
//! {project, region}}`) and the file each service gives it (`service:
//! {cloudRun: {service: FILE}}`): a file of the config, a template over the
//! service's parameters, the release channel's constants and the built-ins,
//! holding the Cloud Run service (Admin API v2) Vergence creates or updates.

use jiff::SignedDuration;

use super::Checker;
use super::field_path::FieldPath;
use super::service::ServiceInput;
use crate::config::ParsedDocument;
use crate::config::schema::{CloudRunRuntimeDoc, RuntimeDoc};
use crate::model::{CloudRunRuntime, JobTemplate, ReleaseChannel, Runtime};
use crate::render::cloud_run::{check_service, check_traffic};
use crate::render::ecs::parse;
use crate::template::Template;
use vergence_model::{
    CloudRunRunnerSpec, ConfigError, RunnerKind, RunnerSpec, RunnerUse, RunnerUser, Source,
};

/// How long one apply or read may take: one or two API calls.
const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);
/// A revision usually gets ready within a minute.
const DEFAULT_POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(10);
const DEFAULT_STEADY_STATE_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(5);

impl<'a> Checker<'a> {
    /// Checks a runtime with a `cloudRun` block; `None` when it has
    /// errors, all reported.
    pub(super) fn cloud_run_runtime(
        &mut self,
        document: &'a ParsedDocument,
        doc: &RuntimeDoc,
        cloud_run: &CloudRunRuntimeDoc,
    ) -> Option<Runtime> {
        let source = &document.source;
        let path = FieldPath::root("runtime").key("cloudRun");
        let before = self.errors.len();
        let (project, region) = self.cloud_run_runtime_settings(source, doc, cloud_run);
        self.runner_uses.push(RunnerUse {
            kind: RunnerKind::CloudRun,
            by: RunnerUser::Runtime(doc.name.clone()),
            at: source.location(&path),
        });
        if self.errors.len() != before {
            return None;
        }
        let (project, region) = (project?, region?);
        let job = JobTemplate::builtin(
            &document.dir,
            cloud_run.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        );
        // The Cloud Run kind: whoever runs the engine needs Google
        // credentials for Cloud Run; the job's builtin says it is no job run.
        let runner = RunnerSpec::CloudRun(CloudRunRunnerSpec {
            project: project.clone(),
            region: region.clone(),
            service_account: None,
            cpu: None,
            memory: None,
        });
        let poll = cloud_run
            .poll_interval
            .map_or(DEFAULT_POLL_INTERVAL, |d| d.0);
        let steady = cloud_run
            .steady_state_poll_interval
            .map_or(DEFAULT_STEADY_STATE_POLL_INTERVAL, |d| d.0);
        let rollout = doc.rollout.as_ref().and_then(|rollout| {
            self.rollout(source, &FieldPath::root("runtime").key("rollout"), rollout)
        });
        Some(Runtime {
            cloud_run: Some(CloudRunRuntime {
                project,
                region,
                adopt: cloud_run.adopt.map(Into::into).unwrap_or_default(),
                rollout,
            }),
            ..Self::builtin_runtime(doc, runner, job, poll, steady)
        })
    }

    /// Reports the keys a Cloud Run runtime has no use for and its missing
    /// settings; returns its project and region.
    fn cloud_run_runtime_settings(
        &mut self,
        source: &Source,
        doc: &RuntimeDoc,
        cloud_run: &CloudRunRuntimeDoc,
    ) -> (Option<String>, Option<String>) {
        let root = FieldPath::root("runtime");
        let path = root.key("cloudRun");
        self.keys_without_effect(
            source,
            doc,
            "a cloudRun",
            "creates and updates its services' Cloud Run services itself",
            &[],
        );
        let required = |value: &Option<String>| value.clone().filter(|v| !v.trim().is_empty());
        let (project, region) = (required(&cloud_run.project), required(&cloud_run.region));
        if project.is_none() {
            self.err(
                source,
                &path.key("project"),
                "required: the Google Cloud project of the services",
            );
        }
        if region.is_none() {
            self.err(
                source,
                &path.key("region"),
                "required: the Cloud Run region of the services, e.g. europe-west1",
            );
        }
        (project, region)
    }

    /// The service's Cloud Run file in `channel`, whose runtime is
    /// `runtime`: required by a Cloud Run runtime, refused by any other.
    pub(super) fn service_cloud_run_file(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        runtime: &Runtime,
    ) -> Result<Option<(String, Template)>, ()> {
        let path = FieldPath::root("service").key("cloudRun");
        match (&runtime.cloud_run, &svc.doc.cloud_run) {
            (None, None) => Ok(None),
            (None, Some(_)) => {
                self.err(
                    svc.source,
                    &path,
                    format!(
                        "has no effect: runtime '{}' (release channel '{}') is not a cloudRun runtime; a Cloud Run service file is for a runtime with `cloudRun: {{project, region}}`",
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
                        "runtime '{}' (release channel '{}') is a cloudRun runtime: give the service's file with `cloudRun: {{service: FILE}}`",
                        runtime.name, channel.name
                    ),
                );
                Err(())
            }
            (Some(_), Some(doc)) => self
                .cloud_run_file(svc, channel, runtime, &path.key("service"), &doc.service)
                .map(Some)
                .ok_or(()),
        }
    }

    /// The file, checked now when it has no templates; one with templates
    /// is checked once rendered, but for a `traffic` of its own where a
    /// rollout applies, which no value can take away.
    fn cloud_run_file(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        runtime: &Runtime,
        path: &FieldPath,
        raw: &str,
    ) -> Option<(String, Template)> {
        let rollout = channel.rollout_of(runtime);
        let rollout = rollout.as_ref().map(|(r, whose)| (*r, whose.as_str()));
        let (file, template) = self.data_file_template(svc, channel, path, raw, |map| {
            check_service(map)?;
            check_traffic(map, rollout)
        })?;
        // A stand-in for every value: "0" keeps JSON and YAML readable
        // wherever a template stands (a number, text, a key). A file that
        // does not read so is left to the check once rendered.
        let stand_in = template.render(|_| Some("0".to_owned())).ok();
        let spec = stand_in.and_then(|text| parse(&file, &text).ok());
        if let Some(Err(message)) = spec.map(|spec| check_traffic(&spec, rollout)) {
            self.errors.push(ConfigError {
                file,
                line: None,
                path: String::new(),
                message,
            });
            return None;
        }
        Some((file, template))
    }
}
