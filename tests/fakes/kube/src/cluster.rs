//! The test's handle on one fake cluster: starting it (server and
//! controllers on 127.0.0.1:0), a `kube::Client` for it, and the controls
//! tests need — request accounting, history compaction, rollout outcomes,
//! container logs, and out-of-band reads and edits.

use std::sync::Arc;
use std::time::Duration;

use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderValue, Uri};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::controllers::{self, rollout::Rollout};
use crate::executor::{Executor, ProcessExecutor};
use crate::logs::PodLogs;
use crate::objects;
use crate::patch::fieldset::Scope;
use crate::patch::managed::{Actor, record_update};
use crate::requests::RecordedRequest;
use crate::resources::{ResourceType, by_kind};
use crate::server;
use crate::shared::{Settings, Shared};
use crate::status::ApiError;

/// Why a fake cluster could not start or a control call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding 127.0.0.1:0 failed.
    #[error("binding the fake API server: {0}")]
    Bind(#[source] std::io::Error),
    /// Building the `kube::Client` failed.
    #[error("building a kube client for the fake: {0}")]
    Client(#[source] kube::Error),
    /// The URL or token could not be used in a request.
    #[error("invalid client setting: {0}")]
    ClientSetting(String),
    /// The kind is not one the fake serves.
    #[error("the fake does not serve kind {0}")]
    UnknownKind(String),
    /// The API refused the call, as it would over HTTP.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Namespaces every cluster starts with.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Configures a fake cluster before it starts.
#[derive(Debug, Clone)]
pub struct FakeClusterBuilder {
    settings: Settings,
    executor: Arc<dyn Executor>,
    history_limit: usize,
}

impl Default for FakeClusterBuilder {
    fn default() -> Self {
        Self {
            settings: Settings {
                bookmark_interval: Duration::from_secs(1),
                rollout_delay: Duration::from_millis(50),
                required_token: None,
                image_pull_failure_prefix: None,
                job_retry_delay: Duration::from_millis(100),
            },
            executor: Arc::new(ProcessExecutor),
            history_limit: 10_000,
        }
    }
}

impl FakeClusterBuilder {
    /// How often watches that allow bookmarks get one (default 1 s).
    #[must_use]
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.settings.bookmark_interval = interval;
        self
    }

    /// How long a workload rollout takes to reach its outcome (default 50 ms).
    #[must_use]
    pub fn rollout_delay(mut self, delay: Duration) -> Self {
        self.settings.rollout_delay = delay;
        self
    }

    /// Requires `Authorization: Bearer <token>` (401 otherwise).
    #[must_use]
    pub fn require_token(mut self, token: &str) -> Self {
        self.settings.required_token = Some(token.to_owned());
        self
    }

    /// Images starting with `prefix` never pull (`ImagePullBackOff`).
    #[must_use]
    pub fn failing_image_prefix(mut self, prefix: &str) -> Self {
        self.settings.image_pull_failure_prefix = Some(prefix.to_owned());
        self
    }

    /// Runs containers with `executor` (default: [`ProcessExecutor`]).
    #[must_use]
    pub fn executor(mut self, executor: impl Executor + 'static) -> Self {
        self.executor = Arc::new(executor);
        self
    }

    /// Delay between a failed Job pod and its replacement (default 100 ms;
    /// the real controller backs off from 10 s).
    #[must_use]
    pub fn job_retry_delay(mut self, delay: Duration) -> Self {
        self.settings.job_retry_delay = delay;
        self
    }

    /// Change events kept for watches and exact reads (default 10 000).
    #[must_use]
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = events;
        self
    }

    /// Starts the server and controllers.
    pub async fn start(self) -> Result<FakeCluster, Error> {
        let shared = Arc::new(Shared::new(
            self.settings,
            self.executor,
            self.history_limit,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(Error::Bind)?;
        let address = listener.local_addr().map_err(Error::Bind)?;
        let url = format!("http://{address}");
        for namespace in INITIAL_NAMESPACES {
            let ns =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
            objects::create_as(&shared.store, "Namespace", "", "kube-apiserver", ns)?;
        }
        let mut tasks = controllers::spawn_all(&shared);
        let router = server::router(shared.clone());
        tasks.push(tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, router).await {
                tracing::error!(%err, "fake API server stopped");
            }
        }));
        let client = build_client(&url, shared.settings.required_token.as_deref())?;
        Ok(FakeCluster {
            shared,
            url,
            client,
            tasks,
        })
    }
}

