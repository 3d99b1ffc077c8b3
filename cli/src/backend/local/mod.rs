//! The state file on this machine: the control operations over SQLite,
//! and the engine run in this process ([`engine`]). Every answer is made
//! by the API crate's view functions, as the API makes it.

pub mod engine;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail};
use async_trait::async_trait;
use vergence_api::wire::{
    AgentView, AlertView, InstanceProgress, InstanceView, PlanEntryView, PlanResponse,
    RolloutResponse, StatusResponse, TokenView, ValidationReport,
};
use vergence_compiler::YamlCompiler;
use vergence_embedded::{DirArtifactStore, LocalQueue, SqliteStore};
use vergence_engine::control::{ApplyReport, Control, PartVersion, PauseAction, PreparedPush};
use vergence_engine::metrics::{DeliveryMetrics, Lookback};
use vergence_model::ports::{
    ArtifactStore, Clock, CompiledConfig, Compiler, InstanceFilter, StateStore, SystemClock,
};
use vergence_model::{
    ApplicationName, Approval, ConfigBundle, ConfigPart, Event, EventFilter, InstanceKey, Release,
    ReleaseChannelName, Scope, ServiceName, TokenSubject, Version,
};

use super::{
    Access, Backend, ConfigPush, Converge, Converged, InvalidConfig, NoState, Place, PlanTexts,
    Pushed, Result,
};
use crate::args::Global;

/// Plan files larger than this are shown by size and digest only.
const MAX_PLAN_TEXT: u64 = 64 * 1024;

/// The store, the control operations over it, and what the engine needs
/// to run here.
pub struct Local {
    pub store: Arc<dyn StateStore>,
    pub queue: Arc<LocalQueue>,
    pub clock: Arc<dyn Clock>,
    /// Files handed between jobs, in `artifacts/` beside the state file.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// The state file, beside which job results it refused are kept.
    pub state_path: PathBuf,
    pub control: Control,
    /// Who actions are attributed to in events.
    pub actor: String,
    /// The config directory, for the hints that name it.
    config_dir: PathBuf,
    /// Where notifications link to.
    pub public_url: Option<String>,
}

/// Who CLI actions are attributed to in events.
fn actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}")
}

impl Local {
    /// The state `global` names, as `access` needs it.
    pub fn open(global: &Global, access: Access) -> Result<Self> {
        let path = global.state_path();
        let store: Arc<dyn StateStore> = match access {
            Access::Existing if !path.exists() => return Err(NoState { path }.into()),
            // Planning reads state if there is some, and never creates it.
            Access::IfPresent if !path.exists() => Arc::new(SqliteStore::in_memory()?),
            Access::Existing | Access::IfPresent | Access::Create => {
                Arc::new(SqliteStore::open(&path)?)
            }
        };
        Ok(Self::over(store, &path, global))
    }

    /// Over another store: a serverless deployment's table, for tokens.
    pub fn over(store: Arc<dyn StateStore>, path: &Path, global: &Global) -> Self {
        let artifacts: Arc<dyn ArtifactStore> = Arc::new(DirArtifactStore::new(
            path.parent().unwrap_or(Path::new(".")).join("artifacts"),
        ));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let queue = Arc::new(LocalQueue::new(clock.clone()));
        let control = Control::new(
            store.clone(),
            queue.clone(),
            clock.clone(),
            Arc::new(YamlCompiler),
        );
        Self {
            store,
            queue,
            clock,
            artifacts,
            state_path: path.to_path_buf(),
            control,
            actor: actor(),
            config_dir: global.config.clone(),
            public_url: global.public_url.clone(),
        }
    }

    /// The line that says how to run the engine on this state, after
    /// `explain` found nothing running it.
    fn how_to_run_the_engine(&self) -> String {
        let dir = self.config_dir.display();
        format!(
            "  to run it: `vergence up --config {dir}` (once), or keep `vergence up --watch --config {dir}` or `vergence serve --config {dir}` running"
        )
    }
}

/// A config with errors as the commands print it; other errors as they are.
fn rejected(error: impl Into<anyhow::Error>) -> anyhow::Error {
    let error = error.into();
    match error.downcast_ref::<vergence_model::Error>() {
        Some(vergence_model::Error::Config(errors)) => InvalidConfig {
            errors: errors.0.clone(),
            more: 0,
        }
        .into(),
        _ => error,
    }
}

