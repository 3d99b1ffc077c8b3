//! The one interface the commands are written against, and its two
//! implementations: [`local::Local`], the state file on this machine
//! (SQLite, the control operations, and the engine run in this process),
//! and [`api::Api`], a Vergence API (`vergence serve`, or the deployed
//! `api` function) over HTTP. Both answer with the API's wire views, made
//! by the same functions (`InstanceView::of`, …), so one printer serves
//! both and a command prints the same wherever its state is.

pub mod api;
pub mod local;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use vergence_api::wire::{
    AlertView, InstanceView, PlanResponse, RolloutResponse, StatusResponse, TokenView,
    ValidationReport,
};
use vergence_engine::control::{ApplyReport, PartVersion, PauseAction};
use vergence_engine::metrics::{DeliveryMetrics, Lookback};
use vergence_model::ports::{CompiledConfig, InstanceFilter};
use vergence_model::{
    ApplicationName, Approval, ConfigBundle, ConfigError, Event, EventFilter, InstanceKey, Release,
    ReleaseChannelName, Scope, ServiceName, TokenSubject, Version,
};

use crate::args::RunnerArgs;
use crate::progress::LiveProgress;
use crate::shutdown::Stop;

pub type Result<T> = anyhow::Result<T>;

/// What a command needs of the local state; an API has its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// It must exist: reading and operator commands never create one.
    Existing,
    /// Created when missing (`up`, `configs push`, `token create`).
    Create,
    /// Read when it exists, otherwise an empty state in memory: `plan`
    /// never creates one.
    IfPresent,
}

/// Where the state is: confirmations say who carries a change out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// This machine: `vergence up` (or a running `up --watch` or `serve`)
    /// carries changes out.
    Local,
    /// A server: its engine carries changes out by itself.
    Server,
}

/// The text of each pending plan file a terminal can show, by instance
/// and the file's position in its plan.
pub type PlanTexts = BTreeMap<(InstanceKey, usize), String>;

/// A config to store, or only to check.
pub struct ConfigPush {
    pub bundle: ConfigBundle,
    /// Only this application's part; every other part stays.
    pub application: Option<ApplicationName>,
    pub validate_only: bool,
    /// The bundle as the command already compiled it (`up` checks a config
    /// before it opens anything), so the local state does not compile it
    /// twice; an API compiles what it receives.
    pub compiled: Option<Arc<dyn CompiledConfig>>,
}

/// What a push did.
pub enum Pushed {
    Validated(ValidationReport),
    Applied(ApplyReport),
}

/// How `up` follows a rollout after pushing it.
pub struct Converge<'a> {
    /// Keep following until Ctrl-C or SIGTERM.
    pub watch: bool,
    /// How this machine runs jobs (the local state only).
    pub runners: &'a RunnerArgs,
    /// Give up waiting after this long (an API only: locally the jobs run
    /// here and `up` ends when nothing can move).
    pub timeout: Option<Duration>,
    /// The hash of the config pushed.
    pub hash: String,
    /// The application followed; `None` follows every one.
    pub application: Option<ApplicationName>,
    /// The newest event before the push: the rollout's events come after.
    pub after_event: Option<String>,
    pub progress: Arc<LiveProgress>,
}

/// How following a rollout ended, when not by itself.
#[derive(Default)]
pub struct Converged {
    /// Stopped by a signal, with what became of the jobs.
    pub stopped: Option<(Stop, String)>,
    /// Gave up waiting, saying on what.
    pub timed_out: Option<String>,
}

/// A config the state (or the API) refused, with its errors: every one, or
/// the first ones an API listed and how many `more` it did not.
#[derive(Debug)]
pub struct InvalidConfig {
    pub errors: Vec<ConfigError>,
    pub more: usize,
}

impl std::fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} error(s); nothing was stored",
            self.errors.len() + self.more
        )
    }
}

impl std::error::Error for InvalidConfig {}

/// No state file where a command needs one.
#[derive(Debug)]
pub struct NoState {
    pub path: PathBuf,
}

impl std::fmt::Display for NoState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no Vergence state at {}; run `vergence up` in the config directory first (or pass --state)",
            self.path.display()
        )
    }
}

impl std::error::Error for NoState {}

