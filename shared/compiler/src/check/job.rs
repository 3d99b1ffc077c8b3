//! Checks the job templates of runtimes and protections: the program to
//! run, its image (which container runners need) and env, and every
//! template reference in them.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::field_path::FieldPath;
use super::serverless::LocalJob;
use super::{Checker, check_env_name, unknown_param_message};
use crate::config::schema::{ProgramDoc, TaskConfigDoc};
use crate::model::{JobTemplate, ParamDecl, ParamKind};
use crate::template::{Reference, Template};
use vergence_model::{LambdaRunnerSpec, RunnerKind, Source};

/// A `{{.Constants.name}}` in a job template, and where it is written.
pub(super) struct ConstantUse {
    pub(super) path: FieldPath,
    pub(super) name: String,
}

/// A job written in a runtime or protection, with what its templates are
/// checked against.
pub(super) struct JobInput<'i> {
    /// Where the job is written; its program is under `taskConfig.program`.
    pub(super) path: FieldPath,
    /// What the job is to its owner, for messages: `apply`, `check`.
    pub(super) name: &'i str,
    pub(super) task: &'i TaskConfigDoc,
    /// The kind of runner it runs on (in every release channel: an
    /// override changes settings, not the kind).
    pub(super) runner: RunnerKind,
    /// Directory of the document, where the job runs.
    pub(super) dir: &'i str,
    pub(super) timeout: SignedDuration,
    pub(super) outputs: &'i [String],
    /// The parameters its templates may use.
    pub(super) params: &'i [ParamDecl],
    /// Who declares those parameters, for messages: "runtime NAME".
    pub(super) owner: &'i str,
}

/// What a job's templates may refer to: the parameters of their owner.
pub(super) struct TemplateScope<'i> {
    pub(super) params: &'i [ParamDecl],
    /// Who declares those parameters, for messages: "runtime NAME".
    pub(super) owner: &'i str,
}

impl JobInput<'_> {
    fn scope(&self) -> TemplateScope<'_> {
        TemplateScope {
            params: self.params,
            owner: self.owner,
        }
    }
}

impl Checker<'_> {
    /// Checks a job and parses its templates; `None` if anything in it is
    /// wrong. Its constant uses are added to `constant_uses`.
    pub(super) fn job(
        &mut self,
        source: &Source,
        input: JobInput<'_>,
        constant_uses: &mut Vec<ConstantUse>,
    ) -> Option<JobTemplate> {
        let program = &input.task.program;
        let program_path = input.path.key("taskConfig").key("program");
        let before = self.errors.len();
        self.check_program(source, &program_path, program, input.runner);
        if input.runner == RunnerKind::Lambda && input.timeout > LambdaRunnerSpec::MAX_TIMEOUT {
            let message = format!(
                "timeout {:#} is longer than a Lambda invocation can run (15 minutes): \
                 shorten it, or run {} on the ecs or cloudRun runner, which have no such limit",
                input.timeout, input.owner
            );
            self.err(source, &input.path.key("timeout"), message);
        }
        let cmd_path = program_path.key("cmd");
        let cmd: Vec<Template> = program
            .cmd
            .iter()
            .enumerate()
            .filter_map(|(i, raw)| {
                let path = cmd_path.index(i);
                self.job_template(source, &input.scope(), &path, raw, false, constant_uses)
            })
            .collect();
        let image_path = program_path.key("image");
        let image = program.image.as_ref().and_then(|raw| {
            self.job_template(
                source,
                &input.scope(),
                &image_path,
                raw,
                false,
                constant_uses,
            )
        });
        let env = self.job_env(source, &input, &program_path, constant_uses);
        if input.runner == RunnerKind::Local {
            let job = LocalJob {
                what: format!("the {} of {}", input.name, input.owner),
                program_path: &program_path,
                program,
                dir: input.dir,
            };
            self.local_job(source, &job);
        }
        (self.errors.len() == before).then(|| JobTemplate {
            image,
            cmd,
            env,
            working_dir: input.dir.to_owned(),
            timeout: input.timeout,
            outputs: input.outputs.to_vec(),
        })
    }

    /// A program names what to run, and an image when its runner runs
    /// containers.
    fn check_program(
        &mut self,
        source: &Source,
        path: &FieldPath,
        program: &ProgramDoc,
        runner: RunnerKind,
    ) {
        if program.cmd.is_empty() {
            self.err(
                source,
                &path.key("cmd"),
                "cmd must name the program to run, e.g. cmd: [./deploy.sh]",
            );
        }
        if runner == RunnerKind::Lambda {
            if program.image.is_some() {
                self.err(
                    source,
                    &path.key("image"),
                    "the lambda runner runs the command inside the function it names, not in an image: \
                     remove image and put the program in the function (its container image or a layer)",
                );
            }
        } else if runner != RunnerKind::Local && program.image.is_none() {
            self.err(
                source,
                &path.key("image"),
                format!("the {runner} runner runs a container: set image"),
            );
        }
    }

    /// The env of a job's program (under `program_path`): valid names, and
    /// values that may be a secret parameter as a whole.
    fn job_env(
        &mut self,
        source: &Source,
        input: &JobInput<'_>,
        program_path: &FieldPath,
        constant_uses: &mut Vec<ConstantUse>,
    ) -> BTreeMap<String, Template> {
        let mut env = BTreeMap::new();
        for (name, raw) in &input.task.program.env {
            let path = program_path.key("env").key(name);
            if let Err(e) = check_env_name(name) {
                self.err(source, &path, e);
            }
            let scope = input.scope();
            if let Some(t) = self.job_template(source, &scope, &path, raw, true, constant_uses) {
                env.insert(name.clone(), t);
            }
        }
        env
    }

    /// Parses one template of a job and checks its references.
    pub(super) fn job_template(
        &mut self,
        source: &Source,
        input: &TemplateScope<'_>,
        path: &FieldPath,
        raw: &str,
        whole_secret_ok: bool,
        constant_uses: &mut Vec<ConstantUse>,
    ) -> Option<Template> {
        let template = match Template::parse(raw) {
            Ok(t) => t,
            Err(e) => {
                self.err(source, path, e);
                return None;
            }
        };
        self.references(
            source,
            input,
            path,
            &template,
            whole_secret_ok,
            constant_uses,
        );
        Some(template)
    }

    /// Checks the references of a runtime or protection template: parameters
    /// must be declared, secrets may only be a whole env value, and constant
    /// uses are remembered for the per-channel check.
    fn references(
        &mut self,
        source: &Source,
        input: &TemplateScope<'_>,
        path: &FieldPath,
        template: &Template,
        whole_secret_ok: bool,
        constant_uses: &mut Vec<ConstantUse>,
    ) {
        let params = input.params;
        for reference in template.references() {
            match reference {
                Reference::Param(name) => match params.iter().find(|p| &p.name == name) {
                    None => {
                        let message = unknown_param_message(name, reference, input.owner, params);
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