/// Locally there are no tokens, but a push of one application's part
/// still changes nothing outside it.
fn within_scope(prepared: &PreparedPush) -> anyhow::Result<()> {
    match prepared.scope_refusal() {
        Some(refusal) => Err(anyhow!(refusal)),
        None => Ok(()),
    }
}

#[async_trait]
impl Backend for Local {
    fn place(&self) -> Place {
        Place::Local
    }

    async fn instance_key(
        &self,
        application: Option<ApplicationName>,
        service: ServiceName,
        channel: ReleaseChannelName,
    ) -> Result<InstanceKey> {
        Ok(self
            .control
            .instance_key(application, service, channel)
            .await?)
    }

    async fn status(&self, filter: &InstanceFilter) -> Result<StatusResponse> {
        let records = self.control.status(filter).await?;
        let now = self.clock.now();
        let agents = self.store.list_agents().await?;
        Ok(StatusResponse {
            instances: records.iter().map(InstanceView::of).collect(),
            agents: agents.iter().map(|a| AgentView::of(a, now)).collect(),
        })
    }

    /// Plan files that are text and small enough to read on a terminal;
    /// binary or large ones (a Terraform plan is a zip, whose bytes a
    /// terminal would act on) are shown by size and digest only.
    async fn plan_texts(&self, views: &[InstanceView]) -> Result<PlanTexts> {
        let mut texts = BTreeMap::new();
        for view in views {
            let Some(shown) = &view.plan else {
                continue;
            };
            let key = InstanceKey::new(
                view.application.clone(),
                view.service.clone(),
                view.release_channel.clone(),
            );
            let Some(record) = self.store.get_instance(&key).await? else {
                continue;
            };
            // A Terraform plan is read as its changes, never as its files.
            let Some(plan) = record
                .state
                .plan
                .filter(|p| p.content.is_none() && p.version == shown.version)
            else {
                continue;
            };
            for (index, artifact) in plan.artifacts.iter().enumerate() {
                if artifact.size > MAX_PLAN_TEXT {
                    continue;
                }
                if let Ok(Some(bytes)) = self.artifacts.get(&artifact.key).await
                    && let Ok(text) = String::from_utf8(bytes)
                    && crate::output::is_terminal_text(&text)
                {
                    texts.insert((key.clone(), index), text);
                }
            }
        }
        Ok(texts)
    }

