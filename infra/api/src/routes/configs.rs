//! `POST /v1/configs`: upload a config bundle, to validate it or apply it.

use std::path::{Component, Path};

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use vergence_model::ConfigBundle;
use vergence_model::{ApplicationName, Scope};

use super::{parse_json, query_error, read_body};
use crate::auth::{Caller, authenticate};
use crate::wire::{ConfigPushRequest, ValidationReport};
use crate::{ApiError, ApiState};

/// Longest accepted file path in a bundle.
const MAX_PATH_LEN: usize = 512;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConfigQuery {
    #[serde(default)]
    validate_only: bool,
}

pub(super) async fn push(
    State(api): State<ApiState>,
    headers: HeaderMap,
    query: Result<Query<ConfigQuery>, QueryRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    let Query(query) = query.map_err(query_error)?;
    // Which applications the config touches is only known once it parses;
    // the scope is checked first so non-admin tokens learn nothing more.
    caller.require_scope(Scope::Admin)?;
    let body = read_body(&api, request).await?;
    let push: ConfigPushRequest = parse_json(&body)?;
    let bundle = bundle_of(push)?;
    let model = api.control.validate(&bundle)?;
    let applications = model.applications();
    for application in &applications {
        caller.authorize(application, Scope::Admin)?;
    }
    if query.validate_only {
        return Ok(Json(ValidationReport {
            hash: model.hash().to_owned(),
            applications,
            runtimes: model.runtime_count(),
            instances: model.instance_keys().len(),
        })
        .into_response());
    }
    authorize_removals(&api, &caller, &applications).await?;
    let report = api
        .control
        .apply_compiled(model, bundle, &caller.actor())
        .await?;
    Ok(Json(report).into_response())
}

/// The config in force is replaced as a whole: an application missing from
/// the new bundle loses its instances. Only that application's admin may
/// do that, so a token of one application cannot remove another's.
async fn authorize_removals(
    api: &ApiState,
    caller: &Caller,
    applications: &[ApplicationName],
) -> Result<(), ApiError> {
    let Some(current) = api.control.current_config().await? else {
        return Ok(());
    };
    for application in current.channels.keys() {
        if !applications.contains(application) {
            caller.authorize(application, Scope::Admin).map_err(|_| {
                ApiError::Authorize(format!(
                    "applying this config would remove application {application}, which the token cannot administer; include it in the bundle"
                ))
            })?;
        }
    }
    Ok(())
}

/// The bundle of an upload: relative `*.yaml`/`*.yml`/`*.json` paths only, so a
/// path can never point a job's working directory outside the config root.
fn bundle_of(push: ConfigPushRequest) -> Result<ConfigBundle, ApiError> {
    let files = push
        .files
        .ok_or_else(|| ApiError::invalid("files", "missing field"))?;
    if files.is_empty() {
        return Err(ApiError::invalid(
            "files",
            "the bundle has no files; send the config directory's *.yaml files",
        ));
    }
    for path in files.keys() {
        check_path(path)
            .map_err(|message| ApiError::invalid(format!("files[{path:?}]"), message))?;
    }
    Ok(ConfigBundle::from_files(files))
}

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_PATH_LEN {
        return Err(format!("a path must have 1 to {MAX_PATH_LEN} characters"));
    }
    if ![".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| path.ends_with(ext))
    {
        return Err(
            "only *.yaml and *.yml files (and *.json files services name) belong in a config bundle"
                .to_owned(),
        );
    }
    if path.contains('\\') {
        return Err("use '/' to separate directories".to_owned());
    }
    let relative_and_plain = Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if !relative_and_plain {
        return Err(
            "paths are relative to the config directory, without '.', '..' or a leading '/'"
                .to_owned(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_path;

    #[test]
    fn bundle_paths_stay_inside_the_config_directory() {
        for ok in [
            "application.yaml",
            "apps/shop/services.yml",
            "ecs/task-definition.json",
        ] {
            assert!(check_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/app.yaml",
            "../app.yaml",
            "a/../../b.yaml",
            "./app.yaml",
            "a\\b.yaml",
            "notes.txt",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }
}
