//! What the live objects say, read without any call to the cluster: the
//! object as the runtime applies it, whether a live one has drifted from
//! it, and where a workload's rollout stands (as `kubectl rollout status`
//! reads it) — together, the structured-fetch result Vergence interprets.

use serde_json::{Map, Value, json};
use vergence_model::KubernetesObjects;
use vergence_model::manifests::object_labels;

/// An object as it is applied: the rendered one, with the version
/// annotation and, when namespaced, its namespace.
pub fn applied_form(object: &Value, work: &KubernetesObjects, namespace: Option<&str>) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(namespace) = namespace {
            metadata.insert("namespace".into(), namespace.into());
        }
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(object_labels::VERSION.into(), work.version.clone().into());
        }
    }
    object
}

/// Where the live object differs from what was applied, by path
/// (`spec.template.spec.containers[0].image`); `None` when every field
/// that was applied has its value. Fields the cluster adds (defaults,
/// status, other managers' fields) are not drift.
pub fn drift(applied: &Value, live: &Value) -> Option<String> {
    differences(applied, live)
        .into_iter()
        .next()
        .map(|d| d.path)
}

/// One field whose live value is not the one applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub path: String,
    pub live: Value,
    pub wanted: Value,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Null => "not set".to_owned(),
            other => other.to_string(),
        };
        write!(
            f,
            "{}: {} live, {} wanted",
            self.path,
            shown(&self.live),
            shown(&self.wanted)
        )
    }
}

/// Every field where the live object differs from `applied`: the drift
/// check's comparison, which adoption also makes (on the object without
/// Vergence's marks) to decide whether an object someone else made already
/// is what the manifests describe.
pub fn differences(applied: &Value, live: &Value) -> Vec<Difference> {
    let mut found = Vec::new();
    let Value::Object(applied) = applied else {
        return found;
    };
    for (key, want) in applied {
        let have = live.get(key).unwrap_or(&Value::Null);
        match key.as_str() {
            "status" | "apiVersion" | "kind" => {}
            "metadata" => {
                for part in ["labels", "annotations"] {
                    if let Some(want) = want.get(part) {
                        subset(
                            want,
                            have.get(part).unwrap_or(&Value::Null),
                            format!("metadata.{part}"),
                            &mut found,
                        );
                    }
                }
            }
            _ => subset(want, have, key.clone(), &mut found),
        }
    }
    found
}

