//! Operator actions on many of an application's instances at once, as the
//! CLI names them (`vergence pause --app shop --release-channel prod`):
//! pause, resume, and checks (look again: fetch afresh, retry what failed,
//! as rerunning `vergence up` does). Each needs the application's `admin`
//! token, like the actions on one instance, and answers with the
//! instances it matched.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use vergence_engine::control::PauseAction;
use vergence_model::ports::InstanceFilter;
use vergence_model::{ApplicationName, Scope};

use super::{parse_name, path_error, read_optional_json};
use crate::auth::{Caller, authenticate};
use crate::wire::{InstancesRequest, InstancesResponse};
use crate::{ApiError, ApiState};

/// The caller, once it may act on the path's application, and the
/// instances the body narrows it to (all of them without a body).
async fn matching(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<(Caller, InstanceFilter), ApiError> {
    let caller = authenticate(api, headers).await?;
    let Path(app) = path.map_err(path_error)?;
    let application: ApplicationName = parse_name("application", &app)?;
    caller.authorize(&application, Scope::Admin)?;
    let body: InstancesRequest = read_optional_json(api, request).await?;
    let filter = InstanceFilter {
        application: Some(application),
        service: body
            .service
            .map(|raw| parse_name("service", &raw))
            .transpose()?,
        release_channel: body
            .release_channel
            .map(|raw| parse_name("releaseChannel", &raw))
            .transpose()?,
    };
    Ok((caller, filter))
}

async fn pause_or_resume(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
    action: PauseAction,
) -> Result<Json<InstancesResponse>, ApiError> {
    let (caller, filter) = matching(api, headers, path, request).await?;
    // No instance matching is a 404 naming the filter; nothing is written.
    let instances = api.control.pause(&filter, action, &caller.actor()).await?;
    Ok(Json(InstancesResponse { instances }))
}

/// `POST /v1/applications/{app}/pause`.
pub(super) async fn pause(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<InstancesResponse>, ApiError> {
    pause_or_resume(&api, &headers, path, request, PauseAction::Pause).await
}

/// `POST /v1/applications/{app}/resume`.
pub(super) async fn resume(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<InstancesResponse>, ApiError> {
    pause_or_resume(&api, &headers, path, request, PauseAction::Resume).await
}

/// `POST /v1/applications/{app}/checks`.
pub(super) async fn checks(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<InstancesResponse>, ApiError> {
    let (caller, filter) = matching(&api, &headers, path, request).await?;
    // Read first: asking no instance to look again is a wrong name, said
    // as pause says it, not an empty success.
    if api.control.status(&filter).await?.is_empty() {
        return Err(vergence_model::Error::not_found("instances matching the filter").into());
    }
    let instances = api.control.request_checks(&filter, &caller.actor()).await?;
    Ok(Json(InstancesResponse { instances }))
}
