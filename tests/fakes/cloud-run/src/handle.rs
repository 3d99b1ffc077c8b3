//! The test's handle on a running fake: where it listens, real clients
//! pointed at it, the knobs that inject faults, and what it has seen.

use std::sync::Arc;
use std::time::Duration;

use google_cloud_auth::credentials::{Credentials, anonymous};
use google_cloud_gax::client_builder::{ClientBuilder, Result as ClientResult};
use google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder;
use google_cloud_logging_v2::client::LoggingServiceV2;
use google_cloud_run_v2::client::{Executions, Jobs, Revisions, Services, Tasks};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::ApiError;
use crate::executor::{TaskExecutor, TaskRun};
use crate::process::ProcessExecutor;
use crate::requests::RecordedRequest;
use crate::state::{Config, RevisionFault, Shared};
use crate::{server, services};

/// How the fake behaves; [`FakeCloudRun::builder`] starts from the defaults.
#[derive(Clone)]
pub struct FakeCloudRunBuilder {
    config: Config,
    executor: Arc<dyn TaskExecutor>,
}

impl std::fmt::Debug for FakeCloudRunBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCloudRunBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for FakeCloudRunBuilder {
    fn default() -> Self {
        Self {
            config: Config {
                polls_to_settle: 2,
                log_delay: Duration::ZERO,
                missing_image_prefix: "missing/".to_owned(),
                project_number: 123_456_789_012,
            },
            executor: Arc::new(ProcessExecutor),
        }
    }
}

impl FakeCloudRunBuilder {
    /// Reads (operation polls or resource gets) after which a service or
    /// job change settles; default 2, so the first poll says "not done" and
    /// the second "done". 0 settles at once.
    pub fn polls_to_settle(mut self, polls: u32) -> Self {
        self.config.polls_to_settle = polls;
        self
    }

    /// How long after a task writes a line it can be listed from Cloud
    /// Logging, as ingestion lags on the platform (default: at once). The
    /// entry's `receiveTimestamp` says when it arrives;
    /// [`FakeCloudRun::log_entries`] shows it before that.
    pub fn log_delay(mut self, delay: Duration) -> Self {
        self.config.log_delay = delay;
        self
    }

    /// Images starting with this prefix do not exist (default `missing/`).
    pub fn missing_image_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.missing_image_prefix = prefix.into();
        self
    }

    /// What runs job tasks (default: [`ProcessExecutor`]).
    pub fn executor(mut self, executor: impl TaskExecutor) -> Self {
        self.executor = Arc::new(executor);
        self
    }

    /// Binds 127.0.0.1 on a free port and serves.
    pub async fn start(self) -> std::io::Result<FakeCloudRun> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared::new(self.config, self.executor));
        let router = server::router(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "the fake Cloud Run server stopped");
            }
        });
        Ok(FakeCloudRun {
            shared,
            url,
            server,
        })
    }
}

/// A running fake Cloud Run Admin API v2 (and Cloud Logging) server. It
/// stops serving when dropped.
#[derive(Debug)]
pub struct FakeCloudRun {
    shared: Arc<Shared>,
    url: String,
    server: JoinHandle<()>,
}

impl Drop for FakeCloudRun {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeCloudRun {
    /// A fake with the defaults (see [`FakeCloudRunBuilder`]).
    pub async fn start() -> std::io::Result<Self> {
        Self::builder().start().await
    }

    pub fn builder() -> FakeCloudRunBuilder {
        FakeCloudRunBuilder::default()
    }

    /// `http://127.0.0.1:{port}`: the endpoint for every client.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn services_client(&self) -> ClientResult<Services> {
        self.configure(Services::builder()).build().await
    }

    pub async fn revisions_client(&self) -> ClientResult<Revisions> {
        self.configure(Revisions::builder()).build().await
    }

    pub async fn jobs_client(&self) -> ClientResult<Jobs> {
        self.configure(Jobs::builder()).build().await
    }

