//! A Vergence API (`vergence serve`, or the deployed `api` function) over
//! HTTP: each operation is one route of `docs/openapi.json`, answered with
//! the same wire views the local state gives. The engine runs on the
//! server: `up` pushes, then follows it ([`follow`]).

mod follow;
mod http;

use std::collections::BTreeMap;

use anyhow::{anyhow, bail};
use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use vergence_api::wire::{
    AlertListResponse, AlertRequest, AlertResponse, AlertStateName, AlertView, ApprovalRequest,
    ConfigPushRequest, EventsResponse, InstanceDetail, InstanceView, InstancesRequest,
    InstancesResponse, OverrideRequest, PinRequest, PlanResponse, ReleaseRequest, RollbackBody,
    RolloutResponse, StatusResponse, TokenCreated, TokenInfo, TokenRequest, TokenView,
    TokensResponse, ValidationReport,
};
use vergence_engine::control::{ApplyReport, PartVersion, PauseAction};
use vergence_engine::metrics::{DeliveryMetrics, Lookback};
use vergence_model::ports::{CompiledConfig, InstanceFilter};
use vergence_model::{
    ApplicationName, Approval, ConfigBundle, Event, EventFilter, InstanceKey, Release,
    ReleaseChannelName, Scope, ServiceName, TokenSubject, Version,
};

use super::{Backend, ConfigPush, Converge, Converged, Place, PlanTexts, Pushed, Result};
use crate::args::Global;

pub use http::ApiFailure;

/// The API at `--endpoint`, with `--token`.
pub struct Api {
    client: http::Client,
    /// What the token is, asked once: its application is what commands
    /// mean when they name none.
    whoami: OnceCell<TokenInfo>,
}

impl Api {
    pub fn new(global: &Global) -> Result<Self> {
        Ok(Self {
            client: http::Client::new(global)?,
            whoami: OnceCell::new(),
        })
    }

    async fn whoami(&self) -> Result<&TokenInfo> {
        self.whoami
            .get_or_try_init(|| self.client.get("/v1/whoami", &[]))
            .await
    }

    /// Who this token's actions are attributed to in events.
    async fn own_actor(&self) -> Result<String> {
        let me = self.whoami().await?;
        // Servers before `actor` was answered name tokens by id only.
        Ok(me
            .actor
            .clone()
            .unwrap_or_else(|| format!("api:token-{}", me.id)))
    }

    /// The application a request is about: the one named, else the token's.
    async fn application(&self, named: Option<&ApplicationName>) -> Result<ApplicationName> {
        if let Some(application) = named {
            return Ok(application.clone());
        }
        let me = self.whoami().await?;
        me.application.clone().ok_or_else(|| {
            anyhow!(
                "--app is required: token {} belongs to {}, not to an application",
                me.id,
                owner(me)
            )
        })
    }
}

/// Whose a token is, for messages.
fn owner(me: &TokenInfo) -> String {
    match (&me.application, &me.agent) {
        (Some(application), _) => format!("application {application}"),
        (None, Some(agent)) => format!("agent {agent}"),
        (None, None) => "the platform".to_owned(),
    }
}

