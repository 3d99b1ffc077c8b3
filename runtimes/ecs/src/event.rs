//! The "ECS Task State Change" event EventBridge sends when a task moves,
//! as an SQS message delivers it (the whole event as the body). The worker
//! reads it to learn that a job's task stopped, then records the job's
//! result with [`crate::EcsRunner`]'s `poll`, which reads the exit code,
//! the output and the files.

use serde::Deserialize;
use vergence_model::{JobHandle, JobId};

use crate::error::EcsError;

const DETAIL_TYPE: &str = "ECS Task State Change";
const SOURCE: &str = "aws.ecs";
/// Every task definition the runner registers is in a family named so.
const FAMILY_PREFIX: &str = "task-definition/vergence-";

/// What a task state change says about a Vergence job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStateChange {
    /// The job the task runs (its `startedBy`).
    pub job: JobId,
    /// The task's ARN: the job's handle.
    pub task: JobHandle,
    pub cluster_arn: String,
    /// `PROVISIONING`, `RUNNING`, `STOPPED`, …
    pub last_status: String,
}

impl TaskStateChange {
    /// Whether the task has stopped, so the job's result can be read.
    pub fn is_stopped(&self) -> bool {
        self.last_status == "STOPPED"
    }
}

#[derive(Deserialize)]
struct Event {
    source: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    detail: Detail,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    task_arn: String,
    cluster_arn: String,
    last_status: String,
    task_definition_arn: String,
    #[serde(default)]
    started_by: Option<String>,
}

/// The job and task an event is about; `None` for a task Vergence did not
/// start (another family, or no `startedBy`), so a broad EventBridge rule
/// costs nothing but a message. Anything that is not an ECS task state
/// change is an error.
pub fn task_state_change(body: &str) -> Result<Option<TaskStateChange>, EcsError> {
    let event: Event = serde_json::from_str(body).map_err(|e| EcsError::InvalidEvent {
        reason: e.to_string(),
    })?;
    if event.source != SOURCE || event.detail_type != DETAIL_TYPE {
        return Err(EcsError::InvalidEvent {
            reason: format!(
                "it is a {:?} event from {:?}",
                event.detail_type, event.source
            ),
        });
    }
    let detail = event.detail;
    let ours = detail.task_definition_arn.contains(FAMILY_PREFIX);
    let Some(job) = detail.started_by.filter(|job| ours && !job.is_empty()) else {
        return Ok(None);
    };
    Ok(Some(TaskStateChange {
        job: JobId(job.into()),
        task: JobHandle(detail.task_arn),
        cluster_arn: detail.cluster_arn,
        last_status: detail.last_status,
    }))
}
