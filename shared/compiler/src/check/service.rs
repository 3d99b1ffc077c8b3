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
struct PerChannel<'a> {
    path: FieldPath,
    doc: &'a PerReleaseChannelDoc,
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
