//! Checks parsed documents against each other and builds the
//! [`ConfigModel`]. Every problem is collected with its file, line and field
//! path; a config with any error produces no model at all.

mod application;
mod field_path;
mod protection;
mod runtime;

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
    ApplicationName, ConfigBundle, ConfigError, ConfigErrors, DriftPolicy, ParamValue,
    ProtectionName, ReleaseChannelName, RunnerSpec, RuntimeName, SecretRef, Source,
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

    fn service(
        &mut self,
        service: &Located<'a, ServiceDoc>,
        apps: &mut BTreeMap<ApplicationName, Application>,
        runtimes: &BTreeMap<RuntimeName, Runtime>,
    ) {
        let (source, doc) = (service.source, service.doc);
        let Some(app_name) = self.service_application(source, doc, apps) else {
            return;
        };
        let root = FieldPath::root("service");
        let params = self.params(source, &root, &doc.parameters, false);
        let protections = self.protection_uses(
            source,
            &root,
            &format!("service {}", doc.name),
            &doc.protections,
        );
        let per_channel = self.per_channel(source, doc, &apps[&app_name]);
        let mut channels = BTreeMap::new();
        for channel in &apps[&app_name].release_channels {
            if let Some(checked) = self.service_channel(
                source,
                doc,
                channel,
                per_channel.get(&channel.name),
                &params,
                runtimes,
            ) {
                channels.insert(channel.name.clone(), checked);
            }
        }
        let Some(app) = apps.get_mut(&app_name) else {
            return;
        };
        if app.services.contains_key(&doc.name) {
            self.err(
                source,
                &root.key("name"),
                format!(
                    "service '{}' is defined twice in application '{}'",
                    doc.name, app_name
                ),
            );
            return;
        }
        app.services.insert(
            doc.name.clone(),
            Service {
                name: doc.name.clone(),
                params,
                channels,
                drift_policy: match doc.drift_policy {
                    None | Some(DriftPolicyDoc::Remediate) => DriftPolicy::Remediate,
                    Some(DriftPolicyDoc::DetectOnly) => DriftPolicy::DetectOnly,
                },
                protections,
                auto_rollback: !doc.auto_rollback.as_ref().is_some_and(|a| a.disabled),
            },
        );
    }

    fn service_application(
        &mut self,
        source: &Source,
        doc: &ServiceDoc,
        apps: &BTreeMap<ApplicationName, Application>,
    ) -> Option<ApplicationName> {
        match &doc.application {
            Some(name) if apps.contains_key(name) => Some(name.clone()),
            Some(name) => {
                let message = unknown_name_message(
                    "application",
                    name.as_str(),
                    apps.keys().map(|a| a.as_str()),
                );
                self.err(
                    source,
                    &FieldPath::root("service").key("application"),
                    message,
                );
                None
            }
            None if apps.len() == 1 => apps.keys().next().cloned(),
            None if apps.is_empty() => {
                self.err(
                    source,
                    &FieldPath::root("service"),
                    format!(
                        "service '{}' needs an application, and the config defines none",
                        doc.name
                    ),
                );
                None
            }
            None => {
                let names: Vec<&str> = apps.keys().map(|a| a.as_str()).collect();
                self.err(
                    source,
                    &FieldPath::root("service"),
                    format!(
                        "service '{}' must name its application: the config defines {}",
                        doc.name,
                        names.join(", ")
                    ),
                );
                None
            }
        }
    }

    fn per_channel(
        &mut self,
        source: &Source,
        doc: &'a ServiceDoc,
        app: &Application,
    ) -> BTreeMap<ReleaseChannelName, PerChannel<'a>> {
        let mut found = BTreeMap::new();
        for (i, per) in doc.per_release_channel.iter().enumerate() {
            let per_path = FieldPath::root("service").key("perReleaseChannel").index(i);
            let path = per_path.key("releaseChannel");
            if app.channel(&per.release_channel).is_none() {
                let message = unknown_name_message(
                    &format!("release channel of application {}", app.name),
                    per.release_channel.as_str(),
                    app.release_channels.iter().map(|c| c.name.as_str()),
                );
                self.err(source, &path, message);
            } else if found
                .insert(
                    per.release_channel.clone(),
                    PerChannel {
                        path: per_path,
                        doc: per,
                    },
                )
                .is_some()
            {
                self.err(
                    source,
                    &path,
                    format!("release channel '{}' appears twice", per.release_channel),
                );
            }
        }
        found
    }

    fn service_channel(
        &mut self,
        source: &Source,
        doc: &ServiceDoc,
        channel: &ReleaseChannel,
        per: Option<&PerChannel<'_>>,
        service_params: &[ParamDecl],
        runtimes: &BTreeMap<RuntimeName, Runtime>,
    ) -> Option<ServiceChannel> {
        let root = FieldPath::root("service");
        let chosen = per
            .and_then(|per| {
                per.doc
                    .runtime
                    .as_ref()
                    .map(|r| (r, per.path.key("runtime")))
            })
            .or_else(|| doc.runtime.as_ref().map(|r| (r, root.key("runtime"))));
        let runtime_name = match (chosen, channel.runtimes.as_slice()) {
            (Some((name, path)), offered) => {
                if !offered.contains(name) {
                    let offered: Vec<&str> = offered.iter().map(|r| r.as_str()).collect();
                    self.err(
                        source,
                        &path,
                        format!(
                            "runtime '{name}' is not offered by release channel '{}' (it offers: {})",
                            channel.name,
                            offered.join(", ")
                        ),
                    );
                    return None;
                }
                name.clone()
            }
            (None, [only]) => only.clone(),
            (None, []) => return None,
            (None, several) => {
                let offered: Vec<&str> = several.iter().map(|r| r.as_str()).collect();
                self.err(
                    source,
                    &root,
                    format!(
                        "release channel '{}' offers several runtimes ({}); set 'runtime' on the service or per release channel",
                        channel.name,
                        offered.join(", ")
                    ),
                );
                return None;
            }
        };
        // The runtime itself had errors, already reported.
        let runtime = runtimes.get(&runtime_name)?;
        self.runtime_constants(&runtime_name, channel);

        let mut values = BTreeMap::new();
        // A value given for the whole service and again for this channel is
        // an override; given twice in the same place, a mistake.
        let service_values = custom_values(&root, doc.custom.as_ref()).map(|(p, v)| (p, v, false));
        let channel_values = per
            .into_iter()
            .flat_map(|per| custom_values(&per.path, per.doc.custom.as_ref()))
            .map(|(p, v)| (p, v, true));
        let mut seen: BTreeSet<(bool, &str)> = BTreeSet::new();
        for (path, value, per_channel) in service_values.chain(channel_values) {
            if !seen.insert((per_channel, value.name.as_str())) {
                self.err(
                    source,
                    &path.key("name"),
                    format!("parameter '{}' is given twice", value.name),
                );
            }
            if let Some(checked) =
                self.parameter_value(source, &path, value, runtime, channel, service_params)
            {
                values.insert(value.name.clone(), checked);
            }
        }
        for param in &runtime.params {
            if param.required && !values.contains_key(&param.name) {
                let path = if doc.custom.is_some() {
                    root.key("custom").key("parameterValues")
                } else {
                    root.clone()
                };
                self.err(
                    source,
                    &path,
                    format!(
                        "missing required parameter '{}' of runtime {} (release channel {}); add `- {{name: {}, {}: …}}` to custom.parameterValues",
                        param.name,
                        runtime.name,
                        channel.name,
                        param.name,
                        param.kind.name()
                    ),
                );
            }
        }
        let mut env = BTreeMap::new();
        let env_sources = doc
            .env
            .iter()
            .map(|(k, v)| (root.key("env").key(k), k, v))
            .chain(per.into_iter().flat_map(|per| {
                per.doc
                    .env
                    .iter()
                    .map(|(k, v)| (per.path.key("env").key(k), k, v))
            }));
        for (path, name, raw) in env_sources {
            if let Err(e) = check_env_name(name) {
                self.err(source, &path, e);
            }
            if let Some(t) = self.service_template(source, &path, raw, channel, service_params) {
                env.insert(name.clone(), t);
            }
        }
        Some(ServiceChannel {
            runtime: runtime_name,
            values,
            env,
        })
    }

    fn parameter_value(
        &mut self,
        source: &Source,
        path: &FieldPath,
        value: &ParameterValueDoc,
        runtime: &Runtime,
        channel: &ReleaseChannel,
        service_params: &[ParamDecl],
    ) -> Option<ValueTemplate> {
        let Some(decl) = runtime.param(&value.name) else {
            let declared: Vec<&str> = runtime.params.iter().map(|p| p.name.as_str()).collect();
            let hint = suggest(&value.name, declared.iter().copied())
                .map(|s| format!("did you mean '{s}'? "))
                .unwrap_or_default();
            self.err(
                source,
                &path.key("name"),
                format!(
                    "unknown parameter '{}' for runtime {}; {hint}it declares: {}",
                    value.name,
                    runtime.name,
                    if declared.is_empty() {
                        "no parameters".to_owned()
                    } else {
                        declared.join(", ")
                    }
                ),
            );
            return None;
        };
        let given: Vec<(ParamKind, Option<&String>)> = [
            value.string.as_ref().map(|v| (ParamKind::String, Some(v))),
            value.int.as_ref().map(|v| (ParamKind::Int, Some(v))),
            value
                .docker_image
                .as_ref()
                .map(|v| (ParamKind::DockerImage, Some(v))),
            value.secret.as_ref().map(|_| (ParamKind::Secret, None)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let (kind, raw) = match given.as_slice() {
            [one] => *one,
            [] => {
                self.err(
                    source,
                    path,
                    format!(
                        "give parameter '{}' a value: `{}: …`",
                        value.name,
                        decl.kind.name()
                    ),
                );
                return None;
            }
            _ => {
                self.err(
                    source,
                    path,
                    format!(
                        "parameter '{}' has more than one value; keep one",
                        value.name
                    ),
                );
                return None;
            }
        };
        if kind != decl.kind {
            self.err(
                source,
                &path.key(kind.name()),
                format!(
                    "parameter '{}' of runtime {} is declared {}; write `{}: …`",
                    value.name,
                    runtime.name,
                    decl.kind.name(),
                    decl.kind.name()
                ),
            );
            return None;
        }
        let value_path = path.key(kind.name());
        match (kind, raw) {
            (ParamKind::Secret, _) => {
                value
                    .secret
                    .as_ref()
                    .and_then(|s| match check_env_name(&s.from_env) {
                        Ok(()) => Some(ValueTemplate::Secret(SecretRef::FromEnv(
                            s.from_env.clone(),
                        ))),
                        Err(e) => {
                            self.err(source, &value_path.key("fromEnv"), e);
                            None
                        }
                    })
            }
            (_, Some(raw)) => {
                let template =
                    self.service_template(source, &value_path, raw, channel, service_params)?;
                if template.references().next().is_none() {
                    let checked = match kind {
                        ParamKind::Int => raw
                            .parse::<i64>()
                            .map(|_| ())
                            .map_err(|_| format!("{raw:?} is not an integer")),
                        ParamKind::DockerImage => check_docker_image(raw),
                        _ => Ok(()),
                    };
                    if let Err(e) = checked {
                        self.err(source, &value_path, e);
                        return None;
                    }
                }
                Some(ValueTemplate::Text(template))
            }
            (_, None) => None,
        }
    }

    /// Parses a template written in a service (parameter values, env), whose
    /// `.Params` are the service's own release parameters.
    fn service_template(
        &mut self,
        source: &Source,
        path: &FieldPath,
        raw: &str,
        channel: &ReleaseChannel,
        service_params: &[ParamDecl],
    ) -> Option<Template> {
        let template = match Template::parse(raw) {
            Ok(t) => t,
            Err(e) => {
                self.err(source, path, e);
                return None;
            }
        };
        let mut ok = true;
        for reference in template.references() {
            match reference {
                Reference::Param(name) if !service_params.iter().any(|p| &p.name == name) => {
                    let message =
                        unknown_param_message(name, reference, "this service", service_params);
                    self.err(source, path, message);
                    ok = false;
                }
                Reference::Constant(name) if !channel.constants.contains_key(name) => {
                    self.err(
                        source,
                        path,
                        format!(
                            "constant '{name}' is not defined in release channel '{}'",
                            channel.name
                        ),
                    );
                    ok = false;
                }
                _ => {}
            }
        }
        ok.then_some(template)
    }
}

/// A service's `perReleaseChannel` entry for one release channel.
struct PerChannel<'a> {
    path: FieldPath,
    doc: &'a PerReleaseChannelDoc,
}

/// The `custom.parameterValues` under `base`, each with its path.
fn custom_values<'d>(
    base: &FieldPath,
    custom: Option<&'d CustomDoc>,
) -> impl Iterator<Item = (FieldPath, &'d ParameterValueDoc)> {
    let path = base.key("custom").key("parameterValues");
    custom
        .into_iter()
        .flat_map(|c| c.parameter_values.iter().enumerate())
        .map(move |(i, value)| (path.index(i), value))
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
