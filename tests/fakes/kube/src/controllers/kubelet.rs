//! A kubelet stand-in: every new pod is bound to the one fake node and its
//! first container is run through the cluster's executor, with the status
//! going Pending → Running → Succeeded/Failed. A container whose env cannot
//! be resolved waits in `CreateContainerConfigError` (retrying, as the real
//! kubelet does) and an image with the configured failing prefix waits in
//! `ImagePullBackOff`. Deleting a pod stops its container.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::env;
use super::pod_status::{self, ContainerState, NODE_NAME, RunIds};
use crate::executor::{Cancellation, ExecOutcome, KillReason, Output, PodRun};
use crate::meta;
use crate::objects::update_status;
use crate::patch::fieldset::Scope;
use crate::patch::managed::{Actor, record_update};
use crate::resources::{ResourceType, by_kind};
use crate::shared::Shared;
use crate::store::{EventType, Receiver};

const KUBELET: &str = "kubelet";
const CONFIG_RETRY: Duration = Duration::from_millis(200);

/// Runs every pod that is created, until the store closes.
pub(crate) async fn run(shared: Arc<Shared>, mut events: Receiver) {
    let Some(pods) = by_kind("Pod") else { return };
    while let Some(event) = events.recv().await {
        if event.resource != pods {
            continue;
        }
        let (namespace, name) = (
            meta::namespace(&event.object).to_owned(),
            meta::name(&event.object).to_owned(),
        );
        match event.kind {
            EventType::Added => {
                // Registered before the next event is read, so a delete
                // that follows at once still reaches the container.
                let cancellation = shared.register_pod(&namespace, &name);
                let pod = (*event.object).clone();
                tokio::spawn(run_pod(shared.clone(), pods, pod, cancellation));
            }
            EventType::Deleted => shared.kill(&namespace, &name, KillReason::Deleted),
            EventType::Modified => {}
        }
    }
}

/// Why a container cannot start yet.
enum NotReady {
    /// Fixable by creating what is missing: retried.
    Config(String),
    /// The injected image pull failure: never recovers.
    ImagePull(String),
}

async fn run_pod(
    shared: Arc<Shared>,
    pods: &'static ResourceType,
    pod: Value,
    cancellation: Cancellation,
) {
    let Some(container) = pod["spec"]["containers"].get(0).cloned() else {
        return;
    };
    let status = StatusWriter {
        shared: &shared,
        pods,
        namespace: meta::namespace(&pod),
        name: meta::name(&pod),
        container: &container,
        ids: RunIds::new(),
    };
    bind(&shared, pods, &pod);
    let Some(run) = startable(&shared, &pod, &status, &cancellation).await else {
        // Stopped before it started: a Job deadline still fails the pod.
        let killed_for = shared.kill_reason(status.namespace, status.name);
        if killed_for == Some(KillReason::DeadlineExceeded) {
            status.set(terminated(ExecOutcome::Killed, killed_for, meta::now()));
        }
        return;
    };
    let started_at = meta::now();
    if !status.set(ContainerState::Running {
        started_at: started_at.clone(),
    }) {
        return;
    }
    let outcome = shared.executor.run(&run).await;
    run.output.0.finish();
    let killed_for = shared.kill_reason(status.namespace, status.name);
    status.set(terminated(outcome, killed_for, started_at));
}

/// Writes one pod's status as its container moves along.
struct StatusWriter<'a> {
    shared: &'a Shared,
    pods: &'static ResourceType,
    namespace: &'a str,
    name: &'a str,
    container: &'a Value,
    ids: RunIds,
}

impl StatusWriter<'_> {
    /// Answers false when the pod is gone.
    fn set(&self, state: ContainerState) -> bool {
        let store = &self.shared.store;
        update_status(
            store,
            self.pods,
            self.namespace,
            self.name,
            KUBELET,
            |status| {
                pod_status::write(status, self.container, &state, &self.ids);
            },
        )
        .is_ok()
    }
}