fn subset(want: &Value, found: &Value, path: String, into: &mut Vec<Difference>) {
    match (want, found) {
        (Value::Object(want), Value::Object(found)) => {
            for (k, w) in want {
                subset(
                    w,
                    found.get(k).unwrap_or(&Value::Null),
                    format!("{path}.{k}"),
                    into,
                );
            }
        }
        (Value::Array(want), Value::Array(found)) if want.len() == found.len() => {
            for (i, (w, f)) in want.iter().zip(found).enumerate() {
                subset(w, f, format!("{path}[{i}]"), into);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        // An empty value written is the same as one left out.
        (Value::Null, Value::Null) => {}
        (Value::Object(o), Value::Null) if o.is_empty() => {}
        (Value::Array(a), Value::Null) if a.is_empty() => {}
        (a, b) if a == b => {}
        _ => into.push(Difference {
            path,
            live: found.clone(),
            wanted: want.clone(),
        }),
    }
}

/// The object as applied without Vergence's marks (the instance's labels,
/// its service id and version annotations): what an object someone else
/// made must already have to be adopted as it is.
pub fn unmarked(applied: &Value, work: &KubernetesObjects) -> Value {
    let mut object = applied.clone();
    let part = |object: &mut Value, name: &str| {
        object
            .get_mut("metadata")
            .and_then(|m| m.get_mut(name))
            .and_then(Value::as_object_mut)
            .map(std::mem::take)
    };
    if let Some(mut labels) = part(&mut object, "labels") {
        labels.retain(|k, _| !work.selector.contains_key(k));
        object["metadata"]["labels"] = Value::Object(labels);
    }
    if let Some(mut annotations) = part(&mut object, "annotations") {
        annotations.retain(|k, _| k != object_labels::VERSION && k != object_labels::SERVICE_ID);
        object["metadata"]["annotations"] = Value::Object(annotations);
    }
    object
}

/// One object's line of the structured fetch.
pub fn observe(applied: &Value, live: Option<&Value>) -> Value {
    let kind = applied["kind"].as_str().unwrap_or_default();
    let name = applied["metadata"]["name"].as_str().unwrap_or_default();
    let shown = match applied["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    };
    let Some(live) = live else {
        return json!({"name": shown, "objectType": kind, "versions": [], "status": "PENDING",
            "message": "not in the cluster"});
    };
    let version = live["metadata"]["annotations"][object_labels::VERSION]
        .as_str()
        .unwrap_or("(not applied by Vergence)");
    let drifted = drift(applied, live);
    let rollout = rollout(kind, live);
    let mut entry = json!({"version": version, "active": true, "drifted": drifted.is_some()});
    for (field, value) in [
        ("targetReplicas", rollout.target),
        ("replicas", rollout.updated),
        ("availableReplicas", rollout.available),
    ] {
        if let Some(value) = value {
            entry[field] = value.into();
        }
    }
    let message = match (&drifted, &rollout.message) {
        (Some(path), _) => Some(format!("{path} was changed in the cluster")),
        (None, message) => message.clone(),
    };
    json!({"name": shown, "objectType": kind, "versions": [entry], "status": rollout.status,
        "message": message})
}

/// A summary that changes whenever what Vergence would conclude changes:
/// what the watch compares to decide whether to tell Vergence.
pub fn summary(observed: &Value) -> String {
    format!(
        "{}|{}|{}",
        observed["status"], observed["versions"][0]["version"], observed["versions"][0]["drifted"]
    )
}

struct Rollout {
    status: &'static str,
    message: Option<String>,
    target: Option<i64>,
    updated: Option<i64>,
    available: Option<i64>,
}

fn int(value: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(value, |v, k| v.get(k))?.as_i64()
}

/// Where a workload's rollout stands; other kinds exist and are done.
fn rollout(kind: &str, live: &Value) -> Rollout {
    let done = Rollout {
        status: "SUCCEEDED",
        message: None,
        target: None,
        updated: None,
        available: None,
    };
    let pending = |message: String, target, updated, available| Rollout {
        status: "PENDING",
        message: Some(message),
        target,
        updated,
        available,
    };
    let generation = int(live, &["metadata", "generation"]).unwrap_or(0);
    let observed = int(live, &["status", "observedGeneration"]).unwrap_or(0);
    let (target, updated, available) = match kind {
        "Deployment" | "StatefulSet" => (
            int(live, &["spec", "replicas"]).unwrap_or(1),
            int(live, &["status", "updatedReplicas"]).unwrap_or(0),
            int(live, &["status", "availableReplicas"]).unwrap_or(0),
        ),
        "DaemonSet" => (
            int(live, &["status", "desiredNumberScheduled"]).unwrap_or(0),
            int(live, &["status", "updatedNumberScheduled"]).unwrap_or(0),
            int(live, &["status", "numberAvailable"]).unwrap_or(0),
        ),
        _ => return done,
    };
    if kind == "Deployment"
        && let Some(reason) = deadline_exceeded(live)
    {
        return Rollout {
            status: "FAILED",
            message: Some(reason),
            target: Some(target),
            updated: Some(updated),
            available: Some(available),
        };
    }
    let counts = (Some(target), Some(updated), Some(available));
    if observed < generation {
        return pending(
            format!("the controller has not seen generation {generation} yet"),
            counts.0,
            counts.1,
            counts.2,
        );
    }
    if kind == "StatefulSet" {
        let current = live["status"]["currentRevision"].as_str();
        let update = live["status"]["updateRevision"].as_str();
        if update.is_some() && current != update {
            return pending(
                format!("{updated} of {target} updated"),
                counts.0,
                counts.1,
                counts.2,
            );
        }
    }
    let total = int(live, &["status", "replicas"]).unwrap_or(updated);
    if updated < target {
        pending(
            format!("{updated} of {target} updated"),
            counts.0,
            counts.1,
            counts.2,
        )
    } else if kind == "Deployment" && total > updated {
        pending(
            format!("{} old replica(s) still terminating", total - updated),
            counts.0,
            counts.1,
            counts.2,
        )
    } else if available < updated {
        pending(
            format!("{available} of {updated} available"),
            counts.0,
            counts.1,
            counts.2,
        )
    } else {
        Rollout {
            target: counts.0,
            updated: counts.1,
            available: counts.2,
            ..done
        }
    }
}

/// `Progressing=False` with reason `ProgressDeadlineExceeded`: the
/// Deployment controller gave up on the rollout.
fn deadline_exceeded(live: &Value) -> Option<String> {
    live["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| {
            c["type"] == "Progressing"
                && c["status"] == "False"
                && c["reason"] == "ProgressDeadlineExceeded"
        })
        .map(|c| {
            format!(
                "progress deadline exceeded: {}",
                c["message"]
                    .as_str()
                    .unwrap_or("the rollout made no progress")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 2,
                "annotations": {"vergence.dev/version": "v2"}},
            "spec": {"replicas": replicas}, "status": status})
    }

    #[test]
    fn rollouts_read_as_kubectl_rollout_status_reads_them() {
        let applied = json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 2}});
        let seen = observe(
            &applied,
            Some(&deployment(2, json!({"observedGeneration": 1}))),
        );
        assert_eq!(seen["status"], "PENDING");
        let seen = observe(
            &applied,
            Some(&deployment(
                2,
                json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 1}),
            )),
        );
        assert_eq!(seen["message"], "1 of 2 available");
        let seen = observe(
            &applied,
            Some(&deployment(
                2,
                json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 2}),
            )),
        );
        assert_eq!(seen["status"], "SUCCEEDED");
        assert_eq!(seen["versions"][0]["version"], "v2");
        assert_eq!(seen["name"], "Deployment shop/web");
        let stuck = json!({"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"web-1\" has timed out progressing."}]});
        let seen = observe(&applied, Some(&deployment(2, stuck)));
        assert_eq!(seen["status"], "FAILED");
        assert!(
            seen["message"]
                .as_str()
                .unwrap()
                .starts_with("progress deadline exceeded")
        );
        assert_eq!(observe(&applied, None)["versions"], json!([]));
    }

    #[test]
    fn drift_is_a_changed_applied_field_not_a_field_the_cluster_added() {
        let applied = json!({"kind": "Deployment", "metadata": {"name": "web", "labels": {"a": "b"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "web:2"}]}}}});
        let mut live = applied.clone();
        live["metadata"]["uid"] = "x".into();
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] =
            "IfNotPresent".into();
        live["status"] = json!({"replicas": 2});
        assert_eq!(drift(&applied, &live), None);
        live["spec"]["template"]["spec"]["containers"][0]["image"] = "web:evil".into();
        assert_eq!(
            drift(&applied, &live).as_deref(),
            Some("spec.template.spec.containers[0].image")
        );
        let mut relabelled = applied.clone();
        relabelled["metadata"]["labels"]["a"] = "c".into();
        assert_eq!(
            drift(&applied, &relabelled).as_deref(),
            Some("metadata.labels.a")
        );
    }
}
