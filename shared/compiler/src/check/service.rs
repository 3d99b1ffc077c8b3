//! Checks `service` documents: which application and runtime a service
//! uses in each release channel, the values it gives the runtime's
//! parameters (service-wide, overridden per release channel) and its env.

use std::collections::{BTreeMap, BTreeSet};

use super::field_path::FieldPath;
use super::{
    Checker, Located, check_docker_image, check_env_name, unknown_name_message,
    unknown_param_message,
};
use crate::config::schema::{
    CustomDoc, DriftPolicyDoc, ParameterValueDoc, PerReleaseChannelDoc, ServiceDoc,
};
use crate::model::{
    Application, ParamDecl, ParamKind, ReleaseChannel, Runtime, Service, ServiceChannel,
    ValueTemplate,
};
use crate::template::{Reference, Template};
use vergence_model::diagnostics::suggest;
use vergence_model::{
    ApplicationName, DriftPolicy, ReleaseChannelName, RuntimeName, SecretRef, Source,
};

/// A service's `perReleaseChannel` entry for one release channel.
struct PerChannel<'d> {
    path: FieldPath,
    doc: &'d PerReleaseChannelDoc,
}

/// A service document being checked, with the release parameters it
/// declares (which its templates may use).
struct ServiceInput<'s> {
    source: &'s Source,
    doc: &'s ServiceDoc,
    params: &'s [ParamDecl],
}

impl<'a> Checker<'a> {
    pub(super) fn service(
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
        let attached_to = format!("service {}", doc.name);
        let protections = self.protection_uses(source, &root, &attached_to, &doc.protections);
        let svc = ServiceInput {
            source,
            doc,
            params: &params,
        };
        let channels = self.service_channels(&svc, &apps[&app_name], runtimes);
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

    /// What the service runs in each release channel of its application.
    fn service_channels(
        &mut self,
        svc: &ServiceInput<'_>,
        app: &Application,
        runtimes: &BTreeMap<RuntimeName, Runtime>,
    ) -> BTreeMap<ReleaseChannelName, ServiceChannel> {
        let per_channel = self.per_channel(svc.source, svc.doc, app);
        let mut channels = BTreeMap::new();
        for channel in &app.release_channels {
            let per = per_channel.get(&channel.name);
            if let Some(checked) = self.service_channel(svc, channel, per, runtimes) {
                channels.insert(channel.name.clone(), checked);
            }
        }
        channels
    }

    /// The `perReleaseChannel` entries by release channel; each must name a
    /// channel of the application, once.
    fn per_channel<'d>(
        &mut self,
        source: &Source,
        doc: &'d ServiceDoc,
        app: &Application,
    ) -> BTreeMap<ReleaseChannelName, PerChannel<'d>> {
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

    /// What the service runs in one release channel: the runtime, the
    /// values of its parameters and the extra env.
    fn service_channel(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        per: Option<&PerChannel<'_>>,
        runtimes: &BTreeMap<RuntimeName, Runtime>,
    ) -> Option<ServiceChannel> {
        let runtime_name = self.channel_runtime(svc, channel, per)?;
        // The runtime itself had errors, already reported.
        let runtime = runtimes.get(&runtime_name)?;
        self.runtime_constants(&runtime_name, channel);
        let values = self.parameter_values(svc, channel, per, runtime);
        let env = self.service_env(svc, channel, per);
        Some(ServiceChannel {
            runtime: runtime_name,
            values,
            env,
        })
    }

    /// The runtime the service uses in `channel`: the one named for the
    /// channel or for the service, which the channel must offer, else the
    /// channel's only runtime.
    fn channel_runtime(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        per: Option<&PerChannel<'_>>,
    ) -> Option<RuntimeName> {
        let root = FieldPath::root("service");
        let chosen = per
            .and_then(|per| {
                per.doc
                    .runtime
                    .as_ref()
                    .map(|r| (r, per.path.key("runtime")))
            })
            .or_else(|| svc.doc.runtime.as_ref().map(|r| (r, root.key("runtime"))));
        match (chosen, channel.runtimes.as_slice()) {
            (Some((name, _)), offered) if offered.contains(name) => Some(name.clone()),
            (Some((name, path)), offered) => {
                let offered: Vec<&str> = offered.iter().map(|r| r.as_str()).collect();
                self.err(
                    svc.source,
                    &path,
                    format!(
                        "runtime '{name}' is not offered by release channel '{}' (it offers: {})",
                        channel.name,
                        offered.join(", ")
                    ),
                );
                None
            }
            (None, [only]) => Some(only.clone()),
            (None, []) => None,
            (None, several) => {
                let offered: Vec<&str> = several.iter().map(|r| r.as_str()).collect();
                self.err(
                    svc.source,
                    &root,
                    format!(
                        "release channel '{}' offers several runtimes ({}); set 'runtime' on the service or per release channel",
                        channel.name,
                        offered.join(", ")
                    ),
                );
                None
            }
        }
    }

    /// The values the service gives the runtime's parameters in `channel`:
    /// service-wide ones, overridden by the channel's own.
    fn parameter_values(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        per: Option<&PerChannel<'_>>,
        runtime: &Runtime,
    ) -> BTreeMap<String, ValueTemplate> {
        let root = FieldPath::root("service");
        // A value given for the whole service and again for this channel is
        // an override; given twice in the same place, a mistake.
        let service_values =
            custom_values(&root, svc.doc.custom.as_ref()).map(|(p, v)| (p, v, false));
        let channel_values = per
            .into_iter()
            .flat_map(|per| custom_values(&per.path, per.doc.custom.as_ref()))
            .map(|(p, v)| (p, v, true));
        let mut seen: BTreeSet<(bool, &str)> = BTreeSet::new();
        let mut values = BTreeMap::new();
        for (path, value, per_channel) in service_values.chain(channel_values) {
            if !seen.insert((per_channel, value.name.as_str())) {
                self.err(
                    svc.source,
                    &path.key("name"),
                    format!("parameter '{}' is given twice", value.name),
                );
            }
            if let Some(checked) = self.parameter_value(svc, channel, runtime, &path, value) {
                values.insert(value.name.clone(), checked);
            }
        }
        self.missing_required_values(svc, channel, runtime, &values);
        values
    }

