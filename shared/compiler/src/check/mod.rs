//! Checks parsed documents against each other and builds the
//! [`ConfigModel`]. Every problem is collected with its file, line and field
//! path; a config with any error produces no model at all.
//!
//! One [`Checker`] walks the documents; each kind has its module
//! (`application`, `runtime`, `service` with `parameter_values` and
//! `secret`, `protection`), and what several kinds have in common has its
//! own: job templates (`job`), runners (`runner`, with the values of their
//! settings in `runner_fields`) and parameter declarations (`parameters`).
//! Every error names its field with a [`FieldPath`].

mod application;
mod cloud_run;
mod command_files;
mod ecs;
mod field_path;
mod job;
mod kubernetes;
mod metric;
mod notifications;
mod parameter_values;
mod parameters;
mod parts;
mod protection;
mod rollout;
mod runner;
mod runner_fields;
mod runtime;
mod secret;
mod serverless;
mod service;
mod terraform;
mod trust;

use std::collections::{BTreeMap, HashMap};

use jiff::SignedDuration;

use super::model::{Application, ConfigModel, ParamDecl, Protection};
use super::template::Reference;
use crate::config::schema::{ApplicationDoc, DocumentBody, ProtectionDoc, RuntimeDoc, ServiceDoc};
use crate::config::{ParsedDocument, parse_bundle};
use field_path::FieldPath;
pub use parameters::check_docker_image;
use rollout::RuntimeKind;
use runner::RuntimeRunner;
use runtime::RuntimeSource;
use vergence_model::diagnostics::suggest;
use vergence_model::{
    ApplicationName, ConfigBundle, ConfigError, ConfigErrors, ConfigLocation, LocalProgram,
    ProtectionName, RunnerUse, RuntimeName, Source,
};

/// Timeout of fetch and getInfo jobs and of protection checks, unless set.
const DEFAULT_FETCH_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);

/// Environment variable prefixes Vergence sets itself.
const RESERVED_ENV_PREFIXES: [&str; 2] = ["VERGENCE_", "PVN_"];

/// Parses and checks a bundle. All errors are returned together.
pub fn check(bundle: &ConfigBundle) -> Result<ConfigModel, ConfigErrors> {
    let (documents, errors) = parse_bundle(bundle);
    let mut checker = Checker {
        bundle,
        errors,
        runtime_sources: HashMap::new(),
        runtime_kinds: BTreeMap::new(),
        protections: BTreeMap::new(),
        runner_uses: Vec::new(),
        local_programs: Vec::new(),
        serverless_errors: Vec::new(),
    };
    let model = checker.build(bundle, &documents);
    if checker.errors.is_empty() {
        Ok(model)
    } else {
        Err(ConfigErrors(checker.errors).sorted())
    }
}

/// A document of one kind, with where it was read from.
struct Located<'a, T> {
    source: &'a Source,
    doc: &'a T,
}

/// A bundle's documents by kind, each in the order written.
#[derive(Default)]
struct ByKind<'a> {
    applications: Vec<Located<'a, ApplicationDoc>>,
    runtimes: Vec<(&'a ParsedDocument, &'a RuntimeDoc)>,
    services: Vec<Located<'a, ServiceDoc>>,
    protections: Vec<(&'a ParsedDocument, &'a ProtectionDoc)>,
}

/// Checks documents, collecting every error, and keeps what later kinds
/// need from earlier ones: the constants each runtime's templates use and
/// the protections that can be attached; and every runner named.
struct Checker<'a> {
    /// The files, for what documents point at (a service's manifests).
    bundle: &'a ConfigBundle,
    errors: Vec<ConfigError>,
    runtime_sources: HashMap<RuntimeName, RuntimeSource<'a>>,
    /// The kind of every runtime as written, valid or not, for what a
    /// release channel asks of its runtimes (a rollout).
    runtime_kinds: BTreeMap<RuntimeName, RuntimeKind>,
    protections: BTreeMap<ProtectionName, Protection>,
    runner_uses: Vec<RunnerUse>,
    /// Every program of a local job, as written.
    local_programs: Vec<LocalProgram>,
    /// What stops local jobs from starting in a serverless deployment.
    serverless_errors: Vec<ConfigError>,
}

