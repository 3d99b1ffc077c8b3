//! Configs: `POST /v1/configs` uploads a whole config or one
//! application's part (`?application=NAME`), to validate it or apply it;
//! `POST /v1/configs/plan` says what such an upload would change;
//! `GET /v1/applications/{app}/configs` lists the versions of an
//! application's part and `POST /v1/applications/{app}/configs/rollback`
//! brings an earlier one back. Who may push what is decided by the parts a
//! push changes (docs/per-application-configs.md). A deployment refuses,
//! as invalid, a config whose jobs it could not start
//! ([`ApiConfig::target`](crate::ApiConfig::target)).

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path as PathParam, Query, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use vergence_engine::control::{PartVersion, PreparedPush};
use vergence_model::{ApplicationName, ConfigPart, Scope};
use vergence_model::{ConfigBundle, check_bundle_path};

use super::{parse_json, parse_name, path_error, query_error, read_body, read_optional_json};
use crate::auth::{Caller, authenticate};
use crate::wire::{ConfigPushRequest, PlanEntryView, PlanResponse, ValidationReport};
use crate::{ApiError, ApiState};

/// Versions listed unless `limit` says otherwise, and the most it may say.
const DEFAULT_VERSION_LIMIT: usize = 50;
const MAX_VERSION_LIMIT: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConfigQuery {
    #[serde(default)]
    validate_only: bool,
    /// Push only this application's part; the others stay as they are.
    application: Option<String>,
}

pub(super) async fn push(
    State(api): State<ApiState>,
    headers: HeaderMap,
    query: Result<Query<ConfigQuery>, QueryRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    let Query(query) = query.map_err(query_error)?;
    // Which parts the config changes is only known once it parses; the
    // scope is checked first so other tokens learn nothing more.
    let application: Option<ApplicationName> = query
        .application
        .as_deref()
        .map(|raw| parse_name("application", raw))
        .transpose()?;
    require_config_scope(&caller, application.as_ref())?;
    let body = read_body(&api, request).await?;
    let push: ConfigPushRequest = parse_json(&body)?;
    let bundle = bundle_of(push)?;
    if query.validate_only {
        let prepared = api
            .control
            .prepare_push(&bundle, application.as_ref(), None)
            .await?;
        authorize_push(&caller, &prepared)?;
        runs_here(&api, &prepared)?;
        return Ok(Json(ValidationReport::of(prepared.model().as_ref())).into_response());
    }
    let report = api
        .control
        .push_config(
            &bundle,
            application.as_ref(),
            &caller.actor(),
            None,
            |prepared| authorize_and_check(&api, &caller, prepared),
        )
        .await?;
    Ok(Json(report).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PlanQuery {
    /// Plan only this application's part, composed with the others.
    application: Option<String>,
}

/// `POST /v1/configs/plan[?application=NAME]`: what pushing the config
/// would change, per instance, against the state as it is; nothing is
/// stored. A plan is a push that stores nothing, so it needs what that
/// push would need: a token learns what a push would do only if it could
/// make the push.
pub(super) async fn plan(
    State(api): State<ApiState>,
    headers: HeaderMap,
    query: Result<Query<PlanQuery>, QueryRejection>,
    request: Request,
) -> Result<Json<PlanResponse>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    let Query(query) = query.map_err(query_error)?;
    let application: Option<ApplicationName> = query
        .application
        .as_deref()
        .map(|raw| parse_name("application", raw))
        .transpose()?;
    require_config_scope(&caller, application.as_ref())?;
    let body = read_body(&api, request).await?;
    let push: ConfigPushRequest = parse_json(&body)?;
    let bundle = bundle_of(push)?;
    let prepared = api
        .control
        .prepare_push(&bundle, application.as_ref(), None)
        .await?;
    authorize_push(&caller, &prepared)?;
    runs_here(&api, &prepared)?;
    let model = prepared.model();
    let entries = api.control.plan(model.as_ref()).await?;
    Ok(Json(PlanResponse {
        hash: model.hash().to_owned(),
        instances: entries.iter().map(PlanEntryView::of).collect(),
    }))
}

/// Pushing needs a platform token, or an application's admin token (of
/// the application pushed, when one is named).
fn require_config_scope(
    caller: &Caller,
    application: Option<&ApplicationName>,
) -> Result<(), ApiError> {
    if caller.allows(Scope::Platform) {
        return Ok(());
    }
    match application {
        Some(application) => caller.authorize(application, Scope::Admin),
        None => caller.require_scope(Scope::Admin),
    }
}

/// Who may make a push, given the parts it changes: an application's part
/// its admin (or a platform token), the platform part (runtimes and
/// protections several applications share) only a platform token. A push
/// of one application's part that would change another part is refused
/// whoever makes it: nothing outside the named application moves.
fn authorize_push(caller: &Caller, prepared: &PreparedPush) -> Result<(), ApiError> {
    if let Some(refusal) = prepared.scope_refusal() {
        return Err(ApiError::Authorize(refusal));
    }
    if caller.allows(Scope::Platform) {
        return Ok(());
    }
    for part in prepared.changed().keys() {
        let owner = match part {
            ConfigPart::Application(application) if caller.acts_for(application) => {
                continue;
            }
            ConfigPart::Application(application) => {
                format!("{application}'s admin or a platform token")
            }
            ConfigPart::Platform => {
                "a platform token (`vergence token create --platform`)".to_owned()
            }
        };
        return Err(ApiError::Authorize(format!(
            "{} belongs to {}, but this config changes {}, which only {owner} may change; nothing was changed",
            caller.name(),
            caller.owner(),
            prepared.describe(part),
        )));
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct VersionsQuery {
    limit: Option<String>,
}

/// `GET /v1/applications/{app}/configs`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct VersionsResponse {
    application: ApplicationName,
    /// Newest first; the first is the version in force.
    versions: Vec<PartVersion>,
}

/// The application of the path, for a caller that may see or change its
/// config: its own tokens (any scope to read, admin to change) or a
/// platform token.
async fn config_application(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<PathParam<String>, PathRejection>,
    scope: Option<Scope>,
) -> Result<(Caller, ApplicationName), ApiError> {
    let caller = authenticate(api, headers).await?;
    let PathParam(app) = path.map_err(path_error)?;
    let application: ApplicationName = parse_name("application", &app)?;
    if !caller.allows(Scope::Platform) {
        match scope {
            Some(scope) => caller.authorize(&application, scope)?,
            None => caller.authorize_application(&application)?,
        }
    }
    Ok((caller, application))
}

pub(super) async fn versions(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<PathParam<String>, PathRejection>,
    query: Result<Query<VersionsQuery>, QueryRejection>,
) -> Result<Json<VersionsResponse>, ApiError> {
    let (_, application) = config_application(&api, &headers, path, None).await?;
    let Query(query) = query.map_err(query_error)?;
    let limit = match query.limit.as_deref() {
        None => DEFAULT_VERSION_LIMIT,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_VERSION_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::invalid("limit", format!("a number from 1 to {MAX_VERSION_LIMIT}"))
            })?,
    };
    let versions = api
        .control
        .part_versions(&ConfigPart::Application(application.clone()), limit)
        .await?;
    if versions.is_empty() {
        let configured = api
            .control
            .current_config()
            .await?
            .is_some_and(|current| current.channels.contains_key(&application));
        if !configured {
            return Err(
                vergence_model::Error::not_found(format!("application {application}")).into(),
            );
        }
    }
    Ok(Json(VersionsResponse {
        application,
        versions,
    }))
}

