//! Alert states that protections refer to: set one by name, or take an
//! Alertmanager webhook. Alerts are global, so any application's `admin`
//! token may set them; answers list only the caller's own instances.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use vergence_model::{InstanceKey, Scope, check_name};

use super::{parse_json, path_error, read_body};
use crate::alertmanager::{self, Payload};
use crate::auth::{Caller, authenticate, verify_webhook};
use crate::wire::{AlertRequest, AlertResponse, AlertStateName, AlertsResponse};
use crate::{ApiError, ApiState};

/// `PUT /v1/alerts/{name}`.
pub(super) async fn set(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<AlertResponse>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    let Path(name) = path.map_err(path_error)?;
    check_name(&name).map_err(|e| ApiError::invalid("name", e))?;
    caller.require_scope(Scope::Admin)?;
    let body = read_body(&api, request).await?;
    let request: AlertRequest = parse_json(&body)?;
    let state = request
        .state
        .ok_or_else(|| ApiError::invalid("state", "missing field"))?;
    let answer = set_one(&api, &caller, name, state.is_firing(), request.summary).await?;
    Ok(Json(answer))
}

/// `POST /v1/alerts/alertmanager`: Alertmanager's webhook (version 4).
pub(super) async fn alertmanager(
    State(api): State<ApiState>,
    headers: HeaderMap,
    request: Request,
) -> Result<Json<AlertsResponse>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    caller.require_scope(Scope::Admin)?;
    let body = read_body(&api, request).await?;
    verify_webhook(&api, &headers, &body).await?;
    let payload: Payload = parse_json(&body)?;
    // Every alert is checked before the first is recorded.
    let updates = alertmanager::updates(payload)?;
    let mut alerts = Vec::with_capacity(updates.len());
    for update in updates {
        alerts.push(set_one(&api, &caller, update.name, update.firing, update.summary).await?);
    }
    Ok(Json(AlertsResponse { alerts }))
}

async fn set_one(
    api: &ApiState,
    caller: &Caller,
    name: String,
    firing: bool,
    summary: Option<String>,
) -> Result<AlertResponse, ApiError> {
    let guarded = api
        .control
        .set_alert(&name, firing, summary, &caller.actor())
        .await?;
    let instances: Vec<InstanceKey> = guarded
        .into_iter()
        .filter(|key| caller.acts_for(&key.application))
        .collect();
    Ok(AlertResponse {
        name,
        state: AlertStateName::of(firing),
        instances,
    })
}