    async fn events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        Ok(self.control.events(filter).await?)
    }

    async fn metrics(
        &self,
        application: Option<&ApplicationName>,
        lookback: Lookback,
    ) -> Result<DeliveryMetrics> {
        Ok(self.control.metrics(application, lookback).await?)
    }

    async fn explain(&self, key: &InstanceKey) -> Result<Vec<String>> {
        let now = self.clock.now();
        let mut lines =
            vergence_api::explain_instance(&self.control, self.store.as_ref(), now, key).await?;
        // The engine says when nothing runs it; here is how to, for this config.
        if let Some(at) = lines
            .iter()
            .position(|l| l.contains("nothing is running the engine"))
        {
            lines.insert(at + 1, self.how_to_run_the_engine());
        }
        Ok(lines)
    }

    async fn rollout(&self, application: Option<&ApplicationName>) -> Result<RolloutResponse> {
        let filter = InstanceFilter {
            application: application.cloned(),
            ..InstanceFilter::default()
        };
        let records = self.control.status(&filter).await?;
        Ok(RolloutResponse {
            config: self.store.current_config().await?.map(|c| c.hash),
            instances: records.iter().map(InstanceProgress::of).collect(),
        })
    }

    async fn plan(&self, bundle: ConfigBundle) -> Result<PlanResponse> {
        let model = YamlCompiler.compile(&bundle).map_err(rejected)?;
        let entries = self.control.plan(model.as_ref()).await?;
        Ok(PlanResponse {
            hash: model.hash().to_owned(),
            instances: entries.iter().map(PlanEntryView::of).collect(),
        })
    }

    async fn release(
        &self,
        application: Option<ApplicationName>,
        service: &ServiceName,
        version: &Version,
        params: &BTreeMap<String, String>,
    ) -> Result<Release> {
        Ok(self
            .control
            .push_release(application, service, version, params, &self.actor)
            .await?)
    }

    async fn approve(&self, key: &InstanceKey, version: Option<&Version>) -> Result<Approval> {
        Ok(self.control.approve(key, version, &self.actor).await?)
    }

    async fn pause(
        &self,
        filter: &InstanceFilter,
        action: PauseAction,
    ) -> Result<Vec<InstanceKey>> {
        Ok(self.control.pause(filter, action, &self.actor).await?)
    }

    async fn pin(&self, key: &InstanceKey, version: &Version) -> Result<()> {
        Ok(self.control.pin(key, version, &self.actor).await?)
    }

    async fn unpin(&self, key: &InstanceKey) -> Result<()> {
        Ok(self.control.unpin(key, &self.actor).await?)
    }

    async fn rollback(&self, key: &InstanceKey, version: Option<&Version>) -> Result<()> {
        Ok(self.control.rollback(key, version, &self.actor).await?)
    }

    async fn override_windows(
        &self,
        key: &InstanceKey,
        version: Option<&Version>,
        reason: &str,
        lasting: jiff::SignedDuration,
    ) -> Result<vergence_model::WindowOverride> {
        Ok(self
            .control
            .override_windows(key, version, reason, Some(lasting), &self.actor)
            .await?)
    }

    async fn request_checks(&self, filter: &InstanceFilter) -> Result<Vec<InstanceKey>> {
        Ok(self.control.request_checks(filter, &self.actor).await?)
    }

    async fn alerts(&self) -> Result<Vec<AlertView>> {
        let alerts = self.control.alerts().await?;
        Ok(alerts.iter().map(AlertView::of).collect())
    }

    async fn set_alert(
        &self,
        name: &str,
        firing: bool,
        summary: Option<String>,
    ) -> Result<Vec<InstanceKey>> {
        Ok(self
            .control
            .set_alert(name, firing, summary, &self.actor)
            .await?)
    }

    async fn push_config(&self, push: ConfigPush) -> Result<Pushed> {
        let ConfigPush {
            bundle,
            application,
            validate_only,
            compiled,
        } = push;
        // One application's part is checked composed with the others.
        if validate_only {
            let prepared = self
                .control
                .prepare_push(&bundle, application.as_ref(), compiled)
                .await
                .map_err(rejected)?;
            within_scope(&prepared)?;
            return Ok(Pushed::Validated(ValidationReport::of(
                prepared.model().as_ref(),
            )));
        }
        let report = self
            .control
            .push_config(
                &bundle,
                application.as_ref(),
                &self.actor,
                compiled,
                within_scope,
            )
            .await
            .map_err(rejected)?;
        Ok(Pushed::Applied(report))
    }

    async fn config_versions(
        &self,
        application: &ApplicationName,
        limit: usize,
    ) -> Result<Vec<PartVersion>> {
        let part = ConfigPart::Application(application.clone());
        Ok(self.control.part_versions(&part, limit).await?)
    }

    async fn rollback_config(
        &self,
        application: &ApplicationName,
        to: Option<&str>,
    ) -> Result<ApplyReport> {
        self.control
            .rollback_config(application, to, &self.actor, within_scope)
            .await
            .map_err(rejected)
    }

    async fn create_token(
        &self,
        subject: &TokenSubject,
        scopes: &[Scope],
        description: Option<String>,
    ) -> Result<(TokenView, String)> {
        let (token, full) = vergence_api::create_token(
            self.store.as_ref(),
            subject,
            scopes,
            description,
            &self.actor,
            self.clock.as_ref(),
        )
        .await?;
        Ok((TokenView::of(&token), full))
    }

    async fn list_tokens(&self, subject: &TokenSubject) -> Result<Vec<TokenView>> {
        let tokens = self.store.list_tokens(subject).await?;
        Ok(tokens.iter().map(TokenView::of).collect())
    }

    async fn revoke_token(&self, id: &str) -> Result<()> {
        if !self.store.delete_token(id).await? {
            bail!("no token {id} (see `vergence token list --app APP`)");
        }
        Ok(())
    }

    async fn up_scope(&self, _: &dyn CompiledConfig) -> Result<Option<ApplicationName>> {
        Ok(None)
    }

    async fn converge(&self, how: Converge<'_>) -> Result<Converged> {
        engine::converge(self, how).await
    }
}