/// `/v1/applications/{app}/services/{service}/release-channels/{rc}`.
fn instance_path(key: &InstanceKey) -> String {
    format!(
        "/v1/applications/{}/services/{}/release-channels/{}",
        key.application, key.service, key.release_channel
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

/// Tokens of agents and of the platform are not an application's to grant.
fn not_through_the_api(subject: &TokenSubject) -> anyhow::Error {
    anyhow!(
        "tokens of {subject} are not made or listed through the API, which manages one application's tokens: make them where the state is (`vergence token … --state FILE`, or `--dynamodb-table TABLE` for a serverless deployment)"
    )
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

    async fn metrics(
        &self,
        application: Option<&ApplicationName>,
        lookback: Lookback,
    ) -> Result<DeliveryMetrics> {
        let app = self.application(application).await?;
        let query = [("since", lookback.to_string())];
        self.client
            .get(&format!("/v1/applications/{app}/metrics"), &query)
            .await
    }

    /// The instance route answers with the same lines.
    async fn explain(&self, key: &InstanceKey) -> Result<Vec<String>> {
        let detail: InstanceDetail = self.client.get(&instance_path(key), &[]).await?;
        Ok(detail.explain)
    }

    async fn rollout(&self, application: Option<&ApplicationName>) -> Result<RolloutResponse> {
        let app = self.application(application).await?;
        self.client
            .get(&format!("/v1/applications/{app}/rollout"), &[])
            .await
    }

    async fn plan(&self, bundle: ConfigBundle) -> Result<PlanResponse> {
        let body = ConfigPushRequest {
            files: Some(bundle.files),
        };
        self.client
            .send(Method::POST, "/v1/configs/plan", &body)
            .await
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

    async fn pause(
        &self,
        filter: &InstanceFilter,
        action: PauseAction,
    ) -> Result<Vec<InstanceKey>> {
        let app = self.application(filter.application.as_ref()).await?;
        let verb = match action {
            PauseAction::Pause => "pause",
            PauseAction::Resume => "resume",
        };
        let answer: InstancesResponse = self
            .client
            .send(
                Method::POST,
                &format!("/v1/applications/{app}/{verb}"),
                &instances_request(filter),
            )
            .await?;
        Ok(answer.instances)
    }

    async fn pin(&self, key: &InstanceKey, version: &Version) -> Result<()> {
        let body = PinRequest {
            version: Some(version.to_string()),
        };
        let _: InstanceView = self
            .client
            .send(Method::POST, &format!("{}/pin", instance_path(key)), &body)
            .await?;
        Ok(())
    }

    async fn unpin(&self, key: &InstanceKey) -> Result<()> {
        let path = format!("{}/unpin", instance_path(key));
        let _: InstanceView = self
            .client
            .call(self.client.request(Method::POST, &path))
            .await?;
        Ok(())
    }

    async fn rollback(&self, key: &InstanceKey, version: Option<&Version>) -> Result<()> {
        let body = RollbackBody {
            version: version.map(ToString::to_string),
        };
        let _: InstanceView = self
            .client
            .send(
                Method::POST,
                &format!("{}/rollback", instance_path(key)),
                &body,
            )
            .await?;
        Ok(())
    }

    async fn override_windows(
        &self,
        key: &InstanceKey,
        version: Option<&Version>,
        reason: &str,
        lasting: jiff::SignedDuration,
    ) -> Result<vergence_model::WindowOverride> {
        let body = OverrideRequest {
            reason: Some(reason.to_owned()),
            version: version.map(ToString::to_string),
            lasting: Some(format!("{}s", lasting.as_secs())),
        };
        let answer: InstanceView = self
            .client
            .send(
                Method::POST,
                &format!("{}/override", instance_path(key)),
                &body,
            )
            .await?;
        answer
            .window_override
            .ok_or_else(|| anyhow!("the server recorded no override for {key}"))
    }

    async fn request_checks(&self, filter: &InstanceFilter) -> Result<Vec<InstanceKey>> {
        let app = self.application(filter.application.as_ref()).await?;
        let answer: InstancesResponse = self
            .client
            .send(
                Method::POST,
                &format!("/v1/applications/{app}/checks"),
                &instances_request(filter),
            )
            .await?;
        Ok(answer.instances)
    }

    async fn alerts(&self) -> Result<Vec<AlertView>> {
        let answer: AlertListResponse = self.client.get("/v1/alerts", &[]).await?;
        Ok(answer.alerts)
    }

    async fn set_alert(
        &self,
        name: &str,
        firing: bool,
        summary: Option<String>,
    ) -> Result<Vec<InstanceKey>> {
        // Checked here as the local state checks it: the name goes in the path.
        vergence_model::check_name(name).map_err(|e| anyhow!("alert: {e}"))?;
        let body = AlertRequest {
            state: Some(AlertStateName::of(firing)),
            summary,
        };
        let answer: AlertResponse = self
            .client
            .send(Method::PUT, &format!("/v1/alerts/{name}"), &body)
            .await?;
        Ok(answer.instances)
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
        subject: &TokenSubject,
        scopes: &[Scope],
        description: Option<String>,
    ) -> Result<(TokenView, String)> {
        let TokenSubject::Application(application) = subject else {
            return Err(not_through_the_api(subject));
        };
        let body = TokenRequest {
            scopes: Some(scopes.to_vec()),
            description,
        };
        let created: TokenCreated = self
            .client
            .send(
                Method::POST,
                &format!("/v1/applications/{application}/tokens"),
                &body,
            )
            .await?;
        Ok((created.view, created.token))
    }

    async fn list_tokens(&self, subject: &TokenSubject) -> Result<Vec<TokenView>> {
        let TokenSubject::Application(application) = subject else {
            return Err(not_through_the_api(subject));
        };
        let answer: TokensResponse = self
            .client
            .get(&format!("/v1/applications/{application}/tokens"), &[])
            .await?;
        Ok(answer.tokens)
    }

    /// A token of the caller's own application.
    async fn revoke_token(&self, id: &str) -> Result<()> {
        let app = self.application(None).await?;
        let path = format!("/v1/applications/{app}/tokens/{id}");
        let _: TokenView = self
            .client
            .call(self.client.request(Method::DELETE, &path))
            .await?;
        Ok(())
    }

    async fn up_scope(&self, model: &dyn CompiledConfig) -> Result<Option<ApplicationName>> {
        let me = self.whoami().await?;
        let Some(application) = &me.application else {
            bail!(
                "`vergence up --endpoint` follows the rollout of the token's application, and token {} belongs to {}: use an application's admin token (`vergence configs push` pushes without following)",
                me.id,
                owner(me)
            );
        };
        if !model.applications().contains(application) {
            bail!(
                "the config has no application {application}, whose token this is; nothing was pushed"
            );
        }
        Ok(Some(application.clone()))
    }

    async fn converge(&self, how: Converge<'_>) -> Result<Converged> {
        follow::converge(self, how).await
    }
}

fn instances_request(filter: &InstanceFilter) -> InstancesRequest {
    InstancesRequest {
        service: filter.service.as_ref().map(ToString::to_string),
        release_channel: filter.release_channel.as_ref().map(ToString::to_string),
    }
}
