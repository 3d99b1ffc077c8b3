//! Workload rollouts without pods: when a Deployment, StatefulSet or
//! DaemonSet gets a new generation, its status at once shows a rollout in
//! progress and, after the configured delay, the outcome the test chose
//! with [`Rollout`] (healthy by default), as the real controllers would
//! report it. Every status change is a MODIFIED watch event.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::meta;
use crate::objects::update_status_with;
use crate::resources::{ResourceType, by_kind};
use crate::shared::Shared;
use crate::store::{EventType, Receiver};

const CONTROLLER: &str = "kube-controller-manager";

/// How a workload's rollouts end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Rollout {
    /// Every replica updated, ready and available.
    #[default]
    Healthy,
    /// The rollout never finishes: updated and available stay below desired.
    Stuck,
    /// Stuck, and (Deployments) `Progressing=False` with reason
    /// `ProgressDeadlineExceeded`.
    ProgressDeadlineExceeded,
}

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    InProgress,
    Done(Rollout),
}

const WORKLOADS: &[&str] = &["Deployment", "StatefulSet", "DaemonSet"];

type Pending = Arc<Mutex<HashSet<(String, String, String)>>>;

/// Follows workload changes (and `set_rollout` calls) until the store closes.
pub(crate) async fn run(shared: Arc<Shared>, mut events: Receiver) {
    let mut pokes = shared.rollout_pokes.subscribe();
    let pending: Pending = Arc::default();
    loop {
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { return };
                if WORKLOADS.contains(&event.resource.kind) && event.kind != EventType::Deleted {
                    let object = &event.object;
                    consider(&shared, &pending, event.resource, meta::namespace(object), meta::name(object));
                }
            }
            changed = pokes.changed() => {
                if changed.is_err() {
                    return;
                }
                let poked = pokes.borrow_and_update().clone();
                let Some((kind, namespace, name)) = poked else { continue };
                if let Some(rt) = by_kind(&kind) {
                    consider(&shared, &pending, rt, &namespace, &name);
                }
            }
        }
    }
}

/// Shows a new generation as in progress now and schedules the outcome.
/// Both steps compute from the object as stored when they run, so a late
/// event never moves a status backwards.
fn consider(
    shared: &Arc<Shared>,
    pending: &Pending,
    rt: &'static ResourceType,
    namespace: &str,
    name: &str,
) {
    let in_progress = update_status_with(
        &shared.store,
        rt,
        namespace,
        name,
        CONTROLLER,
        |obj, status| {
            let generation = meta::i64_at(obj, &["metadata", "generation"]);
            if generation != status.get("observedGeneration").and_then(Value::as_i64) {
                status_for(rt, obj, Stage::InProgress, status);
            }
        },
    );
    if in_progress.is_err() {
        return;
    }
    let key = (rt.kind.to_owned(), namespace.to_owned(), name.to_owned());
    // One timer per workload at a time; a change while it waits is picked
    // up when it fires, and its own write schedules one more (no-op) look.
    let first = pending.lock().is_ok_and(|mut p| p.insert(key.clone()));
    if !first {
        return;
    }
    let (shared, pending) = (shared.clone(), pending.clone());
    tokio::spawn(async move {
        tokio::time::sleep(shared.settings.rollout_delay).await;
        forget(&pending, &key);
        let (_, namespace, name) = &key;
        let outcome = Stage::Done(shared.rollout(rt.kind, namespace, name));
        let written = update_status_with(
            &shared.store,
            rt,
            namespace,
            name,
            CONTROLLER,
            |obj, status| {
                status_for(rt, obj, outcome, status);
            },
        );
        if let Err(err) = written {
            tracing::debug!(%err, "workload went away during its rollout");
        }
    });
}

fn forget(pending: &Pending, key: &(String, String, String)) {
    if let Ok(mut p) = pending.lock() {
        p.remove(key);
    }
}

