//! Checks the first-class Kubernetes runtime (`runtime: {kubernetes:
//! {agent, namespace}}`) and the manifests each service gives it
//! (`service: {kubernetes: {manifests: DIR}}`): a directory of the config,
//! whose YAML files are templates over the service's parameters, the
//! release channel's constants and the built-ins.

use jiff::SignedDuration;

use super::Checker;
use super::field_path::FieldPath;
use super::service::ServiceInput;
use crate::config::schema::{KubernetesRunnerDoc, KubernetesRuntimeDoc, RuntimeDoc};
use crate::config::yaml;
use crate::config::{ParsedDocument, is_inside, manifests_dir};
use crate::model::{JobTemplate, KubernetesRuntime, Manifests, ReleaseChannel, Runtime};
use crate::render::manifests::check_objects;
use vergence_model::{
    ConfigBundle, ConfigError, KubernetesRunnerSpec, RunnerKind, RunnerSpec, RunnerUse, RunnerUser,
};

/// How long one apply or read of the live objects may take.
const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);
/// Reads come from the agent's watch cache, so frequent ones are cheap.
const DEFAULT_POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(5);
/// A backstop only: the agent reports drift as its watch sees it.
const DEFAULT_STEADY_STATE_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(5);

impl<'a> Checker<'a> {
    /// Checks a runtime with a `kubernetes` block; `None` when it has
    /// errors, all reported.
    pub(super) fn kubernetes_runtime(
        &mut self,
        document: &'a ParsedDocument,
        doc: &RuntimeDoc,
        kubernetes: &KubernetesRuntimeDoc,
    ) -> Option<Runtime> {
        let source = &document.source;
        let root = FieldPath::root("runtime");
        let path = root.key("kubernetes");
        let before = self.errors.len();
        self.keys_without_effect(
            source,
            doc,
            "a kubernetes",
            "applies and reads its services' manifests itself, through its agent",
            &[],
        );
        let runner = KubernetesRunnerDoc {
            agent: kubernetes.agent.clone(),
            namespace: kubernetes.namespace.clone(),
            service_account: None,
        };
        self.kubernetes_settings(source, &path, &runner);
        if kubernetes.agent.is_none() {
            self.err(
                source,
                &path.key("agent"),
                "required: the agent (vergence-agent in the cluster) that applies the manifests",
            );
        }
        self.runner_uses.push(RunnerUse {
            kind: RunnerKind::Kubernetes,
            by: RunnerUser::Runtime(doc.name.clone()),
            at: source.location(&path),
        });
        if self.errors.len() != before {
            return None;
        }
        let job = JobTemplate::builtin(
            &document.dir,
            kubernetes.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        );
        let runner = RunnerSpec::Kubernetes(KubernetesRunnerSpec {
            agent: kubernetes.agent.clone()?,
            namespace: kubernetes.namespace.clone(),
            service_account: None,
        });
        let poll = kubernetes
            .poll_interval
            .map_or(DEFAULT_POLL_INTERVAL, |d| d.0);
        let steady = kubernetes
            .steady_state_poll_interval
            .map_or(DEFAULT_STEADY_STATE_POLL_INTERVAL, |d| d.0);
        Some(Runtime {
            kubernetes: Some(KubernetesRuntime {
                namespace: kubernetes.namespace.clone(),
                adopt: kubernetes.adopt.map(Into::into).unwrap_or_default(),
            }),
            ..Self::builtin_runtime(doc, runner, job, poll, steady)
        })
    }

    /// The service's manifests in `channel`, whose runtime is `runtime`:
    /// required by a Kubernetes runtime, refused by any other. `Err` when
    /// the channel cannot run (reported).
    pub(super) fn service_manifests(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        runtime: &Runtime,
    ) -> Result<Option<Manifests>, ()> {
        let path = FieldPath::root("service").key("kubernetes");
        match (&runtime.kubernetes, &svc.doc.kubernetes) {
            (None, None) => Ok(None),
            (None, Some(_)) => {
                self.err(
                    svc.source,
                    &path,
                    format!(
                        "has no effect: runtime '{}' (release channel '{}') is a custom runtime, which runs its own commands; manifests are for a kubernetes runtime",
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
                        "runtime '{}' (release channel '{}') is a kubernetes runtime: give the service's manifests with `kubernetes: {{manifests: DIR}}`",
                        runtime.name, channel.name
                    ),
                );
                Err(())
            }
            (Some(_), Some(doc)) => {
                let dir_path = path.key("manifests");
                let Some(dir) = manifests_dir(&svc.source.file, &doc.manifests) else {
                    self.err(
                        svc.source,
                        &dir_path,
                        format!(
                            "{:?} must be a directory inside the config directory (it is pushed with the config)",
                            doc.manifests
                        ),
                    );
                    return Err(());
                };
                self.manifest_files(svc, channel, &dir_path, dir)
            }
        }
    }

    /// Parses the templates of the files in `dir`, and checks the files
    /// that use none as they will be applied.
    fn manifest_files(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        path: &FieldPath,
        dir: String,
    ) -> Result<Option<Manifests>, ()> {
        let bundle: &ConfigBundle = self.bundle;
        let files: Vec<(&String, &String)> = bundle
            .files
            .iter()
            .filter(|(file, _)| is_inside(file, &dir))
            .collect();
        if files.is_empty() {
            self.err(
                svc.source,
                path,
                format!("no *.yaml or *.yml files in the manifests directory {dir:?}"),
            );
            return Err(());
        }
        let before = self.errors.len();
        let mut templates = Vec::new();
        for (file, text) in files {
            let first_new = self.errors.len();
            let template = self.service_template(svc, channel, path, text);
            // The template's errors are the service's, about this file.
            for error in &mut self.errors[first_new..] {
                error.message = format!("in {file}: {}", error.message);
            }
            let Some(template) = template else { continue };
            if template.references().next().is_none() {
                self.static_manifest(file, text);
            }
            templates.push((file.clone(), template));
        }
        if self.errors.len() == before {
            Ok(Some(Manifests {
                dir,
                files: templates,
            }))
        } else {
            Err(())
        }
    }

    /// A manifest file without templates is checked now, with its lines.
    fn static_manifest(&mut self, file: &str, text: &str) {
        let error = |line: Option<usize>, message: String| ConfigError {
            file: file.to_owned(),
            line,
            path: String::new(),
            message,
        };
        match yaml::parse_json_documents(text) {
            Ok(objects) => {
                if let Err(message) = check_objects(file, &objects) {
                    self.errors.push(error(None, message));
                }
            }
            Err((line, message)) => self
                .errors
                .push(error(Some(line), format!("invalid YAML: {message}"))),
        }
    }
}
