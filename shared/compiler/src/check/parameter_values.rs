//! Checks the values a service gives its runtime's parameters
//! (`custom.parameterValues`, service-wide and per release channel): each
//! names a declared parameter and has exactly one value of its type (a
//! secret, a source the runtime's runner reads), and every required
//! parameter gets one.

use std::collections::{BTreeMap, BTreeSet};

use super::field_path::FieldPath;
use super::secret::SecretReader;
use super::service::{PerChannel, ServiceInput};
use super::{Checker, check_docker_image};
use crate::config::schema::{CustomDoc, ParameterValueDoc};
use crate::model::{ParamDecl, ParamKind, ReleaseChannel, Runtime, ValueTemplate};
use vergence_model::Source;
use vergence_model::diagnostics::suggest;

impl<'a> Checker<'a> {
    /// The values the service gives the runtime's parameters in `channel`:
    /// service-wide ones, overridden by the channel's own.
    pub(super) fn parameter_values(
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
            (ParamKind::Secret, _) => {
                let reader = SecretReader {
                    runtime: &runtime.name,
                    runner: channel.runner_of(runtime),
                };
                let doc = value.secret.as_ref()?;
                let secret = self.secret_source(svc.source, &value_path, doc, &reader)?;
                Some(ValueTemplate::Secret(secret))
            }
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
