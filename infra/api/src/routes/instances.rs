//! One instance at a time, as the status page works: read it in full (the
//! `explain` chain, controls, jobs), and the operator actions pause, resume,
//! pin, unpin and rollback. Also the two small reads the page needs besides status:
//! who the token is, and the alerts protections refer to.
//!
//! The actions need an `admin` token of the application: the scope model
//! gives `approve` approvals only, and "pause, pin, rollback" to `admin`.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use vergence_engine::control::PauseAction;
use vergence_model::ports::InstanceFilter;
use vergence_model::{InstanceKey, InstanceRecord, Scope, Version};

use super::{instance_key, parse_json, parse_name, read_body, read_optional_json};
use crate::auth::{Caller, authenticate};
use crate::wire::{
    AlertListResponse, AlertView, InstanceDetail, InstanceView, JobView, OverrideRequest,
    PinRequest, RollbackBody, RunningJobView, TokenInfo,
};
use crate::{ApiError, ApiState};

/// `GET /v1/whoami`: any valid token may ask what it is.
pub(super) async fn whoami(
    State(api): State<ApiState>,
    headers: HeaderMap,
) -> Result<Json<TokenInfo>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    let actor = Some(caller.actor());
    Ok(Json(match &caller {
        Caller::Token(token) => TokenInfo {
            id: token.id.chars().take(8).collect(),
            application: token.application().cloned(),
            agent: token.agent().cloned(),
            scopes: token.scopes.clone(),
            actor,
        },
        // An identity trusted for one application reads as that
        // application's token, so the CLI needs no --app for it.
        Caller::Trusted(trusted) => TokenInfo {
            id: "oidc".to_owned(),
            application: match trusted.grants.keys().collect::<Vec<_>>().as_slice() {
                [only] => Some((*only).clone()),
                _ => None,
            },
            agent: None,
            scopes: (trusted.grants.values().flatten().copied())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
            actor,
        },
    }))
}

/// `GET /v1/alerts`: alerts are global (any application's protections may
/// refer to one), so any application token may read them, as `/v1/agents`.
pub(super) async fn alerts(
    State(api): State<ApiState>,
    headers: HeaderMap,
) -> Result<Json<AlertListResponse>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    caller.require_application()?;
    let alerts = api.control.alerts().await?;
    Ok(Json(AlertListResponse {
        alerts: alerts.iter().map(AlertView::of).collect(),
    }))
}

