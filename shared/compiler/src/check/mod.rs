//! Checks parsed documents against each other and builds the
//! [`ConfigModel`]. Every problem is collected with its file, line and field
//! path; a config with any error produces no model at all.

mod application;
mod field_path;
mod protection;
mod runtime;
mod service;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::SignedDuration;

use super::model::*;
use super::template::{Reference, Template, check_identifier};
use crate::config::schema::*;
use crate::config::{ParsedDocument, parse_bundle};
use field_path::FieldPath;
use runtime::RuntimeSource;
use vergence_model::diagnostics::suggest;
use vergence_model::{
    ApplicationName, ConfigBundle, ConfigError, ConfigErrors, ParamValue, ProtectionName,
    RunnerSpec, RuntimeName, Source,
};

const DEFAULT_FETCH_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);

/// Environment variable prefixes Vergence sets itself.
const RESERVED_ENV_PREFIXES: [&str; 2] = ["VERGENCE_", "PVN_"];

/// Parses and checks a bundle. All errors are returned together.
pub fn check(bundle: &ConfigBundle) -> Result<ConfigModel, ConfigErrors> {
    let (documents, errors) = parse_bundle(bundle);
    let mut checker = Checker {
        errors,
        runtime_sources: HashMap::new(),
        protections: BTreeMap::new(),
    };
    let model = checker.build(bundle, &documents);
    if checker.errors.is_empty() {
        Ok(model)
    } else {
        Err(ConfigErrors(checker.errors).sorted())
    }
}

struct Located<'a, T> {
    source: &'a Source,
    doc: &'a T,
}

/// A `{{.Constants.name}}` in a job template, and where it is written.
struct ConstantUse {
    path: FieldPath,
    name: String,
}

struct Checker<'a> {
    errors: Vec<ConfigError>,
    runtime_sources: HashMap<RuntimeName, RuntimeSource<'a>>,
    protections: BTreeMap<ProtectionName, Protection>,
}

impl<'a> Checker<'a> {
    fn err(&mut self, source: &Source, path: &FieldPath, message: impl Into<String>) {
        self.errors.push(source.error(path, message));
    }

    fn build(&mut self, bundle: &ConfigBundle, documents: &'a [ParsedDocument]) -> ConfigModel {
        let mut applications = Vec::new();
        let mut runtime_docs = Vec::new();
        let mut services = Vec::new();
        let mut seen: HashMap<(&str, String), &Source> = HashMap::new();
        for document in documents {
            let key = (document.body.kind(), document.body.name().to_owned());
            // Services are unique per application; checked once it is known.
            if key.0 != "service" {
                if let Some(first) = seen.get(&key) {
                    let message = format!(
                        "{} '{}' is defined twice (first in {}:{})",
                        key.0, key.1, first.file, first.line
                    );
                    let path = FieldPath::root(key.0).key("name");
                    self.err(&document.source, &path, message);
                    continue;
                }
                seen.insert(key, &document.source);
            }
            match &document.body {
                DocumentBody::Application(doc) => applications.push(Located {
                    source: &document.source,
                    doc: doc.as_ref(),
                }),
                DocumentBody::Runtime(doc) => runtime_docs.push((document, doc)),
                DocumentBody::Service(doc) => services.push(Located {
                    source: &document.source,
                    doc: doc.as_ref(),
                }),
                DocumentBody::Protection(doc) => self.protection(&document.source, document, doc),
            }
        }

        let all_runtime_names: BTreeSet<RuntimeName> = runtime_docs
            .iter()
            .map(|(_, doc)| doc.name.clone())
            .collect();
        let mut runtimes = BTreeMap::new();
        for (document, doc) in runtime_docs {
            if let Some(runtime) = self.runtime(document, doc) {
                runtimes.insert(runtime.name.clone(), runtime);
            }
        }

        let mut apps: BTreeMap<ApplicationName, Application> = BTreeMap::new();
        for app in &applications {
            let checked = self.application(app, &all_runtime_names);
            apps.insert(checked.name.clone(), checked);
        }
        for service in &services {
            self.service(service, &mut apps, &runtimes);
        }
        ConfigModel {
            hash: bundle.hash(),
            root: bundle.root.clone(),
            applications: apps,
            runtimes,
            protections: std::mem::take(&mut self.protections),
        }
    }