/// Writes the status a workload has at `stage`.
fn status_for(rt: &ResourceType, obj: &Value, stage: Stage, status: &mut Map<String, Value>) {
    let desired = match rt.kind {
        "DaemonSet" => 1,
        _ => meta::i64_at(obj, &["spec", "replicas"]).unwrap_or(1),
    };
    let done = matches!(stage, Stage::Done(Rollout::Healthy)) || desired == 0;
    let settled = if done { desired } else { (desired - 1).max(0) };
    if let Some(generation) = meta::i64_at(obj, &["metadata", "generation"]) {
        status.insert("observedGeneration".into(), json!(generation));
    }
    let revision = format!(
        "{}-{}",
        meta::name(obj),
        meta::short_hash(&obj["spec"]["template"])
    );
    match rt.kind {
        "Deployment" => deployment(status, desired, settled, stage, done, &revision),
        "StatefulSet" => {
            set_count(status, "replicas", desired, true);
            for key in ["readyReplicas", "updatedReplicas", "availableReplicas"] {
                set_count(status, key, settled, false);
            }
            set_count(
                status,
                "currentReplicas",
                if done { desired } else { settled },
                false,
            );
            if done || status.get("currentRevision").is_none() {
                status.insert("currentRevision".into(), revision.clone().into());
            }
            status.insert("updateRevision".into(), revision.into());
            status.insert("collisionCount".into(), json!(0));
        }
        _ => {
            for key in ["desiredNumberScheduled", "currentNumberScheduled"] {
                set_count(status, key, desired, true);
            }
            set_count(status, "numberMisscheduled", 0, true);
            set_count(status, "numberReady", settled, true);
            set_count(status, "updatedNumberScheduled", settled, false);
            set_count(status, "numberAvailable", settled, false);
            set_count(status, "numberUnavailable", desired - settled, false);
        }
    }
}

fn deployment(
    status: &mut Map<String, Value>,
    desired: i64,
    settled: i64,
    stage: Stage,
    done: bool,
    revision: &str,
) {
    set_count(status, "replicas", desired, false);
    for key in ["updatedReplicas", "readyReplicas", "availableReplicas"] {
        set_count(status, key, settled, false);
    }
    set_count(status, "unavailableReplicas", desired - settled, false);
    let available = if settled > 0 || desired == 0 {
        (
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".to_owned(),
        )
    } else {
        (
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".to_owned(),
        )
    };
    let progressing = match stage {
        _ if done => (
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{revision}\" has successfully progressed."),
        ),
        Stage::Done(Rollout::ProgressDeadlineExceeded) => (
            "False",
            "ProgressDeadlineExceeded",
            format!("ReplicaSet \"{revision}\" has timed out progressing."),
        ),
        _ => (
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{revision}\" is progressing."),
        ),
    };
    let previous = status.get("conditions").cloned().unwrap_or_default();
    let conditions = vec![
        condition(&previous, "Available", available),
        condition(&previous, "Progressing", progressing),
    ];
    status.insert("conditions".into(), Value::Array(conditions));
}

/// A condition, keeping its times when nothing about it changed, so an
/// unchanged status writes nothing.
fn condition(
    previous: &Value,
    kind: &str,
    (state, reason, message): (&str, &str, String),
) -> Value {
    let old = previous
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind);
    if let Some(old) = old.filter(|c| {
        c["status"] == state && c["reason"] == reason && c["message"] == message.as_str()
    }) {
        return old.clone();
    }
    let now = meta::now();
    let transition = match old {
        Some(old) if old["status"] == state => old["lastTransitionTime"].clone(),
        _ => now.clone().into(),
    };
    json!({"type": kind, "status": state, "lastUpdateTime": now, "lastTransitionTime": transition,
           "reason": reason, "message": message})
}

/// Zero counts are omitted on the wire unless the field is required.
fn set_count(status: &mut Map<String, Value>, key: &str, count: i64, required: bool) {
    if count > 0 || required {
        status.insert(key.into(), json!(count.max(0)));
    } else {
        status.remove(key);
    }
}
