//! Checks parameter declarations (`parameters:` of runtimes, services and
//! protections): a valid name, declared once, exactly one type, and a
//! default that fits it.

use super::Checker;
use super::field_path::FieldPath;
use crate::config::schema::ParameterDoc;
use crate::model::{ParamDecl, ParamKind};
use crate::template::check_identifier;
use vergence_model::{ParamValue, Source};

impl<'a> Checker<'a> {
    pub(super) fn params(
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
}

/// A loose check that catches typos (spaces, empty values), not a full
/// reference grammar: registries differ too much for more.
pub fn check_docker_image(image: &str) -> Result<(), String> {
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(format!("{image:?} is not a container image reference"));
    }
    Ok(())
}