    fn params(
        &mut self,
        source: &Source,
        base: &FieldPath,
        docs: &[ParameterDoc],
        allow_secret: bool,
    ) -> Vec<ParamDecl> {
        let mut params: Vec<ParamDecl> = Vec::new();
        for (i, doc) in docs.iter().enumerate() {
            let path = base.key("parameters").index(i);
            if let Err(e) = check_identifier(&doc.name) {
                self.err(source, &path.key("name"), e);
                continue;
            }
            if params.iter().any(|p| p.name == doc.name) {
                self.err(
                    source,
                    &path.key("name"),
                    format!("parameter '{}' is declared twice", doc.name),
                );
                continue;
            }
            let kinds = [
                doc.string.as_ref().map(|s| {
                    (
                        ParamKind::String,
                        s.default_value.clone().map(ParamValue::String),
                    )
                }),
                doc.int
                    .as_ref()
                    .map(|i| (ParamKind::Int, i.default_value.map(ParamValue::Int))),
                doc.docker_image.as_ref().map(|s| {
                    (
                        ParamKind::DockerImage,
                        s.default_value.clone().map(ParamValue::DockerImage),
                    )
                }),
                doc.secret.as_ref().map(|_| (ParamKind::Secret, None)),
            ];
            let mut given = kinds.into_iter().flatten();
            let Some((kind, default)) = given.next() else {
                self.err(
                    source,
                    &path,
                    format!(
                        "parameter '{}' needs a type: string, int, dockerImage or secret (e.g. `string: {{}}`)",
                        doc.name
                    ),
                );
                continue;
            };
            if given.next().is_some() {
                self.err(
                    source,
                    &path,
                    format!("parameter '{}' has more than one type; keep one", doc.name),
                );
            }
            let required = doc.required.unwrap_or(false);
            if kind == ParamKind::Secret && !allow_secret {
                self.err(
                    source,
                    &path.key("secret"),
                    "secret parameters cannot be set by releases; declare the secret on the runtime",
                );
            }
            if required && default.is_some() {
                self.err(
                    source,
                    &path,
                    format!(
                        "parameter '{}' is required and has a default; keep one",
                        doc.name
                    ),
                );
            }
            if let Some(ParamValue::DockerImage(image)) = &default
                && let Err(e) = check_docker_image(image)
            {
                self.err(source, &path.key("dockerImage").key("defaultValue"), e);
            }
            if kind == ParamKind::Int && !required && default.is_none() {
                self.err(
                    source,
                    &path,
                    format!(
                        "int parameter '{}' needs a defaultValue or `required: true`",
                        doc.name
                    ),
                );
            }
            params.push(ParamDecl {
                name: doc.name.clone(),
                kind,
                required,
                default,
            });
        }
        params
    }

    fn job(
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

struct JobInput<'i> {
    path: &'i FieldPath,
    task: &'i TaskConfigDoc,
    runner: Option<&'i RunnerDoc>,
    dir: &'i str,
    timeout: SignedDuration,
    outputs: &'i [String],
    params: &'i [ParamDecl],
    owner: &'i str,
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

fn unknown_param_message(
    name: &str,
    reference: &Reference,
    owner: &str,
    params: &[ParamDecl],
) -> String {
    let declared: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let hint = suggest(name, declared.iter().copied())
        .map(|s| format!("did you mean '{s}'? "))
        .unwrap_or_default();
    format!(
        "unknown parameter '{name}' in {reference}; {hint}{owner} declares {}",
        if declared.is_empty() {
            "no parameters".to_owned()
        } else {
            declared.join(", ")
        }
    )
}

fn unknown_name_message<'n>(
    what: &str,
    name: &str,
    known: impl Iterator<Item = &'n str>,
) -> String {
    let known: Vec<&str> = known.collect();
    let hint = suggest(name, known.iter().copied())
        .map(|s| format!("; did you mean '{s}'?"))
        .unwrap_or_default();
    if known.is_empty() {
        format!("unknown {what} '{name}': none is defined")
    } else {
        format!(
            "unknown {what} '{name}'{hint} (defined: {})",
            known.join(", ")
        )
    }
}

fn check_env_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("{name:?} is not a valid environment variable name"));
    }
    if let Some(prefix) = RESERVED_ENV_PREFIXES.iter().find(|p| name.starts_with(**p)) {
        return Err(format!(
            "environment variables starting with {prefix} are set by Vergence"
        ));
    }
    Ok(())
}

/// A loose check that catches typos (spaces, empty values), not a full
/// reference grammar: registries differ too much for more.
pub fn check_docker_image(image: &str) -> Result<(), String> {
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(format!("{image:?} is not a container image reference"));
    }
    Ok(())
}
