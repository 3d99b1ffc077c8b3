//! The agent's side of the agent protocol: a long-poll that is also its
//! heartbeat, and reports. Outbound HTTPS only; the token is the agent's.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use vergence_model::agent::protocol::{AgentReport, PollRequest, PollResponse, ReportAnswer};

use crate::error::AgentError;

/// Room beyond a poll's wait for the server's own work and the network.
const REQUEST_SLACK: Duration = Duration::from_secs(15);

/// A client of one Vergence API, as one agent.
#[derive(Clone)]
pub struct VergenceApi {
    http: reqwest::Client,
    base: String,
    agent: String,
    token: String,
}

impl std::fmt::Debug for VergenceApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token never reaches logs.
        f.debug_struct("VergenceApi")
            .field("base", &self.base)
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl VergenceApi {
    /// `base` is the API's URL without `/v1` (`https://vergence.example.com`).
    pub fn new(base: &str, agent: &str, token: &str) -> Result<Self, AgentError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("vergence-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(AgentError::HttpClient)?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            agent: agent.to_owned(),
            token: token.to_owned(),
        })
    }

    /// Checks in and waits up to `poll.wait_seconds` for tasks.
    pub async fn poll(&self, poll: &PollRequest) -> Result<PollResponse, AgentError> {
        let wait = Duration::from_secs(poll.wait_seconds.unwrap_or(0));
        self.post("poll", "poll", poll, wait + REQUEST_SLACK).await
    }

    /// Reports what became of a task.
    pub async fn report(&self, report: &AgentReport) -> Result<ReportAnswer, AgentError> {
        self.post("report", "reports", report, REQUEST_SLACK).await
    }

    async fn post<B: Serialize, A: DeserializeOwned>(
        &self,
        operation: &'static str,
        route: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<A, AgentError> {
        let url = format!("{}/v1/agents/{}/{route}", self.base, self.agent);
        let failed = |source| AgentError::Api {
            operation,
            url: url.clone(),
            source,
        };
        let response = self
            .http
            .post(&url)
            .bearer_auth(&self.token)
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(AgentError::Refused {
                operation,
                status: status.as_u16(),
                body,
            });
        }
        response.json().await.map_err(failed)
    }
}