/// Whether `error` says that what was asked for does not exist, wherever
/// it was asked.
pub fn is_not_found(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<api::ApiFailure>()
        .is_some_and(|f| f.status == reqwest::StatusCode::NOT_FOUND)
        || matches!(
            error.downcast_ref::<vergence_model::Error>(),
            Some(vergence_model::Error::NotFound { .. })
        )
}

/// Everything the commands read and change, wherever the state is.
#[async_trait]
pub trait Backend: Send + Sync {
    fn place(&self) -> Place;

    /// The instance of `service` in `channel`; the application may be left
    /// out when it is clear (locally: only one application has the
    /// service; over an API: the token's).
    async fn instance_key(
        &self,
        application: Option<ApplicationName>,
        service: ServiceName,
        channel: ReleaseChannelName,
    ) -> Result<InstanceKey>;

    async fn status(&self, filter: &InstanceFilter) -> Result<StatusResponse>;
    /// The text of the pending plans' files, where it can be read.
    async fn plan_texts(&self, views: &[InstanceView]) -> Result<PlanTexts>;
    async fn events(&self, filter: &EventFilter) -> Result<Vec<Event>>;
    /// The delivery metrics of `application` (or, where it can be left
    /// out: locally every application, over an API the token's).
    async fn metrics(
        &self,
        application: Option<&ApplicationName>,
        lookback: Lookback,
    ) -> Result<DeliveryMetrics>;
    async fn explain(&self, key: &InstanceKey) -> Result<Vec<String>>;
    /// Where every instance (of `application`, or all) stands for `up`.
    async fn rollout(&self, application: Option<&ApplicationName>) -> Result<RolloutResponse>;
    /// What storing `bundle` would change; stores nothing.
    async fn plan(&self, bundle: ConfigBundle) -> Result<PlanResponse>;

    async fn release(
        &self,
        application: Option<ApplicationName>,
        service: &ServiceName,
        version: &Version,
        params: &BTreeMap<String, String>,
    ) -> Result<Release>;
    async fn approve(&self, key: &InstanceKey, version: Option<&Version>) -> Result<Approval>;
    async fn pause(&self, filter: &InstanceFilter, action: PauseAction)
    -> Result<Vec<InstanceKey>>;
    async fn pin(&self, key: &InstanceKey, version: &Version) -> Result<()>;
    async fn unpin(&self, key: &InstanceKey) -> Result<()>;
    async fn rollback(&self, key: &InstanceKey, version: Option<&Version>) -> Result<()>;
    /// Break-glass through the instance's freezes and closed windows for
    /// one version; what was granted.
    async fn override_windows(
        &self,
        key: &InstanceKey,
        version: Option<&Version>,
        reason: &str,
        lasting: jiff::SignedDuration,
    ) -> Result<vergence_model::WindowOverride>;
    /// Asks the matching instances to be looked at again: fetch afresh,
    /// retry what failed (what rerunning `up` means).
    async fn request_checks(&self, filter: &InstanceFilter) -> Result<Vec<InstanceKey>>;
    async fn alerts(&self) -> Result<Vec<AlertView>>;
    /// Sets an alert; the instances (that the caller may see) it guards.
    async fn set_alert(
        &self,
        name: &str,
        firing: bool,
        summary: Option<String>,
    ) -> Result<Vec<InstanceKey>>;

    async fn push_config(&self, push: ConfigPush) -> Result<Pushed>;
    async fn config_versions(
        &self,
        application: &ApplicationName,
        limit: usize,
    ) -> Result<Vec<PartVersion>>;
    async fn rollback_config(
        &self,
        application: &ApplicationName,
        to: Option<&str>,
    ) -> Result<ApplyReport>;

    /// A new token and its full string, which exists nowhere else.
    async fn create_token(
        &self,
        subject: &TokenSubject,
        scopes: &[Scope],
        description: Option<String>,
    ) -> Result<(TokenView, String)>;
    async fn list_tokens(&self, subject: &TokenSubject) -> Result<Vec<TokenView>>;
    async fn revoke_token(&self, id: &str) -> Result<()>;

    /// The application `up` follows after pushing `model`: `None` (every
    /// one) locally; over an API, the token's, which must be in the config.
    async fn up_scope(&self, model: &dyn CompiledConfig) -> Result<Option<ApplicationName>>;
    /// Follows the rollout of a pushed config until nothing can move
    /// without outside help (or, with `watch`, until stopped): locally by
    /// running the engine here, over an API by watching the server's.
    async fn converge(&self, how: Converge<'_>) -> Result<Converged>;
}
