//! A Job controller: for each unsuspended Job, one pod at a time (named
//! `<job>-<5 chars>`, labelled and owned like the real controller's pods)
//! until one succeeds, `backoffLimit` is exceeded or
//! `activeDeadlineSeconds` elapses (the running container is then killed);
//! status counts and the `Complete`/`Failed` conditions follow, and
//! `ttlSecondsAfterFinished` deletes the Job and its pods afterwards.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::job_status::{self, Finish};
use crate::executor::KillReason;
use crate::gc::{self, DeleteOptions, Propagation};
use crate::meta;
use crate::objects::{create_as, update_status};
use crate::resources::{ResourceType, by_kind};
use crate::shared::Shared;
use crate::store::{EventType, Receiver};

pub(crate) const CONTROLLER: &str = "kube-controller-manager";

/// Starts a run for every Job that becomes runnable, until the store closes.
pub(crate) async fn run(shared: Arc<Shared>, mut events: Receiver) {
    let Some(jobs) = by_kind("Job") else { return };
    let mut started: HashSet<String> = HashSet::new();
    while let Some(event) = events.recv().await {
        if event.resource != jobs || event.kind == EventType::Deleted {
            continue;
        }
        let job = &event.object;
        let suspended = meta::at(job, &["spec", "suspend"]) == Some(&Value::Bool(true));
        if suspended || job_status::finished(job) || !started.insert(meta::uid(job).to_owned()) {
            continue;
        }
        tokio::spawn(run_job(shared.clone(), jobs, (**job).clone()));
    }
}

/// How one pod of the Job ended.
enum PodEnd {
    Succeeded,
    Failed,
    DeadlineExceeded,
    /// The Job itself was deleted: stop managing it.
    JobGone,
}

async fn run_job(shared: Arc<Shared>, jobs: &'static ResourceType, job: Value) {
    let namespace = meta::namespace(&job).to_owned();
    let name = meta::name(&job).to_owned();
    let backoff_limit = meta::i64_at(&job, &["spec", "backoffLimit"]).unwrap_or(6);
    let deadline = meta::i64_at(&job, &["spec", "activeDeadlineSeconds"])
        .map(|s| Instant::now() + Duration::from_secs(u64::try_from(s).unwrap_or(0)));
    let mut failed = 0;
    let finish = loop {
        let Some(pod) = create_pod(&shared, &job) else {
            return;
        };
        let active = |status: &mut Map<String, Value>| job_status::running(status, failed);
        if update_status(&shared.store, jobs, &namespace, &name, CONTROLLER, active).is_err() {
            return;
        }
        match wait_for_pod(&shared, &job, &pod, deadline).await {
            PodEnd::Succeeded => break Finish::Complete { failed },
            PodEnd::JobGone => return,
            PodEnd::DeadlineExceeded => break Finish::DeadlineExceeded { failed: failed + 1 },
            PodEnd::Failed => {
                failed += 1;
                if failed > backoff_limit {
                    break Finish::BackoffLimitExceeded { failed };
                }
                tokio::time::sleep(shared.settings.job_retry_delay).await;
            }
        }
    };
    let done = |status: &mut Map<String, Value>| job_status::finished_with(status, &finish);
    if update_status(&shared.store, jobs, &namespace, &name, CONTROLLER, done).is_err() {
        return;
    }
    if let Some(ttl) = meta::i64_at(&job, &["spec", "ttlSecondsAfterFinished"]) {
        tokio::time::sleep(Duration::from_secs(u64::try_from(ttl).unwrap_or(0))).await;
        let options = DeleteOptions {
            propagation: Some(Propagation::Background),
            ..DeleteOptions::default()
        };
        match gc::delete(&shared.store, jobs, &namespace, &name, &options) {
            // Already deleted by someone else: nothing left to clean up.
            Err(err) if err.code != 404 => {
                tracing::warn!(%err, "deleting a finished Job after its TTL")
            }
            _ => {}
        }
    }
}

/// Creates the Job's next pod; `None` when the Job can no longer have one.
fn create_pod(shared: &Shared, job: &Value) -> Option<String> {
    let job_name = meta::name(job);
    let uid = meta::uid(job);
    let template = meta::at(job, &["spec", "template"])
        .cloned()
        .unwrap_or_default();
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", uid),
        ("batch.kubernetes.io/job-name", job_name),
        ("controller-uid", uid),
        ("job-name", job_name),
    ] {
        labels.insert(key.into(), value.into());
    }
    let mut annotations = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.insert("batch.kubernetes.io/job-tracking".into(), "".into());
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{job_name}-{}", meta::name_suffix()),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template["spec"],
    });
    match create_as(&shared.store, "Pod", meta::namespace(job), CONTROLLER, pod) {
        Ok(pod) => Some(meta::name(&pod).to_owned()),
        Err(err) => {
            tracing::warn!(%err, job = job_name, "creating a Job's pod");
            None
        }
    }
}

/// Follows the pod until it ends, the deadline passes or the Job goes.
async fn wait_for_pod(
    shared: &Shared,
    job: &Value,
    pod: &str,
    deadline: Option<Instant>,
) -> PodEnd {
    let namespace = meta::namespace(job);
    let mut events = shared.store.subscribe();
    let Some(pods) = by_kind("Pod") else {
        return PodEnd::JobGone;
    };
    // Subscribed first, so an end between this read and the next event
    // is not missed.
    if let Some(end) = shared
        .store
        .get(pods, namespace, pod)
        .as_ref()
        .and_then(pod_end)
    {
        return end;
    }
    let expired = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expired);
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            () = &mut expired => {
                shared.kill(namespace, pod, KillReason::DeadlineExceeded);
                wait_until_stopped(shared, namespace, pod, &mut events).await;
                return PodEnd::DeadlineExceeded;
            }
        };
        let Some(event) = event else {
            return PodEnd::JobGone;
        };
        let same_object =
            |rt: &str| event.resource.kind == rt && meta::namespace(&event.object) == namespace;
        if same_object("Job")
            && meta::uid(&event.object) == meta::uid(job)
            && event.kind == EventType::Deleted
        {
            return PodEnd::JobGone;
        }
        if same_object("Pod") && meta::name(&event.object) == pod {
            if event.kind == EventType::Deleted {
                // A deleted pod counts as failed, and is replaced.
                return PodEnd::Failed;
            }
            if let Some(end) = pod_end(&event.object) {
                return end;
            }
        }
    }
}

fn pod_end(pod: &Value) -> Option<PodEnd> {
    match meta::str_at(pod, &["status", "phase"]) {
        Some("Succeeded") => Some(PodEnd::Succeeded),
        Some("Failed") => Some(PodEnd::Failed),
        _ => None,
    }
}

/// After a kill, waits (briefly) for the kubelet to report the pod ended.
async fn wait_until_stopped(shared: &Shared, namespace: &str, pod: &str, events: &mut Receiver) {
    let Some(pods) = by_kind("Pod") else { return };
    let stopped = async {
        loop {
            let ended = shared
                .store
                .get(pods, namespace, pod)
                .is_none_or(|p| pod_end(&p).is_some());
            if ended || events.recv().await.is_none() {
                return;
            }
        }
    };
    let _in_time = tokio::time::timeout(Duration::from_secs(5), stopped).await;
}
