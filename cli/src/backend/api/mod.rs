//! A Vergence API (`vergence serve`, or the deployed `api` function) over
//! HTTP: each operation is one route of `docs/openapi.json`, answered with
//! the same wire views the local state gives.

mod http;

use std::collections::BTreeMap;

use anyhow::{anyhow, bail};
use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use vergence_api::wire::{
    AlertView, ApprovalRequest, ConfigPushRequest, EventsResponse, InstanceView, PlanResponse,
    ReleaseRequest, RolloutResponse, StatusResponse, TokenView, ValidationReport,
};
use vergence_engine::control::{ApplyReport, PartVersion, PauseAction};
use vergence_model::ports::{CompiledConfig, InstanceFilter};
use vergence_model::{
    ApplicationName, Approval, ConfigBundle, Event, EventFilter, InstanceKey, Release,
    ReleaseChannelName, Scope, ServiceName, TokenSubject, Version,
};

use super::{Backend, ConfigPush, Converge, Converged, Place, PlanTexts, Pushed, Result};
use crate::args::Global;

/// The API at `--endpoint`, with `--token`.
pub struct Api {
    client: http::Client,
}

impl Api {
    pub fn new(global: &Global) -> Result<Self> {
        Ok(Self {
            client: http::Client::new(global)?,
        })
    }

    /// The application a request is about: the one named, else the
    /// default.
    async fn application(&self, named: Option<&ApplicationName>) -> Result<ApplicationName> {
        match named {
            Some(application) => Ok(application.clone()),
            None => self.default_application().await?.ok_or_else(|| {
                anyhow!(
                    "--app is required with --endpoint: the API serves one application at a time"
                )
            }),
        }
    }
}

/// What no route of the API does yet.
fn local_only(command: &str) -> anyhow::Error {
    anyhow!(
        "`vergence {command}` works on local state only; run it without --endpoint (and without VERGENCE_ENDPOINT)"
    )
}

/// The query of a status or events request.
fn filter_query(
    service: Option<&ServiceName>,
    channel: Option<&ReleaseChannelName>,
) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    if let Some(service) = service {
        query.push(("service", service.to_string()));
    }
    if let Some(channel) = channel {
        query.push(("releaseChannel", channel.to_string()));
    }
    query
}

#[derive(Deserialize)]
struct VersionsResponse {
    versions: Vec<PartVersion>,
}

#[derive(Serialize)]
struct ConfigRollbackRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<&'a str>,
}

#[async_trait]
impl Backend for Api {
    fn place(&self) -> Place {
        Place::Server
    }

    async fn default_application(&self) -> Result<Option<ApplicationName>> {
        Ok(None)
    }

    async fn instance_key(
        &self,
        application: Option<ApplicationName>,
        service: ServiceName,
        channel: ReleaseChannelName,
    ) -> Result<InstanceKey> {
        let application = self.application(application.as_ref()).await?;
        Ok(InstanceKey::new(application, service, channel))
    }

    async fn status(&self, filter: &InstanceFilter) -> Result<StatusResponse> {
        let app = self.application(filter.application.as_ref()).await?;
        let query = filter_query(filter.service.as_ref(), filter.release_channel.as_ref());
        self.client
            .get(&format!("/v1/applications/{app}/status"), &query)
            .await
    }

    /// The API serves no artifact's content: plan files are shown by name,
    /// size and digest.
    async fn plan_texts(&self, _: &[InstanceView]) -> Result<PlanTexts> {
        Ok(PlanTexts::new())
    }

