//! The fake's memory: every resource as the JSON the API returns (enums by
//! name), plus what the JSON cannot say — which change is still rolling
//! out, which faults a test has injected, how to cancel a running
//! execution. One mutex guards it all; nothing awaits while holding it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::watch;

use crate::executor::{TaskExecutor, TaskRun};
use crate::logging::LogStore;
use crate::requests::RecordedRequest;

/// Settings fixed when the fake starts.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// Reads (of a change's operation or of the resource it changes) after
    /// which the change settles.
    pub(crate) polls_to_settle: u32,
    /// How long a task's line takes to reach `entries:list` (Cloud
    /// Logging's ingestion lag).
    pub(crate) log_delay: std::time::Duration,
    /// Images starting with this prefix do not exist: revisions using them
    /// fail, executions using them fail before any task runs.
    pub(crate) missing_image_prefix: String,
    /// The project number in service URLs.
    pub(crate) project_number: u64,
}

/// What an injected fault does to a service's revision.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RevisionFault {
    /// The revision fails with this message.
    Fail(String),
    /// The revision never becomes ready; the service keeps reconciling.
    NeverReady,
}

/// A change to a service or job that has not settled yet.
#[derive(Clone, Debug)]
pub(crate) struct Rollout {
    /// The generation the change produced.
    pub(crate) generation: i64,
    /// Reads counted so far.
    pub(crate) reads: u32,
    /// The revision it created, for services whose template changed.
    pub(crate) revision: Option<String>,
    pub(crate) fault: Option<RevisionFault>,
}

/// A service or job: the resource and its unsettled change, if any.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) resource: Value,
    pub(crate) rollout: Option<Rollout>,
}

/// An execution, its tasks (by index) and the switch that cancels it.
#[derive(Debug)]
pub(crate) struct ExecutionRecord {
    pub(crate) resource: Value,
    pub(crate) tasks: Vec<Value>,
    pub(crate) cancel: watch::Sender<bool>,
}

/// What a long-running operation waits for.
#[derive(Clone, Debug)]
pub(crate) enum OperationTarget {
    /// A service change: done when the service has observed `generation`.
    Service { name: String, generation: i64 },
    /// A job change: done when the job has observed `generation`.
    Job { name: String, generation: i64 },
    /// A job run: done when the execution has finished.
    Run { execution: String },
    /// A cancellation: done when the execution has stopped.
    Cancel { execution: String },
    /// Already applied (deletes, validate-only calls): done after the
    /// configured number of reads, with this resource as the response.
    Applied { type_name: String, resource: Value },
}

/// A long-running operation.
#[derive(Clone, Debug)]
pub(crate) struct OperationRecord {
    pub(crate) target: OperationTarget,
    pub(crate) reads: u32,
    /// The `Operation` JSON once done; frozen from then on.
    pub(crate) finished: Option<Value>,
}

/// Everything the fake holds.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) services: BTreeMap<String, Record>,
    pub(crate) revisions: BTreeMap<String, Value>,
    pub(crate) jobs: BTreeMap<String, Record>,
    pub(crate) executions: BTreeMap<String, ExecutionRecord>,
    pub(crate) operations: BTreeMap<String, OperationRecord>,
    /// Faults waiting for a service's next revision, by service name or id.
    pub(crate) revision_faults: BTreeMap<String, RevisionFault>,
    pub(crate) logs: LogStore,
    /// Every attempt handed to the executor, in order.
    pub(crate) task_runs: Vec<TaskRun>,
    pub(crate) requests: Vec<RecordedRequest>,
}

/// The state, its settings and the executor, shared by the server, the
/// execution runners and the test's handle.
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) config: Config,
    pub(crate) executor: Arc<dyn TaskExecutor>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(config: Config, executor: Arc<dyn TaskExecutor>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            config,
            executor,
        }
    }

    /// The state. A panic while it was held (a failed assertion in a test
    /// helper) leaves it usable: every write is a whole-value replacement.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `projects/{p}/locations/{l}` parts of a resource name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) project: String,
    pub(crate) location: String,
}

impl Location {
    /// The parent a resource name starts with.
    pub(crate) fn of(name: &str) -> Option<Self> {
        let mut parts = name.split('/');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("projects"), Some(project), Some("locations"), Some(location)) => Some(Self {
                project: project.to_owned(),
                location: location.to_owned(),
            }),
            _ => None,
        }
    }

    pub(crate) fn parent(&self) -> String {
        format!("projects/{}/locations/{}", self.project, self.location)
    }
}

/// The last segment of a resource name: its id.
pub(crate) fn id_of(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}