fn build_client(url: &str, token: Option<&str>) -> Result<kube::Client, Error> {
    let uri: Uri = url
        .parse()
        .map_err(|e| Error::ClientSetting(format!("{url}: {e}")))?;
    let mut config = kube::Config::new(uri);
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| Error::ClientSetting(e.to_string()))?;
        config.headers.push((AUTHORIZATION, value));
    }
    kube::Client::try_from(config).map_err(Error::Client)
}

/// A running fake cluster; stops when dropped.
pub struct FakeCluster {
    shared: Arc<Shared>,
    url: String,
    client: kube::Client,
    tasks: Vec<JoinHandle<()>>,
}

impl FakeCluster {
    /// Starts a fake cluster with default settings.
    pub async fn start() -> Result<Self, Error> {
        FakeClusterBuilder::default().start().await
    }

    /// Configures a fake cluster.
    pub fn builder() -> FakeClusterBuilder {
        FakeClusterBuilder::default()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client for this cluster (with the required token, if any).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A client presenting `token`.
    pub fn client_with_token(&self, token: &str) -> Result<kube::Client, Error> {
        build_client(&self.url, Some(token))
    }

    /// Every request served since the start or the last reset.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.all()
    }

    /// How many requests served so far match `predicate`.
    pub fn count(&self, predicate: impl Fn(&RecordedRequest) -> bool) -> usize {
        self.shared
            .requests
            .all()
            .iter()
            .filter(|r| predicate(r))
            .count()
    }

    /// Forgets the requests served so far.
    pub fn reset_requests(&self) {
        self.shared.requests.reset();
    }

    /// Drops all change history, as an etcd compaction does: watches and
    /// exact lists from an earlier resourceVersion get 410 Expired.
    pub fn compact(&self) {
        self.shared.store.compact();
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// How rollouts of one Deployment, StatefulSet or DaemonSet end; takes
    /// effect on its current generation too.
    pub fn set_rollout(&self, namespace: &str, kind: &str, name: &str, rollout: Rollout) {
        self.shared.set_rollout(kind, namespace, name, rollout);
    }

    /// What a pod's (first) container printed.
    pub fn pod_logs(&self, namespace: &str, pod: &str) -> Option<PodLogs> {
        let pods = by_kind("Pod")?;
        let spec = self.shared.store.get(pods, namespace, pod)?;
        let container = spec["spec"]["containers"][0]["name"].as_str()?.to_owned();
        self.container_logs(namespace, pod, &container)
    }

    /// What one container printed (also after its pod is gone).
    pub fn container_logs(&self, namespace: &str, pod: &str, container: &str) -> Option<PodLogs> {
        self.shared.logs.pod_logs(namespace, pod, container)
    }

    /// One stored object, as the server holds it.
    pub fn object(&self, kind: &str, namespace: &str, name: &str) -> Result<Option<Value>, Error> {
        Ok(self.shared.store.get(resource(kind)?, namespace, name))
    }

    /// The stored objects of a kind (in one namespace, or all).
    pub fn objects(&self, kind: &str, namespace: Option<&str>) -> Result<Vec<Value>, Error> {
        Ok(self.shared.store.list(resource(kind)?, namespace).0)
    }

    /// Creates an object directly (as a POST would, without a request).
    pub fn create(&self, kind: &str, namespace: &str, obj: Value) -> Result<Value, Error> {
        Ok(objects::create_as(
            &self.shared.store,
            resource(kind)?.kind,
            namespace,
            "fake-cluster",
            obj,
        )?)
    }

    /// Changes an object out of band, as `kubectl edit` would (manager
    /// `kubectl-edit`, an Update): a MODIFIED event, a new
    /// resourceVersion, and a new generation when the spec changed.
    pub fn edit(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Result<Value, Error> {
        let rt = resource(kind)?;
        let api_version = rt.api_version();
        let actor = Actor {
            manager: "kubectl-edit",
            scope: Scope::Main,
            api_version: &api_version,
        };
        let written = self.shared.store.write(
            rt,
            namespace,
            name,
            false,
            Box::new(|current| {
                let current = current.ok_or_else(|| ApiError::not_found(rt, name))?;
                let mut next = current.clone();
                change(&mut next);
                record_update(Some(current), &mut next, &actor);
                Ok(next)
            }),
        )?;
        Ok(written)
    }

    /// Deletes an object directly (background propagation).
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> Result<(), Error> {
        let options = crate::gc::DeleteOptions {
            propagation: Some(crate::gc::Propagation::Background),
            ..Default::default()
        };
        crate::gc::delete(
            &self.shared.store,
            resource(kind)?,
            namespace,
            name,
            &options,
        )?;
        Ok(())
    }
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn resource(kind: &str) -> Result<&'static ResourceType, Error> {
    by_kind(kind).ok_or_else(|| Error::UnknownKind(kind.to_owned()))
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}
