//! Releases (the CI webhook) and approvals.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use vergence_model::{ApplicationName, Approval, Release, Scope, ServiceName, Version};

use super::{instance_key, parse_json, parse_name, path_error, read_body, read_optional_json};
use crate::auth::{authenticate, verify_webhook};
use crate::wire::{ApprovalRequest, ReleaseRequest};
use crate::{ApiError, ApiState};

/// `POST /v1/applications/{app}/services/{service}/releases`.
pub(super) async fn push_release(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    request: Request,
) -> Result<Json<Release>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    let Path((app, service)) = path.map_err(path_error)?;
    let application: ApplicationName = parse_name("application", &app)?;
    let service: ServiceName = parse_name("service", &service)?;
    caller.authorize(&application, Scope::Release)?;
    let body = read_body(&api, request).await?;
    verify_webhook(&api, &headers, &body).await?;
    let request: ReleaseRequest = parse_json(&body)?;
    let version: Version = parse_name(
        "version",
        &request
            .version
            .ok_or_else(|| ApiError::invalid("version", "missing field"))?,
    )?;
    let release = api
        .control
        .push_release(
            Some(application),
            &service,
            &version,
            &request.params,
            &caller.actor(),
        )
        .await?;
    Ok(Json(release))
}

/// `POST /v1/applications/{app}/services/{service}/release-channels/{rc}/approvals`.
pub(super) async fn approve(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    request: Request,
) -> Result<Json<Approval>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    let key = instance_key(path)?;
    caller.authorize(&key.application, Scope::Approve)?;
    // `curl -X POST` without a body approves the desired version.
    let request: ApprovalRequest = read_optional_json(&api, request).await?;
    let version: Option<Version> = request
        .version
        .map(|v| parse_name("version", &v))
        .transpose()?;
    let approval = api
        .control
        .approve(&key, version.as_ref(), &caller.actor())
        .await?;
    Ok(Json(approval))
}
