//! The in-process controllers that make the fake behave like a cluster:
//! a Job controller, a kubelet stand-in that runs pods through the
//! executor, and workload rollout simulation. Each follows the store's
//! change feed, as real controllers follow watches.

mod env;
pub(crate) mod job;
mod job_status;
mod kubelet;
mod pod_status;
pub(crate) mod rollout;

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::shared::Shared;

/// Starts every controller; they stop when their tasks are aborted.
pub(crate) fn spawn_all(shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(kubelet::run(shared.clone(), shared.store.subscribe())),
        tokio::spawn(job::run(shared.clone(), shared.store.subscribe())),
        tokio::spawn(rollout::run(shared.clone(), shared.store.subscribe())),
    ]
}
