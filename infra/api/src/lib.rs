//! Vergence's HTTP API: one axum [`router`] over the control operations —
//! upload and plan configs, push releases (the CI webhook), record
//! approvals, pause, pin, roll back and re-check instances, set alert
//! states (also from Alertmanager), read status, events and where a
//! rollout stands, manage an application's tokens. Every command of the
//! CLI that reads or changes state has its route here.
//!
//! The same router is served by `vergence serve` over the embedded store and
//! by the `api` Lambda function over DynamoDB. It is a plain tower service
//! and knows nothing about Lambda or AWS. Routes live under `/v1`, speak
//! JSON in camelCase, and are described in `docs/openapi.json`; a test keeps
//! the document and the router in step.
//!
//! Callers authenticate with per-application tokens (`vgt_<id>_<secret>`,
//! stored only as a SHA-256 of the secret) whose scopes say what they may
//! do, or with a CI job's own OIDC token that a `trust:` entry of the
//! config in force accepts; webhook routes can additionally require an
//! HMAC-SHA256 signature.
//! `vergence-agent` calls the agent routes with its agent's own token.

mod alertmanager;
mod auth;
mod error;
mod explain;
mod oidc;
mod routes;
mod tokens;
pub mod wire;

use std::sync::Arc;

use vergence_engine::control::Control;
use vergence_model::DeploymentTarget;
use vergence_model::ports::{AgentDesk, Clock, StateStore};

pub use alertmanager::vergence_alert_name;
pub use auth::{MAX_WEBHOOK_SKEW_SECONDS, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_webhook};
/// The router type, so wiring crates need no direct axum dependency.
pub use axum::Router;
pub use error::ApiError;
pub use explain::explain_instance;
pub use routes::{CONTENT_SECURITY_POLICY, UI_PATH, endpoints, router};
pub use tokens::{create_token, secret_sha256};

/// Default limit on request bodies: generous for a config bundle, small
/// enough that a stray upload cannot exhaust a Lambda's memory.
pub const DEFAULT_MAX_BODY_BYTES: usize = 5 * 1024 * 1024;

/// How the API behaves, beyond the state it works on.
#[derive(Clone)]
pub struct ApiConfig {
    /// Larger request bodies are refused with 413.
    pub max_body_bytes: usize,
    /// When set, webhook routes (releases, Alertmanager) also require an
    /// `X-Vergence-Signature` HMAC of the body with this secret.
    pub webhook_secret: Option<String>,
    /// The deployment this API serves: its config pushes are refused when
    /// it could not start their jobs (for a serverless one, local jobs
    /// with an image or a file of the config directory). Set by whatever
    /// wires the API, which knows where its jobs run.
    pub target: DeploymentTarget,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            webhook_secret: None,
            target: DeploymentTarget::Local,
        }
    }
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret never reaches logs.
        f.debug_struct("ApiConfig")
            .field("max_body_bytes", &self.max_body_bytes)
            .field(
                "webhook_secret",
                &self.webhook_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("target", &self.target)
            .finish()
    }
}

/// What every handler works with; cheap to clone (all shared).
#[derive(Clone)]
pub struct ApiState {
    control: Arc<Control>,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    config: Arc<ApiConfig>,
    /// Where agents' polls and reports go; `None` where no agent may call.
    agents: Option<Arc<dyn AgentDesk>>,
    /// The keys of the OIDC issuers `trust:` entries name, cached.
    oidc_keys: Arc<oidc::KeyCache>,
}

impl ApiState {
    /// `control` must work on `store`: tokens are read from the store, every
    /// change goes through the control operations.
    pub fn new(
        control: Arc<Control>,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        config: ApiConfig,
    ) -> Self {
        Self {
            control,
            store,
            clock,
            config: Arc::new(config),
            agents: None,
            oidc_keys: Arc::new(oidc::KeyCache::default()),
        }
    }

    /// Serves the agent routes with `desk` (the kubernetes runner's).
    #[must_use]
    pub fn with_agents(mut self, desk: Arc<dyn AgentDesk>) -> Self {
        self.agents = Some(desk);
        self
    }
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
