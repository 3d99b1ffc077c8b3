//! Checks `service` documents: which application and runtime a service
//! uses in each release channel, the values it gives the runtime's
//! parameters (service-wide, overridden per release channel) and its env.

use std::collections::BTreeMap;

use super::field_path::FieldPath;
use super::parameters::SecretParams;
use super::{Checker, Located, check_env_name, unknown_name_message, unknown_param_message};
use crate::config::schema::{DriftPolicyDoc, PerReleaseChannelDoc, ServiceDoc};
use crate::model::{Application, ParamDecl, ReleaseChannel, Runtime, Service, ServiceChannel};
use crate::template::{Reference, Template};
use vergence_model::{ApplicationName, DriftPolicy, ReleaseChannelName, RuntimeName, Source};

/// A service's `perReleaseChannel` entry for one release channel.
pub(super) struct PerChannel<'d> {
    pub(super) path: FieldPath,
    pub(super) doc: &'d PerReleaseChannelDoc,
}

/// A service document being checked, with the release parameters it
/// declares (which its templates may use).
pub(super) struct ServiceInput<'s> {
    pub(super) source: &'s Source,
    pub(super) doc: &'s ServiceDoc,
    pub(super) params: &'s [ParamDecl],
}

impl<'a> Checker<'a> {
    /// Checks a `service` document and adds it to its application.
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
        let params = self.params(source, &root, &doc.parameters, SecretParams::Refused);
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

    /// The application a service belongs to: the one it names, or the only
    /// one the config defines.
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
        let manifests = self.service_manifests(svc, channel, runtime).ok()?;
        let ecs = self.service_ecs_files(svc, channel, runtime).ok()?;
        let cloud_run = self.service_cloud_run_file(svc, channel, runtime).ok()?;
        Some(ServiceChannel {
            runtime: runtime_name,
            values,
            env,
            manifests,
            ecs,
            cloud_run,
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

    /// Parses a template written in a service (parameter values, env), whose
    /// `.Params` are the service's own release parameters.
    pub(super) fn service_template(
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