/// The instance of the path, once the caller is known to belong to its
/// application.
async fn instance_of_path(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<(Caller, InstanceKey), ApiError> {
    let caller = authenticate(api, headers).await?;
    let key = instance_key(path)?;
    caller.authorize_application(&key.application)?;
    Ok((caller, key))
}

/// An action on the instance of the path that needs `scope` and a JSON
/// body: the caller is checked before the body is read.
async fn action_with_body<T: serde::de::DeserializeOwned>(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    request: Request,
    scope: Scope,
) -> Result<(Caller, InstanceKey, T), ApiError> {
    let (caller, key) = instance_of_path(api, headers, path).await?;
    caller.require_scope(scope)?;
    let body = read_body(api, request).await?;
    Ok((caller, key, parse_json(&body)?))
}

/// The instance's record as it is now, or 404 naming it.
async fn record_of(api: &ApiState, key: &InstanceKey) -> Result<InstanceRecord, ApiError> {
    Ok(api
        .store
        .get_instance(key)
        .await?
        .ok_or_else(|| vergence_model::Error::not_found(format!("instance {key}")))?)
}

/// The instance as it is now, or 404 naming it.
async fn current(api: &ApiState, key: &InstanceKey) -> Result<InstanceView, ApiError> {
    Ok(InstanceView::of(&record_of(api, key).await?))
}

/// `GET /v1/applications/{app}/services/{service}/release-channels/{rc}`:
/// any scope of the application may read.
pub(super) async fn detail(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<InstanceDetail>, ApiError> {
    let (_, key) = instance_of_path(&api, &headers, path).await?;
    let record = record_of(&api, &key).await?;
    // The same lines `vergence explain` prints, from the same code.
    let explain =
        crate::explain_instance(&api.control, api.store.as_ref(), api.clock.now(), &key).await?;
    Ok(Json(InstanceDetail {
        instance: InstanceView::of(&record),
        explain,
        paused: record.controls.paused.clone(),
        pinned: record.controls.pinned.clone(),
        running: record
            .state
            .in_flight
            .as_ref()
            .map(|flight| RunningJobView {
                kind: flight.kind,
                version: flight.version.clone(),
                attempt: flight.attempt,
                since: flight.dispatched_at,
            }),
        last_jobs: record.state.last_jobs.iter().map(JobView::of).collect(),
    }))
}

/// `POST …/release-channels/{rc}/pause` and `…/resume`.
async fn pause_or_resume(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    action: PauseAction,
) -> Result<Json<InstanceView>, ApiError> {
    let (caller, key) = instance_of_path(api, headers, path).await?;
    caller.require_scope(Scope::Admin)?;
    let filter = InstanceFilter {
        application: Some(key.application.clone()),
        service: Some(key.service.clone()),
        release_channel: Some(key.release_channel.clone()),
    };
    api.control.pause(&filter, action, &caller.actor()).await?;
    Ok(Json(current(api, &key).await?))
}

pub(super) async fn pause(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<InstanceView>, ApiError> {
    pause_or_resume(&api, &headers, path, PauseAction::Pause).await
}

pub(super) async fn resume(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<InstanceView>, ApiError> {
    pause_or_resume(&api, &headers, path, PauseAction::Resume).await
}

/// `POST …/release-channels/{rc}/rollback`: asks the engine to roll the
/// instance back, as `vergence rollback` does.
pub(super) async fn rollback(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    request: Request,
) -> Result<Json<InstanceView>, ApiError> {
    let (caller, key) = instance_of_path(&api, &headers, path).await?;
    caller.require_scope(Scope::Admin)?;
    // An empty body rolls back to the last version that converged.
    let body: RollbackBody = read_optional_json(&api, request).await?;
    let version: Option<Version> = body
        .version
        .map(|v| parse_name("version", &v))
        .transpose()?;
    api.control
        .rollback(&key, version.as_ref(), &caller.actor())
        .await?;
    Ok(Json(current(&api, &key).await?))
}

/// `POST …/release-channels/{rc}/pin`: holds the instance on a released
/// version, as `vergence pin` does.
pub(super) async fn pin(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    request: Request,
) -> Result<Json<InstanceView>, ApiError> {
    let (caller, key, body): (_, _, PinRequest) =
        action_with_body(&api, &headers, path, request, Scope::Admin).await?;
    let version: Version = parse_name(
        "version",
        &body
            .version
            .ok_or_else(|| ApiError::invalid("version", "missing field"))?,
    )?;
    api.control.pin(&key, &version, &caller.actor()).await?;
    Ok(Json(current(&api, &key).await?))
}

/// `POST …/release-channels/{rc}/override`: break-glass, as `vergence
/// override` does. The `override` scope (or `admin`) and a reason.
pub(super) async fn override_windows(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
    request: Request,
) -> Result<Json<InstanceView>, ApiError> {
    let (caller, key, body): (_, _, OverrideRequest) =
        action_with_body(&api, &headers, path, request, Scope::Override).await?;
    let version: Option<Version> = body
        .version
        .map(|v| parse_name("version", &v))
        .transpose()?;
    let lasting = body
        .lasting
        .map(|text| {
            text.parse::<jiff::SignedDuration>().map_err(|e| {
                ApiError::invalid(
                    "for",
                    format!("{text:?} is not a duration like 30m or 2h: {e}"),
                )
            })
        })
        .transpose()?;
    api.control
        .override_windows(
            &key,
            version.as_ref(),
            body.reason.as_deref().unwrap_or_default(),
            lasting,
            &caller.actor(),
        )
        .await?;
    Ok(Json(current(&api, &key).await?))
}

/// `POST …/release-channels/{rc}/unpin`: lets the instance follow its
/// service's latest release again, as `vergence unpin` does.
pub(super) async fn unpin(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<InstanceView>, ApiError> {
    let (caller, key) = instance_of_path(&api, &headers, path).await?;
    caller.require_scope(Scope::Admin)?;
    api.control.unpin(&key, &caller.actor()).await?;
    Ok(Json(current(&api, &key).await?))
}