    pub async fn executions_client(&self) -> ClientResult<Executions> {
        self.configure(Executions::builder()).build().await
    }

    pub async fn tasks_client(&self) -> ClientResult<Tasks> {
        self.configure(Tasks::builder()).build().await
    }

    /// A Cloud Logging client whose `list_log_entries` reaches the fake's
    /// `POST /v2/entries:list`.
    pub async fn logging_client(&self) -> ClientResult<LoggingServiceV2> {
        self.configure(LoggingServiceV2::builder()).build().await
    }

    /// Points a client at the fake with anonymous credentials, and polls
    /// long-running operations every 10–100 ms instead of 1–60 s.
    fn configure<F>(
        &self,
        builder: ClientBuilder<F, Credentials>,
    ) -> ClientBuilder<F, Credentials> {
        let polling = ExponentialBackoffBuilder::new()
            .with_initial_delay(Duration::from_millis(10))
            .with_maximum_delay(Duration::from_millis(100))
            .clamp();
        builder
            .with_endpoint(self.url.clone())
            .with_credentials(anonymous::Builder::new().build())
            .with_polling_backoff_policy(polling)
    }

    /// The service's next revision (or the one rolling out now) fails with
    /// `message`. `service` is the full name or the bare id.
    pub fn fail_next_revision(&self, service: &str, message: &str) {
        let fault = RevisionFault::Fail(message.to_owned());
        services::inject_fault(&mut self.shared.lock(), service, fault);
    }

    /// The service's next revision (or the one rolling out now) never
    /// becomes ready: the service keeps reconciling and the operation never
    /// finishes.
    pub fn never_ready(&self, service: &str) {
        services::inject_fault(&mut self.shared.lock(), service, RevisionFault::NeverReady);
    }

    /// Changes a service the way someone in the console would: `edit`
    /// changes its spec (labels, `template`, `traffic`, …), a revision is
    /// made if the template changed, and the change is settled at once.
    /// No request is recorded.
    pub fn edit_service_out_of_band(
        &self,
        service: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Result<(), String> {
        let mut state = self.shared.lock();
        services::edit_out_of_band(&mut state, &self.shared.config, service, edit)
            .map_err(|e: ApiError| e.message)
    }

    /// Sets the image of the service's first container out of band (drift).
    pub fn set_service_image_out_of_band(&self, service: &str, image: &str) -> Result<(), String> {
        self.edit_service_out_of_band(service, |spec| {
            spec["template"]["containers"][0]["image"] = Value::from(image);
        })
    }

    /// A service as stored (enums by name), by full name.
    pub fn service(&self, name: &str) -> Option<Value> {
        self.shared
            .lock()
            .services
            .get(name)
            .map(|r| r.resource.clone())
    }

    /// A revision as stored, by full name.
    pub fn revision(&self, name: &str) -> Option<Value> {
        self.shared.lock().revisions.get(name).cloned()
    }

    /// An execution as stored, by full name.
    pub fn execution(&self, name: &str) -> Option<Value> {
        let state = self.shared.lock();
        state.executions.get(name).map(|r| r.resource.clone())
    }

    /// Every log entry written so far, oldest first.
    pub fn log_entries(&self) -> Vec<Value> {
        self.shared.lock().logs.all().to_vec()
    }

    /// Every task attempt handed to the executor so far, in order.
    pub fn task_runs(&self) -> Vec<TaskRun> {
        self.shared.lock().task_runs.clone()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many `method` requests for exactly `path` (no query) came in.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.count_matching(|r| r.is(method, path))
    }

    /// How many requests satisfy `matches`.
    pub fn count_matching(&self, matches: impl Fn(&RecordedRequest) -> bool) -> usize {
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|r| matches(r))
            .count()
    }

    /// Forgets the requests received so far.
    pub fn reset_requests(&self) {
        self.shared.lock().requests.clear();
    }
}
