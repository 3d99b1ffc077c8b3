//! The Job status the real controller writes: counts (`active`, `ready`,
//! `succeeded`, `failed`, `terminating`), `startTime`/`completionTime`, and
//! the terminal condition pairs `SuccessCriteriaMet`+`Complete` and
//! `FailureTarget`+`Failed` that Kubernetes 1.31+ sets.

use serde_json::{Map, Value, json};

use crate::meta;

/// How a Job ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Finish {
    Complete { failed: i64 },
    BackoffLimitExceeded { failed: i64 },
    DeadlineExceeded { failed: i64 },
}

/// Whether a Job already has a terminal condition.
pub(crate) fn finished(job: &Value) -> bool {
    meta::at(job, &["status", "conditions"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| matches!(c["type"].as_str(), Some("Complete" | "Failed")) && c["status"] == "True")
}

fn common(status: &mut Map<String, Value>) {
    meta::default_key(status, "startTime", meta::now().into());
    status.insert("ready".into(), json!(0));
    status.insert("terminating".into(), json!(0));
    status.insert("uncountedTerminatedPods".into(), json!({}));
}

fn set_count(status: &mut Map<String, Value>, key: &str, count: i64) {
    // Zero counts are omitted on the wire, as the real API does.
    if count > 0 {
        status.insert(key.into(), json!(count));
    } else {
        status.remove(key);
    }
}

/// One pod is running (after `failed` failed ones).
pub(crate) fn running(status: &mut Map<String, Value>, failed: i64) {
    common(status);
    set_count(status, "active", 1);
    set_count(status, "failed", failed);
}

fn condition(kind: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
           "lastProbeTime": now, "lastTransitionTime": now})
}

/// The terminal status.
pub(crate) fn finished_with(status: &mut Map<String, Value>, finish: &Finish) {
    let now = meta::now();
    common(status);
    set_count(status, "active", 0);
    let (conditions, failed) = match *finish {
        Finish::Complete { failed } => {
            let (reason, message) = (
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            set_count(status, "succeeded", 1);
            status.insert("completionTime".into(), now.clone().into());
            (
                vec![
                    condition("SuccessCriteriaMet", reason, message, &now),
                    condition("Complete", reason, message, &now),
                ],
                failed,
            )
        }
        Finish::BackoffLimitExceeded { failed } => {
            let (reason, message) = (
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            );
            (
                vec![
                    condition("FailureTarget", reason, message, &now),
                    condition("Failed", reason, message, &now),
                ],
                failed,
            )
        }
        Finish::DeadlineExceeded { failed } => {
            let (reason, message) = (
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            );
            (
                vec![
                    condition("FailureTarget", reason, message, &now),
                    condition("Failed", reason, message, &now),
                ],
                failed,
            )
        }
    };
    set_count(status, "failed", failed);
    status.insert("conditions".into(), Value::Array(conditions));
}
