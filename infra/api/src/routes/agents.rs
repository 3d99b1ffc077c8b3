//! The agent protocol's routes (see `vergence_model::agent::protocol`):
//! `vergence-agent` polls for its work and reports what became of it, with
//! a token that is that agent's and can do nothing else. An application
//! token is refused here, and an agent token everywhere else.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use vergence_model::AgentName;
use vergence_model::agent::protocol::{
    AgentReport, DEFAULT_MAX_TASKS, MAX_POLL_WAIT_SECONDS, PollRequest, PollResponse, ReportAnswer,
};
use vergence_model::ports::AgentDesk;

use super::{parse_json, parse_name, path_error, read_body};
use crate::auth::authenticate;
use crate::{ApiError, ApiState};

/// How often a waiting poll looks for new work: a job queued while an
/// agent waits reaches it within this. Each look is a store query, which
/// costs on DynamoDB; a second is quick next to a job's own run.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// Most tasks one poll may ask for.
const MAX_TASKS: usize = 100;

/// The agent of the path, once the caller is known to be it.
async fn calling_agent(
    api: &ApiState,
    headers: &HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<(AgentName, std::sync::Arc<dyn AgentDesk>), ApiError> {
    let caller = authenticate(api, headers).await?;
    let Path(agent) = path.map_err(path_error)?;
    let agent: AgentName = parse_name("agent", &agent)?;
    caller.authorize_agent(&agent)?;
    let desk = api.agents.clone().ok_or_else(|| {
        ApiError::from(vergence_model::Error::not_found(
            "agent work: this server was started without the kubernetes runner",
        ))
    })?;
    Ok((agent, desk))
}

/// `POST /v1/agents/{agent}/poll`: the agent's heartbeat; answered with
/// its tasks as soon as there are some, or with none once the wait is over.
pub(super) async fn poll(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<PollResponse>, ApiError> {
    let (agent, desk) = calling_agent(&api, &headers, path).await?;
    let body = read_body(&api, request).await?;
    let poll: PollRequest = parse_json(&body)?;
    let limit = poll.max_tasks.unwrap_or(DEFAULT_MAX_TASKS);
    if !(1..=MAX_TASKS).contains(&limit) {
        return Err(ApiError::invalid(
            "maxTasks",
            format!("{limit} is not from 1 to {MAX_TASKS}"),
        ));
    }
    let wait = Duration::from_secs(
        poll.wait_seconds
            .unwrap_or(MAX_POLL_WAIT_SECONDS)
            .min(MAX_POLL_WAIT_SECONDS),
    );
    desk.check_in(&agent, &poll).await?;
    let started = tokio::time::Instant::now();
    loop {
        let tasks = desk.hand_out(&agent, limit).await?;
        let waited = started.elapsed();
        if !tasks.is_empty() || waited >= wait {
            return Ok(Json(PollResponse { tasks }));
        }
        tokio::time::sleep(LOOK_AGAIN.min(wait - waited)).await;
    }
}

/// `POST /v1/agents/{agent}/reports`: what became of one task.
pub(super) async fn report(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<ReportAnswer>, ApiError> {
    let (agent, desk) = calling_agent(&api, &headers, path).await?;
    let body = read_body(&api, request).await?;
    let report: AgentReport = parse_json(&body)?;
    let about = report.subject();
    match desk.take_report(&agent, report).await? {
        Some(answer) => Ok(Json(answer)),
        // The same answer for an unknown job or instance and another
        // agent's: an agent learns nothing about work that is not its own.
        None => Err(vergence_model::Error::not_found(format!("{about} of agent {agent}")).into()),
    }
}
