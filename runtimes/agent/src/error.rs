//! The agent's one error type, named after what failed.

/// What went wrong talking to the Vergence API or to the cluster.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A setting is missing or invalid.
    #[error("{setting}: {message}")]
    Setting {
        setting: &'static str,
        message: String,
    },

    /// No Kubernetes client could be built (no in-cluster service account,
    /// no kubeconfig).
    #[error(
        "cannot configure the Kubernetes client (in-cluster service account or KUBECONFIG): {0}"
    )]
    KubeConfig(#[source] kube::Error),

    /// The HTTP client for the Vergence API could not be built.
    #[error("cannot build the HTTP client for the Vergence API: {0}")]
    HttpClient(#[source] reqwest::Error),

    /// A call to the Vergence API failed before an answer came.
    #[error("{operation} {url}: {source}")]
    Api {
        operation: &'static str,
        url: String,
        #[source]
        source: reqwest::Error,
    },

    /// The Vergence API refused a call.
    #[error("{operation}: the Vergence API answered {status}: {body}")]
    Refused {
        operation: &'static str,
        status: u16,
        body: String,
    },

    /// A call to the Kubernetes API failed.
    #[error("{operation} {object}: {source}")]
    Kube {
        operation: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },

    /// Waiting on a Job's watch failed.
    #[error("watching Job {job}: {source}")]
    Watch {
        job: String,
        #[source]
        source: kube::runtime::wait::Error,
    },

    /// A Job by the name of a task exists but is not that task's.
    #[error(
        "Job {namespace}/{name} exists but belongs to job {found:?}, not {expected}; delete it or rename it"
    )]
    NameTaken {
        namespace: String,
        name: String,
        expected: String,
        found: Option<String>,
    },

    /// A manifest cannot be applied as written (no such kind in the
    /// cluster, a malformed object).
    #[error("{0}")]
    Manifest(String),

    /// The live objects of a kind could not be read (the watch's list
    /// failed: RBAC, an unreachable API server).
    #[error("cannot read {kind} in {scope}: {message}")]
    Cache {
        kind: String,
        scope: String,
        message: String,
    },

    /// The Job object could not be built from the task.
    #[error("building the Job of {job}: {source}")]
    BuildJob {
        job: String,
        #[source]
        source: serde_json::Error,
    },
}

impl AgentError {
    pub(crate) fn kube(
        operation: &'static str,
        object: impl Into<String>,
    ) -> impl FnOnce(kube::Error) -> Self {
        let object = object.into();
        move |source| AgentError::Kube {
            operation,
            object,
            source,
        }
    }

    /// Whether the API server answered with this status code.
    pub(crate) fn is_status(&self, code: u16) -> bool {
        matches!(self, AgentError::Kube { source: kube::Error::Api(status), .. } if status.code == code)
    }
}
