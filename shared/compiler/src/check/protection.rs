//! Checks `protection` documents (a check job or an alert) and every place
//! a protection is attached, on a release channel or a service: the
//! protection exists, its parameters get values and each lifecycle point
//! is well formed.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::field_path::FieldPath;
use super::job::{ConstantUse, JobInput, TemplateScope};
use super::metric::article;
use super::parameters::SecretParams;
use super::{Checker, DEFAULT_FETCH_TIMEOUT, unknown_name_message, unknown_param_message};
use crate::config::ParsedDocument;
use crate::config::schema::{
    FailureBehaviorDoc, LifecycleDoc, ParameterValueDoc, ProtectionAttachmentDoc, ProtectionDoc,
    RunnerDoc,
};
use crate::model::{JobTemplate, ParamDecl, Protection, ProtectionTemplate, ProtectionUse};
use crate::template::{Reference, Template};
use vergence_model::{FailureBehavior, Lifecycle, RunnerKind, RunnerUser, Source};

const DEFAULT_PROTECTION_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(1);
/// A metric query answers in well under a second when its source is up;
/// a longer wait only delays the BLOCK that an unreachable source means.
const DEFAULT_METRIC_TIMEOUT: SignedDuration = SignedDuration::from_secs(30);

impl<'a> Checker<'a> {
    /// Checks a `protection` document and, when it is valid, keeps it for
    /// the release channels and services that attach it.
    pub(super) fn protection(&mut self, document: &'a ParsedDocument, doc: &ProtectionDoc) {
        let source = &document.source;
        let root = FieldPath::root("protection");
        let params = self.params(source, &root, &doc.parameters, SecretParams::Refused);
        let check = self.protection_check(document, doc, &params);
        if let Some(check) = check {
            let protection = Protection {
                name: doc.name.clone(),
                params,
                check,
                poll_interval: doc
                    .poll_interval
                    .map_or(DEFAULT_PROTECTION_POLL_INTERVAL, |d| d.0),
            };
            self.protections.insert(doc.name.clone(), protection);
        }
    }

    /// The check a `protection` document gives, its templates parsed;
    /// `None` after saying what is wrong.
    fn protection_check(
        &mut self,
        document: &'a ParsedDocument,
        doc: &ProtectionDoc,
        params: &[ParamDecl],
    ) -> Option<ProtectionTemplate> {
        let source = &document.source;
        let root = FieldPath::root("protection");
        Some(match self.protection_kind(source, &root, doc)? {
            "taskConfig" => {
                let task = doc.task_config.as_ref()?;
                let by = RunnerUser::Protection(doc.name.clone());
                let runner = self.runner(source, &root, doc.runner.as_ref(), by);
                let input = JobInput {
                    path: root.clone(),
                    name: "check",
                    task,
                    runner: doc
                        .runner
                        .as_ref()
                        .map_or(RunnerKind::Local, RunnerDoc::kind),
                    dir: &document.dir,
                    timeout: doc.timeout.map_or(DEFAULT_FETCH_TIMEOUT, |d| d.0),
                    outputs: &[],
                    params,
                    owner: &format!("protection {}", doc.name),
                };
                let job = self.check_job(source, input);
                let (job, runner) = job.zip(runner)?;
                ProtectionTemplate::Job {
                    job: Box::new(job),
                    runner,
                }
            }
            "alert" => {
                let alert = doc.alert.as_ref()?;
                if let Err(e) = vergence_model::check_name(alert) {
                    self.err(source, &root.key("alert"), e);
                    return None;
                }
                ProtectionTemplate::Alert(alert.clone())
            }
            _ => {
                let scope = TemplateScope {
                    params,
                    owner: &format!("protection {}", doc.name),
                };
                ProtectionTemplate::Metric {
                    check: self.metric(source, &root, doc, &scope)?,
                    timeout: doc.timeout.map_or(DEFAULT_METRIC_TIMEOUT, |d| d.0),
                }
            }
        })
    }

