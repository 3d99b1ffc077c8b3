//! The state one fake cluster shares between its HTTP handlers, its
//! controllers and the test's handle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::controllers::rollout::Rollout;
use crate::executor::{Cancellation, Executor, KillReason};
use crate::logs::LogStore;
use crate::requests::RequestLog;
use crate::store::Store;

/// Tunables of a fake cluster (see `FakeClusterBuilder`).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub bookmark_interval: Duration,
    pub rollout_delay: Duration,
    pub required_token: Option<String>,
    pub image_pull_failure_prefix: Option<String>,
    pub job_retry_delay: Duration,
}

type PodKey = (String, String);
type WorkloadKey = (String, String, String);

/// Everything one fake cluster holds.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Store,
    pub logs: LogStore,
    pub requests: RequestLog,
    pub settings: Settings,
    pub executor: Arc<dyn Executor>,
    rollouts: Mutex<HashMap<WorkloadKey, Rollout>>,
    /// Re-evaluates one workload's status after `set_rollout`.
    pub rollout_pokes: watch::Sender<Option<WorkloadKey>>,
    running: Mutex<HashMap<PodKey, watch::Sender<Option<KillReason>>>>,
    /// Flips to true when the cluster handle is dropped: watches end.
    pub shutdown: watch::Sender<bool>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn new(
        settings: Settings,
        executor: Arc<dyn Executor>,
        history_limit: usize,
    ) -> Self {
        Self {
            store: Store::new(history_limit),
            logs: LogStore::default(),
            requests: RequestLog::default(),
            settings,
            executor,
            rollouts: Mutex::new(HashMap::new()),
            rollout_pokes: watch::Sender::new(None),
            running: Mutex::new(HashMap::new()),
            shutdown: watch::Sender::new(false),
        }
    }

    /// The rollout behaviour chosen for one workload (healthy by default).
    pub(crate) fn rollout(&self, kind: &str, namespace: &str, name: &str) -> Rollout {
        let key = (kind.to_owned(), namespace.to_owned(), name.to_owned());
        lock(&self.rollouts).get(&key).copied().unwrap_or_default()
    }

    pub(crate) fn set_rollout(&self, kind: &str, namespace: &str, name: &str, rollout: Rollout) {
        let key = (kind.to_owned(), namespace.to_owned(), name.to_owned());
        lock(&self.rollouts).insert(key.clone(), rollout);
        self.rollout_pokes.send_replace(Some(key));
    }

    /// Registers a pod whose container is about to run; its cancellation
    /// fires when [`Shared::kill`] is called for it.
    pub(crate) fn register_pod(&self, namespace: &str, pod: &str) -> Cancellation {
        let (tx, rx) = watch::channel(None);
        lock(&self.running).insert((namespace.to_owned(), pod.to_owned()), tx);
        Cancellation(rx)
    }

    /// Stops a pod's container (no-op when it is not running).
    pub(crate) fn kill(&self, namespace: &str, pod: &str, reason: KillReason) {
        if let Some(tx) = lock(&self.running).get(&(namespace.to_owned(), pod.to_owned())) {
            tx.send_if_modified(|current| {
                let first = current.is_none();
                if first {
                    *current = Some(reason);
                }
                first
            });
        }
    }

    /// Why a pod's container was stopped, if it was.
    pub(crate) fn kill_reason(&self, namespace: &str, pod: &str) -> Option<KillReason> {
        lock(&self.running)
            .get(&(namespace.to_owned(), pod.to_owned()))
            .and_then(|tx| *tx.borrow())
    }
}
