//! The Google clients the runner drives: Cloud Run Admin API v2 (jobs,
//! executions, tasks) and Cloud Logging, built once per process and shared.
//!
//! In production they authenticate with application-default credentials.
//! On AWS that is workload identity federation: `GOOGLE_APPLICATION_CREDENTIALS`
//! names an external-account credential file, and the client exchanges the
//! worker role's AWS credentials (from the Lambda environment) for a Google
//! token, so the deployment stores no Google key (docs/runners/cloud-run.md).
//! Credentials whose token exchange fails for good are made again on a later
//! use, after a backoff (`credentials.rs`), not kept failed for the life of
//! the process.

use google_cloud_auth::credentials::{self, Credentials};
use google_cloud_logging_v2::client::LoggingServiceV2;
use google_cloud_run_v2::client::{Executions, Jobs, Services, Tasks};

use crate::credentials::{Make, RenewBackoff, Renewing};
use crate::error::CloudRunError;

/// The clients of one runner.
#[derive(Clone, Debug)]
pub struct CloudRunClients {
    pub(crate) jobs: Jobs,
    pub(crate) executions: Executions,
    pub(crate) tasks: Tasks,
    pub(crate) logging: LoggingServiceV2,
    /// For the first-class Cloud Run runtime's services.
    pub(crate) services: Services,
}

impl CloudRunClients {
    /// Clients built elsewhere (other endpoints, retry policies, tracing).
    pub fn new(
        jobs: Jobs,
        executions: Executions,
        tasks: Tasks,
        logging: LoggingServiceV2,
        services: Services,
    ) -> Self {
        Self {
            jobs,
            executions,
            tasks,
            logging,
            services,
        }
    }

    /// Clients for the public Google endpoints with application-default
    /// credentials: the service account of the environment, a key file, or
    /// an external-account (workload identity federation) configuration
    /// named by `GOOGLE_APPLICATION_CREDENTIALS`. Credentials are loaded
    /// here, so a missing or malformed configuration fails at startup.
    pub async fn from_application_default_credentials() -> Result<Self, CloudRunError> {
        // Made again after a failure, the file (or the metadata server)
        // is read again.
        let build = || credentials::Builder::default().build();
        let first = build().map_err(CloudRunError::Credentials)?;
        let make: Make = Box::new(move || build().map_err(|e| e.to_string()));
        let credentials = Renewing::new(first, make, RenewBackoff::default());
        Self::build(None, Credentials::from(credentials)).await
    }

    /// Clients for the public Google endpoints with the credentials of a
    /// credential configuration given as JSON text (the serverless
    /// deployment's `GoogleCredentialConfig` parameter): an external
    /// account, typically workload identity federation from the worker's
    /// AWS role. `source_name` says where the text came from, for errors.
    pub async fn from_credential_config(
        source_name: &str,
        json: &str,
    ) -> Result<Self, CloudRunError> {
        let invalid = |reason: String| CloudRunError::CredentialConfig {
            source_name: source_name.to_owned(),
            reason,
        };
        let config: serde_json::Value =
            serde_json::from_str(json).map_err(|e| invalid(format!("not JSON: {e}")))?;
        // Only a configuration without secrets belongs in a stack
        // parameter; a service account key would be readable by anyone
        // who can describe the stack.
        match config.get("type").and_then(|t| t.as_str()) {
            Some("external_account") => {}
            Some(other) => {
                return Err(invalid(format!(
                    "its type is {other:?}; only an \"external_account\" (workload identity federation) configuration, which holds no key, is accepted here"
                )));
            }
            None => return Err(invalid("it has no \"type\"".into())),
        }
        let build = move || credentials::external_account::Builder::new(config.clone()).build();
        let first = build().map_err(|e| invalid(e.to_string()))?;
        let make: Make = Box::new(move || build().map_err(|e| e.to_string()));
        let credentials = Renewing::new(first, make, RenewBackoff::default());
        Self::build(None, Credentials::from(credentials)).await
    }

    /// Clients that send both APIs to `endpoint` (an emulator or a test
    /// fake), with `credentials` (anonymous ones for a fake).
    pub async fn at_endpoint(
        endpoint: impl Into<String>,
        credentials: Credentials,
    ) -> Result<Self, CloudRunError> {
        Self::build(Some(endpoint.into()), credentials).await
    }

    async fn build(
        endpoint: Option<String>,
        credentials: Credentials,
    ) -> Result<Self, CloudRunError> {
        let client = |client: &'static str| move |source| CloudRunError::Client { client, source };
        let mut jobs = Jobs::builder().with_credentials(credentials.clone());
        let mut executions = Executions::builder().with_credentials(credentials.clone());
        let mut tasks = Tasks::builder().with_credentials(credentials.clone());
        let mut services = Services::builder().with_credentials(credentials.clone());
        let mut logging = LoggingServiceV2::builder().with_credentials(credentials);
        if let Some(endpoint) = endpoint {
            services = services.with_endpoint(endpoint.clone());
            jobs = jobs.with_endpoint(endpoint.clone());
            executions = executions.with_endpoint(endpoint.clone());
            tasks = tasks.with_endpoint(endpoint.clone());
            logging = logging.with_endpoint(endpoint);
        }
        Ok(Self {
            jobs: jobs.build().await.map_err(client("Cloud Run jobs"))?,
            executions: executions
                .build()
                .await
                .map_err(client("Cloud Run executions"))?,
            tasks: tasks.build().await.map_err(client("Cloud Run tasks"))?,
            logging: logging.build().await.map_err(client("Cloud Logging"))?,
            services: services
                .build()
                .await
                .map_err(client("Cloud Run services"))?,
        })
    }
}
