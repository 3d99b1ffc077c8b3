//! Pod status as a kubelet reports it for one container going through
//! Pending (waiting) → Running → Succeeded/Failed: phase, conditions,
//! IPs and `containerStatuses[0].state`.

use serde_json::{Map, Value, json};

use crate::meta;

/// The node every pod is bound to.
pub(crate) const NODE_NAME: &str = "fake-node";
const HOST_IP: &str = "10.0.0.10";

/// The state of the pod's container.
#[derive(Debug, Clone)]
pub(crate) enum ContainerState {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started_at: String,
    },
    Terminated {
        exit_code: i32,
        reason: String,
        message: Option<String>,
        started_at: String,
        finished_at: String,
    },
}

impl ContainerState {
    fn phase(&self) -> &'static str {
        match self {
            Self::Waiting { .. } => "Pending",
            Self::Running { .. } => "Running",
            Self::Terminated { exit_code: 0, .. } => "Succeeded",
            Self::Terminated { .. } => "Failed",
        }
    }
}

/// Identity of one container run: stable ids for the status.
#[derive(Debug, Clone)]
pub(crate) struct RunIds {
    pub container_id: String,
    pub pod_ip: String,
}

impl RunIds {
    pub(crate) fn new() -> Self {
        let hex: String = (0..64)
            .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
            .collect();
        Self {
            container_id: format!("containerd://{hex}"),
            pod_ip: format!("10.244.0.{}", fastrand::u8(2..=254)),
        }
    }
}

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &str,
) -> Value {
    let mut c = json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(reason) = reason {
        c["reason"] = reason.into();
    }
    if let Some(message) = message {
        c["message"] = message.into();
    }
    c
}

fn conditions(state: &ContainerState, container: &str, now: &str) -> Value {
    let running = matches!(state, ContainerState::Running { .. });
    let (not_ready_reason, not_ready_message) = match state {
        ContainerState::Terminated { .. } => (Some("PodCompleted"), None),
        _ => (
            Some("ContainersNotReady"),
            Some(format!("containers with unready status: [{container}]")),
        ),
    };
    let (reason, message) = if running {
        (None, None)
    } else {
        (not_ready_reason, not_ready_message)
    };
    json!([
        condition(
            "PodReadyToStartContainers",
            !matches!(state, ContainerState::Waiting { .. }),
            None,
            None,
            now
        ),
        condition("Initialized", true, None, None, now),
        condition("Ready", running, reason, message.clone(), now),
        condition("ContainersReady", running, reason, message, now),
        condition("PodScheduled", true, None, None, now),
    ])
}

fn state_json(state: &ContainerState, ids: &RunIds) -> Value {
    match state {
        ContainerState::Waiting { reason, message } => {
            json!({"waiting": {"reason": reason, "message": message}})
        }
        ContainerState::Running { started_at } => json!({"running": {"startedAt": started_at}}),
        ContainerState::Terminated {
            exit_code,
            reason,
            message,
            started_at,
            finished_at,
        } => {
            let mut t = json!({
                "exitCode": exit_code, "reason": reason, "startedAt": started_at,
                "finishedAt": finished_at, "containerID": ids.container_id,
            });
            if let Some(message) = message {
                t["message"] = message.clone().into();
            }
            json!({"terminated": t})
        }
    }
}

/// Writes the status of a pod whose first container is in `state`.
pub(crate) fn write(
    status: &mut Map<String, Value>,
    container: &Value,
    state: &ContainerState,
    ids: &RunIds,
) {
    let now = meta::now();
    let name = container["name"].as_str().unwrap_or_default();
    let image = container["image"].as_str().unwrap_or_default();
    let waiting = matches!(state, ContainerState::Waiting { .. });
    let mut container_status = json!({
        "name": name, "image": image, "imageID": "",
        "ready": matches!(state, ContainerState::Running { .. }),
        "started": matches!(state, ContainerState::Running { .. }),
        "restartCount": 0, "state": state_json(state, ids), "lastState": {},
    });
    if !waiting {
        container_status["containerID"] = ids.container_id.clone().into();
        container_status["imageID"] = format!("{image}@sha256:{}", &ids.container_id[13..]).into();
        status.insert("podIP".into(), ids.pod_ip.clone().into());
        status.insert("podIPs".into(), json!([{"ip": ids.pod_ip}]));
    }
    status.insert("phase".into(), state.phase().into());
    status.insert("conditions".into(), conditions(state, name, &now));
    status.insert("hostIP".into(), HOST_IP.into());
    status.insert("hostIPs".into(), json!([{"ip": HOST_IP}]));
    meta::default_key(status, "startTime", now.clone().into());
    status.insert("containerStatuses".into(), json!([container_status]));
    meta::default_key(status, "qosClass", "BestEffort".into());
    if let ContainerState::Terminated { reason, .. } = state
        && reason == "DeadlineExceeded"
    {
        status.insert("reason".into(), "DeadlineExceeded".into());
        status.insert(
            "message".into(),
            "Pod was active on the node longer than the specified deadline".into(),
        );
    }
}
