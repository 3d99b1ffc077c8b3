//! Checks parameter declarations (`parameters:` of runtimes, services and
//! protections): a valid name, declared once, exactly one type, and a
//! default that fits it.

use super::Checker;
use super::field_path::FieldPath;
use crate::config::schema::ParameterDoc;
use crate::model::{ParamDecl, ParamKind};
use crate::template::check_identifier;
use vergence_model::{ParamValue, Source};

/// Whether a document may declare `secret` parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SecretParams {
    /// Runtimes hand secrets to their jobs' environment.
    Allowed,
    /// Services and protections cannot.
    Refused,
}

impl Checker<'_> {
    /// The parameters declared under `base`; secrets only where
    /// `secrets` says whether secret parameters may be declared (runtimes: only they pass secrets to jobs).
    pub(super) fn params(
        &mut self,
        source: &Source,
        base: &FieldPath,
        docs: &[ParameterDoc],
        secrets: SecretParams,
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
            if let Some(param) = self.param(source, &path, doc, secrets) {
                params.push(param);
            }
        }
        params
    }

    /// One declaration: exactly one type, and either required or with a
    /// default that fits the type (an int needs one or the other).
    fn param(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &ParameterDoc,
        secrets: SecretParams,
    ) -> Option<ParamDecl> {
        let mut given = declared_types(doc).into_iter().flatten();
        let Some((kind, default)) = given.next() else {
            self.err(
                source,
                path,
                format!(
                    "parameter '{}' needs a type: string, int, dockerImage or secret (e.g. `string: {{}}`)",
                    doc.name
                ),
            );
            return None;
        };
        if given.next().is_some() {
            self.err(
                source,
                path,
                format!("parameter '{}' has more than one type; keep one", doc.name),
            );
        }
        if kind == ParamKind::Secret && secrets == SecretParams::Refused {
            self.err(
                source,
                &path.key("secret"),
                "secret parameters cannot be set by releases; declare the secret on the runtime",
            );
        }
        let param = ParamDecl {
            name: doc.name.clone(),
            kind,
            required: doc.required.unwrap_or(false),
            default,
        };
        self.check_default(source, path, &param);
        Some(param)
    }

    /// A parameter is required or has a default, not both; an int one needs
    /// one of them, and a dockerImage default must be an image reference.
    fn check_default(&mut self, source: &Source, path: &FieldPath, param: &ParamDecl) {
        let name = &param.name;
        if param.required && param.default.is_some() {
            self.err(
                source,
                path,
                format!("parameter '{name}' is required and has a default; keep one"),
            );
        }
        if let Some(ParamValue::DockerImage(image)) = &param.default
            && let Err(e) = check_docker_image(image)
        {
            self.err(source, &path.key("dockerImage").key("defaultValue"), e);
        }
        if param.kind == ParamKind::Int && !param.required && param.default.is_none() {
            self.err(
                source,
                path,
                format!("int parameter '{name}' needs a defaultValue or `required: true`"),
            );
        }
    }
}

/// Each type block the declaration has (`string: {}`, `int: {}`, …), with
/// its default value.
fn declared_types(doc: &ParameterDoc) -> [Option<(ParamKind, Option<ParamValue>)>; 4] {
    [
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
    ]
}

/// A loose check that catches typos (spaces, empty values), not a full
/// reference grammar: registries differ too much for more.
pub fn check_docker_image(image: &str) -> Result<(), String> {
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(format!("{image:?} is not a container image reference"));
    }
    Ok(())
}
