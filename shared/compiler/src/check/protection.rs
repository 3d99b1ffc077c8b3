//! Checks `protection` documents (a check job or an alert) and every place
//! a protection is attached, on a release channel or a service: the
//! protection exists, its parameters get values and each lifecycle point
//! is well formed.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::field_path::FieldPath;
use super::job::{ConstantUse, JobInput};
use super::{Checker, DEFAULT_FETCH_TIMEOUT, unknown_name_message, unknown_param_message};
use crate::config::ParsedDocument;
use crate::config::schema::{
    FailureBehaviorDoc, LifecycleDoc, ProtectionAttachmentDoc, ProtectionDoc,
};
use crate::model::{Protection, ProtectionTemplate, ProtectionUse};
use crate::template::{Reference, Template};
use vergence_model::{FailureBehavior, Lifecycle, Source};

const DEFAULT_PROTECTION_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(1);

impl<'a> Checker<'a> {
    pub(super) fn protection(
        &mut self,
        source: &'a Source,
        document: &ParsedDocument,
        doc: &ProtectionDoc,
    ) {
        let root = FieldPath::root("protection");
        let params = self.params(source, &root, &doc.parameters, false);
        let check = match (&doc.task_config, &doc.alert) {
            (Some(task), None) => {
                let mut constant_uses = Vec::new();
                let job = self.job(
                    source,
                    JobInput {
                        path: &root,
                        task,
                        runner: doc.runner.as_ref(),
                        dir: &document.dir,
                        timeout: doc.timeout.map_or(DEFAULT_FETCH_TIMEOUT, |d| d.0),
                        outputs: &[],
                        params: &params,
                        owner: &format!("protection {}", doc.name),
                    },
                    &mut constant_uses,
                );
                // Constants are per release channel and a protection is
                // attached to many; its values can use them instead.
                for ConstantUse { path, name } in constant_uses {
                    self.err(
                        source,
                        &path,
                        format!(
                            "protections cannot use {{{{.Constants.{name}}}}} directly; \
                             declare a parameter and pass the constant where the protection is attached"
                        ),
                    );
                }
                job.map(ProtectionTemplate::Job)
            }
            (None, Some(alert)) => match vergence_model::check_name(alert) {
                Ok(()) => Some(ProtectionTemplate::Alert(alert.clone())),
                Err(e) => {
                    self.err(source, &root.key("alert"), e);
                    None
                }
            },
            (Some(_), Some(_)) => {
                self.err(
                    source,
                    &root,
                    "a protection has either taskConfig (a check job) or alert (a state set from outside), not both",
                );
                None
            }
            (None, None) => {
                self.err(
                    source,
                    &root,
                    "a protection needs taskConfig (a check job, exit 0 = pass) or alert (a state set with `vergence alert set`)",
                );
                None
            }
        };
        if let Some(check) = check {
            self.protections.insert(
                doc.name.clone(),
                Protection {
                    name: doc.name.clone(),
                    params,
                    check,
                    poll_interval: doc
                        .poll_interval
                        .map_or(DEFAULT_PROTECTION_POLL_INTERVAL, |d| d.0),
                },
            );
        }
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
            let mut values = BTreeMap::new();
            for (j, value) in doc.reference.parameters.iter().enumerate() {
                let vpath = path.key("ref").key("parameters").index(j);
                let Some(decl) = protection.params.iter().find(|p| p.name == value.name) else {
                    let message = unknown_param_message(
                        &value.name,
                        &Reference::Param(value.name.clone()),
                        &format!("protection {name}"),
                        &protection.params,
                    );
                    self.err(source, &vpath.key("name"), message);
                    continue;
                };
                let raw = value
                    .string
                    .as_ref()
                    .or(value.int.as_ref())
                    .or(value.docker_image.as_ref());
                let Some(raw) = raw else {
                    self.err(
                        source,
                        &vpath,
                        format!(
                            "give parameter '{}' a value: {}: VALUE",
                            value.name,
                            decl.kind.name()
                        ),
                    );
                    continue;
                };
                match Template::parse(raw) {
                    Ok(t) => {
                        if t.references().any(|r| matches!(r, Reference::Param(_))) {
                            self.err(
                                source,
                                &vpath,
                                "protection parameter values can use {{.Constants.x}} and {{.Builtins...}}, not {{.Params.x}}",
                            );
                            continue;
                        }
                        values.insert(value.name.clone(), t);
                    }
                    Err(e) => self.err(source, &vpath, e),
                }
            }
            for decl in &protection.params {
                if decl.required && decl.default.is_none() && !values.contains_key(&decl.name) {
                    self.err(
                        source,
                        &path.key("ref").key("parameters"),
                        format!(
                            "protection {name} needs a value for its required parameter '{}'",
                            decl.name
                        ),
                    );
                }
            }
            if doc.lifecycle.is_empty() {
                self.err(
                    source,
                    &path.key("lifecycle"),
                    "say when the protection runs: preApproval, deployment or postDeployment",
                );
            }
            let mut lifecycles = Vec::new();
            for (j, lifecycle) in doc.lifecycle.iter().enumerate() {
                let lpath = path.key("lifecycle").index(j);
                let compiled = match lifecycle {
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
                                &lpath.key("postDeployment").key("checkDuration"),
                                "a post-deployment check needs checkDuration: how long it must pass",
                            );
                            continue;
                        };
                        Lifecycle::PostDeployment {
                            delay: p.delay_check_duration.map_or(SignedDuration::ZERO, |d| d.0),
                            duration,
                        }
                    }
                };
                if lifecycles
                    .iter()
                    .any(|l: &Lifecycle| l.as_str() == compiled.as_str())
                {
                    self.err(
                        source,
                        &lpath,
                        format!("lifecycle {} is given twice", compiled.as_str()),
                    );
                    continue;
                }
                if matches!(protection.check, ProtectionTemplate::Alert(_))
                    && matches!(compiled, Lifecycle::PostDeployment { .. })
                {
                    self.err(
                        source,
                        &lpath,
                        "an alert protection guards preApproval or deployment; post-deployment checks need a taskConfig",
                    );
                    continue;
                }
                lifecycles.push(compiled);
            }
            uses.push(ProtectionUse {
                name: name.clone(),
                values,
                lifecycles,
                attached_to: attached_to.to_owned(),
            });
        }
        uses
    }
}