impl<'a> Checker<'a> {
    fn err(&mut self, source: &Source, path: &FieldPath, message: impl Into<String>) {
        self.errors.push(source.error(path, message));
    }

    /// Checks every document, each kind after the kinds it refers to:
    /// applications attach protections and name runtimes, and services need
    /// all three.
    fn build(&mut self, bundle: &ConfigBundle, documents: &'a [ParsedDocument]) -> ConfigModel {
        let by_kind = self.by_kind(documents);
        for (document, doc) in by_kind.protections {
            self.protection(document, doc);
        }
        // Every runtime's runner as written, valid or not, so release
        // channels can name runtimes and override their runners.
        let runtime_runners: BTreeMap<RuntimeName, RuntimeRunner<'a>> = by_kind
            .runtimes
            .iter()
            .map(|(document, doc)| {
                let runner = RuntimeRunner {
                    doc: doc.runner.as_ref(),
                    source: &document.source,
                };
                (doc.name.clone(), runner)
            })
            .collect();
        let mut runtimes = BTreeMap::new();
        for (document, doc) in by_kind.runtimes {
            self.runtime_kinds
                .insert(doc.name.clone(), RuntimeKind::of(doc));
            self.refuse_runtime_rollout(&document.source, doc);
            if let Some(runtime) = self.runtime(document, doc) {
                runtimes.insert(runtime.name.clone(), runtime);
            }
        }
        let mut apps: BTreeMap<ApplicationName, Application> = BTreeMap::new();
        for app in &by_kind.applications {
            let checked = self.application(app, &runtime_runners);
            apps.insert(checked.name.clone(), checked);
        }
        for service in &by_kind.services {
            self.service(service, &mut apps, &runtimes);
        }
        let mut runner_uses = std::mem::take(&mut self.runner_uses);
        sort_by_place(&mut runner_uses, |u| &u.at);
        let mut local_programs = std::mem::take(&mut self.local_programs);
        sort_by_place(&mut local_programs, |p| &p.at);
        let mut model = ConfigModel {
            hash: bundle.hash(),
            root: bundle.root.clone(),
            applications: apps,
            runtimes,
            protections: std::mem::take(&mut self.protections),
            runner_uses,
            local_programs,
            serverless_errors: ConfigErrors(std::mem::take(&mut self.serverless_errors)).sorted(),
            file_applications: BTreeMap::new(),
        };
        model.file_applications = parts::file_applications(bundle, documents, &model);
        model
    }

    /// Sorts the documents by kind. A name defined twice for a kind is
    /// reported and its second document left out.
    fn by_kind(&mut self, documents: &'a [ParsedDocument]) -> ByKind<'a> {
        let mut by_kind = ByKind::default();
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
            let source = &document.source;
            match &document.body {
                DocumentBody::Application(doc) => {
                    by_kind.applications.push(Located { source, doc })
                }
                DocumentBody::Runtime(doc) => by_kind.runtimes.push((document, doc)),
                DocumentBody::Service(doc) => by_kind.services.push(Located { source, doc }),
                DocumentBody::Protection(doc) => by_kind.protections.push((document, doc)),
            }
        }
        by_kind
    }
}

/// Sorts what was found by where it is written: file, line, field path.
fn sort_by_place<T>(items: &mut [T], at: impl Fn(&T) -> &ConfigLocation) {
    items.sort_by(|a, b| {
        let (a, b) = (at(a), at(b));
        (&a.file, a.line, &a.path).cmp(&(&b.file, b.line, &b.path))
    });
}

/// "unknown parameter" for a template reference; `owner` is who declares
/// the parameters ("runtime NAME", "this service").
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

/// "unknown" for a name that refers to another document or release channel,
/// with the nearest known name and all of them.
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

/// Env variable names: portable shell names, not in Vergence's own prefixes.
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
