//! Checks the job templates of runtimes and protections: the program to
//! run, its image and env, the runner it runs on, and every template
//! reference in them.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::field_path::FieldPath;
use super::{Checker, check_env_name, unknown_param_message};
use crate::config::schema::{RunnerDoc, TaskConfigDoc};
use crate::model::{JobTemplate, ParamDecl, ParamKind};
use crate::template::{Reference, Template};
use vergence_model::{RunnerSpec, Source};

/// A `{{.Constants.name}}` in a job template, and where it is written.
pub(super) struct ConstantUse {
    pub(super) path: FieldPath,
    pub(super) name: String,
}

pub(super) struct JobInput<'i> {
    pub(super) path: FieldPath,
    pub(super) task: &'i TaskConfigDoc,
    pub(super) runner: Option<&'i RunnerDoc>,
    pub(super) dir: &'i str,
    pub(super) timeout: SignedDuration,
    pub(super) outputs: &'i [String],
    pub(super) params: &'i [ParamDecl],
    pub(super) owner: &'i str,
}

impl<'a> Checker<'a> {
    pub(super) fn job(
        &mut self,
        source: &'a Source,
        input: JobInput<'_>,
        constant_uses: &mut Vec<ConstantUse>,
    ) -> Option<JobTemplate> {
        let program = &input.task.program;
        let program_path = input.path.key("taskConfig").key("program");
        let runner = runner_spec(input.runner);
        let before = self.errors.len();
        if program.cmd.is_empty() {
            self.err(
                source,
                &program_path.key("cmd"),
                "cmd must name the program to run, e.g. cmd: [./deploy.sh]",
            );
        }
        if runner != RunnerSpec::Local && program.image.is_none() {
            self.err(
                source,
                &program_path.key("image"),
                format!("the {} runner runs a container: set image", runner.name()),
            );
        }
        let mut template =
            |checker: &mut Self, path: FieldPath, raw: &str, whole_secret_ok: bool| {
                let parsed = match Template::parse(raw) {
                    Ok(t) => t,
                    Err(e) => {
                        checker.err(source, &path, e);
                        return None;
                    }
                };
                checker.references(
                    source,
                    &path,
                    &parsed,
                    input.params,
                    input.owner,
                    whole_secret_ok,
                    constant_uses,
                );
                Some(parsed)
            };
        let cmd: Vec<Template> = program
            .cmd
            .iter()
            .enumerate()
            .filter_map(|(i, raw)| template(self, program_path.key("cmd").index(i), raw, false))
            .collect();
        let image = program
            .image
            .as_ref()
            .and_then(|raw| template(self, program_path.key("image"), raw, false));
        let mut env = BTreeMap::new();
        for (name, raw) in &program.env {
            let path = program_path.key("env").key(name);
            if let Err(e) = check_env_name(name) {
                self.err(source, &path, e);
            }
            if let Some(t) = template(self, path, raw, true) {
                env.insert(name.clone(), t);
            }
        }
        (self.errors.len() == before).then(|| JobTemplate {
            runner,
            image,
            cmd,
            env,
            working_dir: input.dir.to_owned(),
            timeout: input.timeout,
            outputs: input.outputs.to_vec(),
        })
    }

    /// Checks the references of a runtime or protection template: parameters
    /// must be declared, secrets may only be a whole env value, and constant
    /// uses are remembered for the per-channel check.
    #[allow(clippy::too_many_arguments)]
    fn references(
        &mut self,
        source: &Source,
        path: &FieldPath,
        template: &Template,
        params: &[ParamDecl],
        owner: &str,
        whole_secret_ok: bool,
        constant_uses: &mut Vec<ConstantUse>,
    ) {
        for reference in template.references() {
            match reference {
                Reference::Param(name) => match params.iter().find(|p| &p.name == name) {
                    None => {
                        let message = unknown_param_message(name, reference, owner, params);
                        self.err(source, path, message);
                    }
                    Some(p)
                        if p.kind == ParamKind::Secret
                            && !(whole_secret_ok && template.sole_reference().is_some()) =>
                    {
                        self.err(
                            source,
                            path,
                            format!(
                                "secret parameter '{name}' can only be the whole value of an env variable \
                                 (secrets are never put on command lines)"
                            ),
                        );
                    }
                    Some(_) => {}
                },
                Reference::Constant(name) => constant_uses.push(ConstantUse {
                    path: path.clone(),
                    name: name.clone(),
                }),
                Reference::Builtin(_) => {}
            }
        }
    }
}

fn runner_spec(doc: Option<&RunnerDoc>) -> RunnerSpec {
    match doc {
        None | Some(RunnerDoc::Local {}) => RunnerSpec::Local,
        Some(RunnerDoc::Kubernetes { agent, namespace }) => RunnerSpec::Kubernetes {
            agent: agent.clone(),
            namespace: namespace.clone(),
        },
        Some(RunnerDoc::Ecs {
            cluster,
            subnets,
            security_groups,
            assign_public_ip,
        }) => RunnerSpec::Ecs {
            cluster: cluster.clone(),
            subnets: subnets.clone(),
            security_groups: security_groups.clone(),
            assign_public_ip: assign_public_ip.unwrap_or(false),
        },
        Some(RunnerDoc::CloudRun { project, region }) => RunnerSpec::CloudRun {
            project: project.clone(),
            region: region.clone(),
        },
    }
}