/// `POST /v1/applications/{app}/configs/rollback`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RollbackRequest {
    /// The version to bring back (a hash, or at least 7 of its first
    /// characters); default the one before the version in force.
    to: Option<String>,
}

pub(super) async fn rollback(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<PathParam<String>, PathRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    let (caller, application) =
        config_application(&api, &headers, path, Some(Scope::Admin)).await?;
    let rollback: RollbackRequest = read_optional_json(&api, request).await?;
    let report = api
        .control
        .rollback_config(
            &application,
            rollback.to.as_deref(),
            &caller.actor(),
            |prepared| authorize_and_check(&api, &caller, prepared),
        )
        .await?;
    Ok(Json(report).into_response())
}

/// A push the caller may make, of a config this deployment can run.
fn authorize_and_check(
    api: &ApiState,
    caller: &Caller,
    prepared: &PreparedPush,
) -> Result<(), ApiError> {
    authorize_push(caller, prepared)?;
    runs_here(api, prepared)
}

/// A config whose jobs the deployment this API serves could not start is
/// refused as an invalid one is: 400 `invalidConfig` with every error at
/// its file and line, nothing stored. Checked after the caller is known to
/// be allowed the push, so others learn nothing of its jobs.
fn runs_here(api: &ApiState, prepared: &PreparedPush) -> Result<(), ApiError> {
    let errors = prepared.target_errors(api.config.target);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(vergence_model::Error::Config(errors).into())
    }
}

/// The bundle of an upload: only paths the CLI would send
/// ([`check_bundle_path`]: relative `*.yaml`/`*.yml`/`*.json` paths without
/// `.`, `..`, empty or hidden segments, control or formatting characters),
/// so a path can never point a job's working directory outside the config
/// root nor read as another in a listing.
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
        check_bundle_path(path)
            .map_err(|message| ApiError::invalid(format!("files[{path:?}]"), message))?;
    }
    Ok(ConfigBundle::from_files(files))
}