    /// Reports each required parameter of the runtime the service gives no
    /// value in `channel`.
    fn missing_required_values(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        runtime: &Runtime,
        values: &BTreeMap<String, ValueTemplate>,
    ) {
        let root = FieldPath::root("service");
        let path = if svc.doc.custom.is_some() {
            root.key("custom").key("parameterValues")
        } else {
            root
        };
        for param in &runtime.params {
            if param.required && !values.contains_key(&param.name) {
                self.err(
                    svc.source,
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
    }

    /// The service's extra env in `channel`: service-wide, overridden by the
    /// channel's own.
    fn service_env(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        per: Option<&PerChannel<'_>>,
    ) -> BTreeMap<String, Template> {
        let root = FieldPath::root("service");
        let service_env = svc
            .doc
            .env
            .iter()
            .map(|(k, v)| (root.key("env").key(k), k, v));
        let channel_env = per.into_iter().flat_map(|per| {
            per.doc
                .env
                .iter()
                .map(|(k, v)| (per.path.key("env").key(k), k, v))
        });
        let mut env = BTreeMap::new();
        for (path, name, raw) in service_env.chain(channel_env) {
            if let Err(e) = check_env_name(name) {
                self.err(svc.source, &path, e);
            }
            if let Some(t) = self.service_template(svc, channel, &path, raw) {
                env.insert(name.clone(), t);
            }
        }
        env
    }

    /// One value for a runtime parameter (at `path`): a declared parameter,
    /// given exactly one value, of the type it is declared with.
    fn parameter_value(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        runtime: &Runtime,
        path: &FieldPath,
        value: &ParameterValueDoc,
    ) -> Option<ValueTemplate> {
        let Some(decl) = runtime.param(&value.name) else {
            let message = unknown_runtime_param_message(&value.name, runtime);
            self.err(svc.source, &path.key("name"), message);
            return None;
        };
        let (kind, raw) = self.given_value(svc.source, path, value, decl)?;
        if kind != decl.kind {
            self.err(
                svc.source,
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
            (ParamKind::Secret, _) => self.secret_value(svc.source, &value_path, value),
            (_, Some(raw)) => self.text_value(svc, channel, &value_path, kind, raw),
            (_, None) => None,
        }
    }

    /// The one typed value written (`string: …`, `int: …`, …) with its text;
    /// a secret has none.
    fn given_value<'v>(
        &mut self,
        source: &Source,
        path: &FieldPath,
        value: &'v ParameterValueDoc,
        decl: &ParamDecl,
    ) -> Option<(ParamKind, Option<&'v String>)> {
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
        match given.as_slice() {
            [one] => Some(*one),
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
                None
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
                None
            }
        }
    }

    /// A secret value: read by the runner from one of its env variables.
    fn secret_value(
        &mut self,
        source: &Source,
        path: &FieldPath,
        value: &ParameterValueDoc,
    ) -> Option<ValueTemplate> {
        let secret = value.secret.as_ref()?;
        match check_env_name(&secret.from_env) {
            Ok(()) => Some(ValueTemplate::Secret(SecretRef::FromEnv(
                secret.from_env.clone(),
            ))),
            Err(e) => {
                self.err(source, &path.key("fromEnv"), e);
                None
            }
        }
    }

    /// A text value. Without template references it is checked against its
    /// type now; with them, once rendered for a release.
    fn text_value(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        path: &FieldPath,
        kind: ParamKind,
        raw: &str,
    ) -> Option<ValueTemplate> {
        let template = self.service_template(svc, channel, path, raw)?;
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
                self.err(svc.source, path, e);
                return None;
            }
        }
        Some(ValueTemplate::Text(template))
    }

    /// Parses a template written in a service (parameter values, env), whose
    /// `.Params` are the service's own release parameters.
    fn service_template(
        &mut self,
        svc: &ServiceInput<'_>,
        channel: &ReleaseChannel,
        path: &FieldPath,
        raw: &str,
    ) -> Option<Template> {
        let template = match Template::parse(raw) {
            Ok(t) => t,
            Err(e) => {
                self.err(svc.source, path, e);
                return None;
            }
        };
        let mut ok = true;
        for reference in template.references() {
            match reference {
                Reference::Param(name) if !svc.params.iter().any(|p| &p.name == name) => {
                    let message =
                        unknown_param_message(name, reference, "this service", svc.params);
                    self.err(svc.source, path, message);
                    ok = false;
                }
                Reference::Constant(name) if !channel.constants.contains_key(name) => {
                    self.err(
                        svc.source,
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

fn unknown_runtime_param_message(name: &str, runtime: &Runtime) -> String {
    let declared: Vec<&str> = runtime.params.iter().map(|p| p.name.as_str()).collect();
    let hint = suggest(name, declared.iter().copied())
        .map(|s| format!("did you mean '{s}'? "))
        .unwrap_or_default();
    format!(
        "unknown parameter '{name}' for runtime {}; {hint}it declares: {}",
        runtime.name,
        if declared.is_empty() {
            "no parameters".to_owned()
        } else {
            declared.join(", ")
        }
    )
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