    /// Which of the check kinds the protection gives (exactly one), or
    /// `None` after saying what is wrong. Only a job check has a runner.
    fn protection_kind(
        &mut self,
        source: &Source,
        root: &FieldPath,
        doc: &ProtectionDoc,
    ) -> Option<&'static str> {
        let given: Vec<&'static str> = [
            ("taskConfig", doc.task_config.is_some()),
            ("alert", doc.alert.is_some()),
            ("prometheus", doc.prometheus.is_some()),
            ("cloudwatchAlarm", doc.cloudwatch_alarm.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, given)| given.then_some(key))
        .collect();
        let kind = match given.as_slice() {
            [kind] => *kind,
            [] => {
                self.err(
                    source,
                    root,
                    "a protection needs one check: taskConfig (a check job, exit 0 = pass), \
                     alert (a state set with `vergence alert set`), prometheus (a PromQL query \
                     held to a threshold) or cloudwatchAlarm (alarms that must not be in ALARM)",
                );
                return None;
            }
            several => {
                self.err(
                    source,
                    root,
                    format!(
                        "a protection has one check, not {}: keep one of them",
                        several.join(" and ")
                    ),
                );
                return None;
            }
        };
        if kind != "taskConfig" && doc.runner.is_some() {
            self.err(
                source,
                &root.key("runner"),
                format!(
                    "{} protection runs no job of its own, so it has no runner; remove runner",
                    article(kind)
                ),
            );
            return None;
        }
        Some(kind)
    }

    /// The job of a check protection. Its templates may not use constants.
    fn check_job(&mut self, source: &'a Source, input: JobInput<'_>) -> Option<JobTemplate> {
        let mut constant_uses = Vec::new();
        let job = self.job(source, input, &mut constant_uses);
        for constant in constant_uses {
            self.constant_in_protection(source, constant);
        }
        job
    }

    /// Constants are per release channel and a protection is attached to
    /// many: its templates cannot use them; the values given where it is
    /// attached can.
    pub(super) fn constant_in_protection(&mut self, source: &Source, used: ConstantUse) {
        let ConstantUse { path, name } = used;
        self.err(
            source,
            &path,
            format!(
                "protections cannot use {{{{.Constants.{name}}}}} directly; \
                 declare a parameter and pass the constant where the protection is attached"
            ),
        );
    }

    /// Checks protections attached at `base` (a release channel or a
    /// service): the protection exists, its parameters get valid values and
    /// every lifecycle point is well formed.
    pub(super) fn protection_uses(
        &mut self,
        source: &Source,
        base: &FieldPath,
        attached_to: &str,
        docs: &[ProtectionAttachmentDoc],
    ) -> Vec<ProtectionUse> {
        let mut uses = Vec::new();
        for (i, doc) in docs.iter().enumerate() {
            let path = base.key("protections").index(i);
            let name = &doc.reference.name;
            let Some(protection) = self.protections.get(name).cloned() else {
                let message = unknown_name_message(
                    "protection",
                    name.as_str(),
                    self.protections.keys().map(|p| p.as_str()),
                );
                self.err(source, &path.key("ref").key("name"), message);
                continue;
            };
            let ref_path = path.key("ref").key("parameters");
            let values =
                self.protection_values(source, &ref_path, &protection, &doc.reference.parameters);
            let lifecycles =
                self.lifecycles(source, &path.key("lifecycle"), &protection, &doc.lifecycle);
            uses.push(ProtectionUse {
                name: name.clone(),
                values,
                lifecycles,
                attached_to: attached_to.to_owned(),
            });
        }
        uses
    }

    /// The values given for an attached protection's parameters (at
    /// `path`, its `ref.parameters`), and that every required one has one.
    fn protection_values(
        &mut self,
        source: &Source,
        path: &FieldPath,
        protection: &Protection,
        docs: &[ParameterValueDoc],
    ) -> BTreeMap<String, Template> {
        let mut values = BTreeMap::new();
        for (j, value) in docs.iter().enumerate() {
            let vpath = path.index(j);
            if let Some(template) = self.protection_value(source, &vpath, protection, value) {
                values.insert(value.name.clone(), template);
            }
        }
        for decl in &protection.params {
            if decl.required && decl.default.is_none() && !values.contains_key(&decl.name) {
                self.err(
                    source,
                    path,
                    format!(
                        "protection {} needs a value for its required parameter '{}'",
                        protection.name, decl.name
                    ),
                );
            }
        }
        values
    }

    /// One parameter value of an attached protection: a declared parameter,
    /// given a value that uses constants and built-ins but no parameters.
    fn protection_value(
        &mut self,
        source: &Source,
        path: &FieldPath,
        protection: &Protection,
        value: &ParameterValueDoc,
    ) -> Option<Template> {
        let Some(decl) = protection.params.iter().find(|p| p.name == value.name) else {
            let message = unknown_param_message(
                &value.name,
                &Reference::Param(value.name.clone()),
                &format!("protection {}", protection.name),
                &protection.params,
            );
            self.err(source, &path.key("name"), message);
            return None;
        };
        let raw = value
            .string
            .as_ref()
            .or(value.int.as_ref())
            .or(value.docker_image.as_ref());
        let Some(raw) = raw else {
            self.err(
                source,
                path,
                format!(
                    "give parameter '{}' a value: {}: VALUE",
                    value.name,
                    decl.kind.name()
                ),
            );
            return None;
        };
        match Template::parse(raw) {
            Ok(t) if t.references().any(|r| matches!(r, Reference::Param(_))) => {
                self.err(
                    source,
                    path,
                    "protection parameter values can use {{.Constants.x}} and {{.Builtins...}}, not {{.Params.x}}",
                );
                None
            }
            Ok(t) => Some(t),
            Err(e) => {
                self.err(source, path, e);
                None
            }
        }
    }

    /// The lifecycle points (at `path`) an attached protection guards, each
    /// at most once.
    fn lifecycles(
        &mut self,
        source: &Source,
        path: &FieldPath,
        protection: &Protection,
        docs: &[LifecycleDoc],
    ) -> Vec<Lifecycle> {
        if docs.is_empty() {
            self.err(
                source,
                path,
                "say when the protection runs: preApproval, deployment or postDeployment",
            );
        }
        let mut lifecycles: Vec<Lifecycle> = Vec::new();
        for (j, doc) in docs.iter().enumerate() {
            let lpath = path.index(j);
            let Some(lifecycle) = self.lifecycle(source, &lpath, doc) else {
                continue;
            };
            if lifecycles.iter().any(|l| l.as_str() == lifecycle.as_str()) {
                self.err(
                    source,
                    &lpath,
                    format!("lifecycle {} is given twice", lifecycle.as_str()),
                );
                continue;
            }
            if matches!(protection.check, ProtectionTemplate::Alert(_))
                && matches!(lifecycle, Lifecycle::PostDeployment { .. })
            {
                self.err(
                    source,
                    &lpath,
                    "an alert protection guards preApproval or deployment; post-deployment checks need a taskConfig, prometheus or cloudwatchAlarm",
                );
                continue;
            }
            lifecycles.push(lifecycle);
        }
        lifecycles
    }

    fn lifecycle(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &LifecycleDoc,
    ) -> Option<Lifecycle> {
        Some(match doc {
            LifecycleDoc::PreApproval(_) => Lifecycle::PreApproval,
            LifecycleDoc::Deployment(d) => Lifecycle::Deployment {
                failure_behavior: match d.failure_behavior {
                    None | Some(FailureBehaviorDoc::Block) => FailureBehavior::Block,
                    Some(FailureBehaviorDoc::Fail) => FailureBehavior::Fail,
                },
            },
            LifecycleDoc::PostDeployment(p) => {
                let Some(duration) = p.check_duration.map(|d| d.0) else {
                    self.err(
                        source,
                        &path.key("postDeployment").key("checkDuration"),
                        "a post-deployment check needs checkDuration: how long it must pass",
                    );
                    return None;
                };
                Lifecycle::PostDeployment {
                    delay: p.delay_check_duration.map_or(SignedDuration::ZERO, |d| d.0),
                    duration,
                }
            }
        })
    }
}