/// Waits until the container can start, reporting why it cannot yet;
/// `None` when it is stopped (or its pod deleted) first.
async fn startable(
    shared: &Shared,
    pod: &Value,
    status: &StatusWriter<'_>,
    cancellation: &Cancellation,
) -> Option<PodRun> {
    loop {
        match prepare(shared, pod, status.container, cancellation.clone()) {
            Ok(run) => return Some(run),
            Err(NotReady::Config(message)) => {
                let reason = "CreateContainerConfigError".to_owned();
                if !status.set(ContainerState::Waiting { reason, message }) {
                    return None;
                }
                tokio::select! {
                    () = tokio::time::sleep(CONFIG_RETRY) => {}
                    () = cancellation.cancelled() => return None,
                }
            }
            Err(NotReady::ImagePull(message)) => {
                let reason = "ErrImagePull".to_owned();
                status.set(ContainerState::Waiting {
                    reason,
                    message: message.clone(),
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
                let reason = "ImagePullBackOff".to_owned();
                status.set(ContainerState::Waiting { reason, message });
                cancellation.cancelled().await;
                return None;
            }
        }
    }
}

fn terminated(
    outcome: ExecOutcome,
    killed_for: Option<KillReason>,
    started_at: String,
) -> ContainerState {
    let finished_at = meta::now();
    let (exit_code, reason, message) = match outcome {
        ExecOutcome::Exited(0) => (0, "Completed", None),
        ExecOutcome::Exited(code) => (code, "Error", None),
        ExecOutcome::StartFailed(message) => (128, "StartError", Some(message)),
        ExecOutcome::Killed if killed_for == Some(KillReason::DeadlineExceeded) => {
            (137, "DeadlineExceeded", None)
        }
        ExecOutcome::Killed => (137, "Error", None),
    };
    ContainerState::Terminated {
        exit_code,
        reason: reason.into(),
        message,
        started_at,
        finished_at,
    }
}

/// Binds the pod to the fake node, as the scheduler would.
fn bind(shared: &Shared, pods: &'static ResourceType, pod: &Value) {
    let actor = Actor {
        manager: "kube-scheduler",
        scope: Scope::Main,
        api_version: "v1",
    };
    let bound = shared.store.write(
        pods,
        meta::namespace(pod),
        meta::name(pod),
        false,
        Box::new(|current| {
            let current =
                current.ok_or_else(|| crate::status::ApiError::not_found(pods, meta::name(pod)))?;
            let mut next = current.clone();
            meta::set(&mut next, &["spec"], "nodeName", NODE_NAME.into());
            record_update(Some(current), &mut next, &actor);
            Ok(next)
        }),
    );
    if let Err(err) = bound {
        tracing::debug!(%err, "pod went away before it was bound");
    }
}

/// Resolves the container against the current Secrets and ConfigMaps.
fn prepare(
    shared: &Shared,
    pod: &Value,
    container: &Value,
    cancellation: Cancellation,
) -> Result<PodRun, NotReady> {
    let image = container["image"].as_str().unwrap_or_default().to_owned();
    if let Some(prefix) = &shared.settings.image_pull_failure_prefix
        && image.starts_with(prefix.as_str())
    {
        return Err(NotReady::ImagePull(format!(
            "Back-off pulling image \"{image}\": ErrImagePull: failed to pull and unpack image \"{image}\": not found"
        )));
    }
    let env = env::resolve(&shared.store, pod, container).map_err(NotReady::Config)?;
    let strings = |field: &str| -> Vec<String> {
        container[field]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| env::expand(v.as_str().unwrap_or_default(), &env))
            .collect()
    };
    let (namespace, pod_name) = (meta::namespace(pod).to_owned(), meta::name(pod).to_owned());
    let container_name = container["name"].as_str().unwrap_or_default().to_owned();
    let log = shared.logs.start(&namespace, &pod_name, &container_name);
    Ok(PodRun {
        command: strings("command"),
        args: strings("args"),
        working_dir: container["workingDir"].as_str().map(str::to_owned),
        namespace,
        pod: pod_name,
        container: container_name,
        image,
        env,
        output: Output(log),
        cancellation,
    })
}
