//! Reading: health, an application's status, its events, its delivery
//! metrics and where its rollout stands, the agents' last contact. Any
//! scope of the application may read.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use vergence_engine::metrics::{DeliveryMetrics, Lookback};
use vergence_model::ports::InstanceFilter;
use vergence_model::{ApplicationName, EventFilter, ReleaseChannelName, ServiceName};

use super::{parse_name, path_error, query_error};
use crate::auth::authenticate;
use crate::wire::{
    AgentView, AgentsResponse, EventsResponse, Health, InstanceProgress, InstanceView,
    RolloutResponse, StatusResponse,
};
use crate::{ApiError, ApiState};

/// Events answered when no limit is given (the CLI's default too).
const DEFAULT_EVENT_LIMIT: usize = 200;
const MAX_EVENT_LIMIT: usize = 10_000;

/// `GET /v1/healthz`: the process is up. Needs no token.
pub(super) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReadQuery {
    service: Option<String>,
    release_channel: Option<String>,
    limit: Option<String>,
}

/// The application of the path, checked against the caller's token.
async fn readable_application(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<ApplicationName, ApiError> {
    let caller = authenticate(api, headers).await?;
    let Path(app) = path.map_err(path_error)?;
    let application: ApplicationName = parse_name("application", &app)?;
    caller.authorize_application(&application)?;
    Ok(application)
}

/// An empty answer is only right for an application in the config in force;
/// otherwise the caller has the name wrong.
async fn require_configured(api: &ApiState, application: &ApplicationName) -> Result<(), ApiError> {
    let configured = api
        .control
        .current_config()
        .await?
        .is_some_and(|current| current.channels.contains_key(application));
    if configured {
        return Ok(());
    }
    Err(vergence_model::Error::not_found(format!("application {application}")).into())
}

fn optional_name<T: std::str::FromStr<Err = String>>(
    field: &str,
    raw: Option<&str>,
) -> Result<Option<T>, ApiError> {
    raw.map(|r| parse_name(field, r)).transpose()
}

/// `GET /v1/applications/{app}/status[?service=&releaseChannel=]`.
pub(super) async fn status(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<StatusResponse>, ApiError> {
    let application = readable_application(&api, &headers, path).await?;
    let Query(query) = query.map_err(query_error)?;
    let filter = InstanceFilter {
        application: Some(application.clone()),
        service: optional_name::<ServiceName>("service", query.service.as_deref())?,
        release_channel: optional_name::<ReleaseChannelName>(
            "releaseChannel",
            query.release_channel.as_deref(),
        )?,
    };
    let records = api.control.status(&filter).await?;
    if records.is_empty() {
        require_configured(&api, &application).await?;
    }
    Ok(Json(StatusResponse {
        instances: records.iter().map(InstanceView::of).collect(),
        agents: agent_views(&api).await?,
    }))
}

async fn agent_views(api: &ApiState) -> Result<Vec<AgentView>, ApiError> {
    let now = api.clock.now();
    Ok(api
        .store
        .list_agents()
        .await?
        .iter()
        .map(|agent| AgentView::of(agent, now))
        .collect())
}

/// `GET /v1/agents`: every agent that ever called and its last contact.
/// Any application token may read it; an agent's token may not (it sees
/// only its own work).
pub(super) async fn agents(
    State(api): State<ApiState>,
    headers: HeaderMap,
) -> Result<Json<AgentsResponse>, ApiError> {
    let caller = authenticate(&api, &headers).await?;
    caller.require_application()?;
    Ok(Json(AgentsResponse {
        agents: agent_views(&api).await?,
    }))
}

/// `GET /v1/applications/{app}/events[?service=&releaseChannel=&limit=]`.
pub(super) async fn events(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<EventsResponse>, ApiError> {
    let application = readable_application(&api, &headers, path).await?;
    let Query(query) = query.map_err(query_error)?;
    let limit = match query.limit.as_deref() {
        None => DEFAULT_EVENT_LIMIT,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_EVENT_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("{raw:?} is not a number from 1 to {MAX_EVENT_LIMIT}"),
                )
            })?,
    };
    let filter = EventFilter {
        application: Some(application.clone()),
        service: optional_name("service", query.service.as_deref())?,
        release_channel: optional_name("releaseChannel", query.release_channel.as_deref())?,
        limit: Some(limit),
    };
    let events = api.control.events(&filter).await?;
    // Events outlive a removed application, so history stays readable.
    if events.is_empty() {
        require_configured(&api, &application).await?;
    }
    Ok(Json(EventsResponse { events }))
}

#[derive(Debug, Deserialize)]
pub(super) struct MetricsQuery {
    since: Option<String>,
}

/// `GET /v1/applications/{app}/metrics[?since=30d]`: the four delivery
/// measures over the window up to now (the shape of `vergence metrics
/// --output json`).
pub(super) async fn metrics(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<MetricsQuery>, QueryRejection>,
) -> Result<Json<DeliveryMetrics>, ApiError> {
    let application = readable_application(&api, &headers, path).await?;
    let Query(query) = query.map_err(query_error)?;
    let lookback = match query.since.as_deref() {
        None => Lookback::DEFAULT,
        Some(raw) => raw.parse().map_err(|e| ApiError::invalid("since", e))?,
    };
    // An application not in the config in force is a 404, as for status.
    Ok(Json(
        api.control.metrics(Some(&application), lookback).await?,
    ))
}

/// `GET /v1/applications/{app}/rollout`: where each instance stands for a
/// client waiting on a push (`vergence up --endpoint`), with the config in
/// force. The engine runs elsewhere (the worker, or `vergence serve`); the
/// client decides from this when nothing can move any more.
pub(super) async fn rollout(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<RolloutResponse>, ApiError> {
    let application = readable_application(&api, &headers, path).await?;
    let filter = InstanceFilter {
        application: Some(application.clone()),
        ..InstanceFilter::default()
    };
    let records = api.control.status(&filter).await?;
    if records.is_empty() {
        require_configured(&api, &application).await?;
    }
    Ok(Json(RolloutResponse {
        config: api.control.current_config().await?.map(|c| c.hash),
        instances: records.iter().map(InstanceProgress::of).collect(),
    }))
}