    async fn events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        let app = self.application(filter.application.as_ref()).await?;
        let mut query = filter_query(filter.service.as_ref(), filter.release_channel.as_ref());
        if let Some(limit) = filter.limit {
            query.push(("limit", limit.to_string()));
        }
        let answer: EventsResponse = self
            .client
            .get(&format!("/v1/applications/{app}/events"), &query)
            .await?;
        Ok(answer.events)
    }

    async fn explain(&self, _: &InstanceKey) -> Result<Vec<String>> {
        Err(local_only("explain"))
    }

    async fn rollout(&self, _: Option<&ApplicationName>) -> Result<RolloutResponse> {
        Err(local_only("up"))
    }

    async fn plan(&self, _: ConfigBundle) -> Result<PlanResponse> {
        Err(local_only("plan"))
    }

    async fn release(
        &self,
        application: Option<ApplicationName>,
        service: &ServiceName,
        version: &Version,
        params: &BTreeMap<String, String>,
    ) -> Result<Release> {
        let app = self.application(application.as_ref()).await?;
        let body = ReleaseRequest {
            version: Some(version.to_string()),
            params: params.clone(),
        };
        let path = format!("/v1/applications/{app}/services/{service}/releases");
        // The CI webhook: signed when a secret is given.
        let request =
            self.client
                .json_body(self.client.request(Method::POST, &path), &body, true)?;
        self.client.call(request).await
    }

    async fn approve(&self, key: &InstanceKey, version: Option<&Version>) -> Result<Approval> {
        let body = ApprovalRequest {
            version: version.map(ToString::to_string),
        };
        self.client
            .send(
                Method::POST,
                &format!("{}/approvals", instance_path(key)),
                &body,
            )
            .await
    }

    async fn pause(&self, _: &InstanceFilter, action: PauseAction) -> Result<Vec<InstanceKey>> {
        Err(local_only(match action {
            PauseAction::Pause => "pause",
            PauseAction::Resume => "resume",
        }))
    }

    async fn pin(&self, _: &InstanceKey, _: &Version) -> Result<()> {
        Err(local_only("pin"))
    }

    async fn unpin(&self, _: &InstanceKey) -> Result<()> {
        Err(local_only("unpin"))
    }

    async fn rollback(&self, _: &InstanceKey, _: Option<&Version>) -> Result<()> {
        Err(local_only("rollback"))
    }

    async fn request_checks(&self, _: &InstanceFilter) -> Result<Vec<InstanceKey>> {
        Err(local_only("up"))
    }

    async fn alerts(&self) -> Result<Vec<AlertView>> {
        Err(local_only("alert"))
    }

    async fn set_alert(&self, _: &str, _: bool, _: Option<String>) -> Result<Vec<InstanceKey>> {
        Err(local_only("alert"))
    }

    async fn push_config(&self, push: ConfigPush) -> Result<Pushed> {
        let mut query = Vec::new();
        if push.validate_only {
            query.push(("validateOnly", "true".to_owned()));
        }
        if let Some(application) = &push.application {
            query.push(("application", application.to_string()));
        }
        let body = ConfigPushRequest {
            files: Some(push.bundle.files),
        };
        let request = self.client.json_body(
            self.client
                .request(Method::POST, "/v1/configs")
                .query(&query),
            &body,
            false,
        )?;
        Ok(if push.validate_only {
            Pushed::Validated(self.client.call::<ValidationReport>(request).await?)
        } else {
            Pushed::Applied(self.client.call::<ApplyReport>(request).await?)
        })
    }

    async fn config_versions(
        &self,
        application: &ApplicationName,
        limit: usize,
    ) -> Result<Vec<PartVersion>> {
        let answer: VersionsResponse = self
            .client
            .get(
                &format!("/v1/applications/{application}/configs"),
                &[("limit", limit.to_string())],
            )
            .await?;
        Ok(answer.versions)
    }

    async fn rollback_config(
        &self,
        application: &ApplicationName,
        to: Option<&str>,
    ) -> Result<ApplyReport> {
        self.client
            .send(
                Method::POST,
                &format!("/v1/applications/{application}/configs/rollback"),
                &ConfigRollbackRequest { to },
            )
            .await
    }

    async fn create_token(
        &self,
        _: &TokenSubject,
        _: &[Scope],
        _: Option<String>,
    ) -> Result<(TokenView, String)> {
        Err(local_only("token"))
    }

    async fn list_tokens(&self, _: &TokenSubject) -> Result<Vec<TokenView>> {
        Err(local_only("token"))
    }

    async fn revoke_token(&self, _: &str) -> Result<()> {
        Err(local_only("token"))
    }

    async fn up_scope(&self, _: &dyn CompiledConfig) -> Result<Option<ApplicationName>> {
        bail!(local_only("up"))
    }

    async fn converge(&self, _: Converge<'_>) -> Result<Converged> {
        Err(local_only("up"))
    }
}

/// `/v1/applications/{app}/services/{service}/release-channels/{rc}`.
fn instance_path(key: &InstanceKey) -> String {
    format!(
        "/v1/applications/{}/services/{}/release-channels/{}",
        key.application, key.service, key.release_channel
    )
}
