//! The agent protocol: what `vergence-agent` sends to the Vergence API and
//! gets back (routes in docs/openapi.json, behaviour in
//! docs/runners/kubernetes.md). JSON in camelCase, over two routes:
//! `POST /v1/agents/{agent}/poll` (a [`PollRequest`], answered with a
//! [`PollResponse`] once there is work or the wait is over) and
//! `POST /v1/agents/{agent}/reports` (an [`AgentReport`], answered with a
//! [`ReportAnswer`]).
//!
//! Tasks are tagged by `kind`; an agent ignores kinds it does not know
//! ([`TaskDetails::Unsupported`]), so a newer server can add kinds without
//! breaking older agents (their leases run out and the work waits for an
//! agent that knows it).

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::job::JobId;

/// The longest a poll waits for work before answering with none: under
/// API Gateway's 29 s limit, with room for the work done after the wait.
pub const MAX_POLL_WAIT_SECONDS: u64 = 20;

/// Tasks handed out per poll when the agent does not say.
pub const DEFAULT_MAX_TASKS: usize = 10;

/// Labels and annotations on the Kubernetes objects of an agent.
pub mod labels {
    /// The agent that created the Job (label; what the agent watches by).
    pub const AGENT: &str = "vergence.dev/agent";
    /// The Vergence job id (label; job ids are valid label values).
    pub const JOB_ID: &str = "vergence.dev/job-id";
    /// The Vergence job id, exactly (annotation).
    pub const JOB_ID_ANNOTATION: &str = "vergence.dev/job-id";
    pub const APPLICATION: &str = "vergence.dev/application";
    pub const SERVICE: &str = "vergence.dev/service";
    pub const RELEASE_CHANNEL: &str = "vergence.dev/release-channel";
    /// fetch, apply, getinfo or protection.
    pub const JOB_KIND: &str = "vergence.dev/job-kind";
    /// `app.kubernetes.io/managed-by`: `vergence-agent`.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
}

/// `POST /v1/agents/{agent}/poll`: the agent's heartbeat and its request
/// for work.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PollRequest {
    /// The agent's version.
    pub version: String,
    /// Its own namespace, where Jobs go when a runtime names none.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The cluster it runs in, if it knows (informational).
    #[serde(default)]
    pub cluster: Option<String>,
    /// The jobs it runs now; their leases are renewed.
    #[serde(default)]
    pub running: Vec<JobId>,
    /// Most tasks to take (default [`DEFAULT_MAX_TASKS`]).
    #[serde(default)]
    pub max_tasks: Option<usize>,
    /// How long to wait for work when there is none, in seconds (default
    /// and most: [`MAX_POLL_WAIT_SECONDS`]).
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

/// The answer to a poll: the tasks handed to the agent, maybe none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PollResponse {
    pub tasks: Vec<Task>,
}

/// One task handed to the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The work item; the agent's report of the task names its job.
    pub work_id: String,
    #[serde(flatten)]
    pub details: TaskDetails,
}

/// What a task asks for, by `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum TaskDetails {
    RunJob(RunJob),
    StopJob(StopJob),
    /// Apply or read the objects of a first-class Kubernetes runtime.
    Manifests(ManifestsJob),
    /// A kind this agent does not know (a newer server): left alone.
    #[serde(other)]
    Unsupported,
}

/// Run a job as a Kubernetes Job, and report how it ended.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunJob {
    pub job_id: JobId,
    /// The Job's name: DNS-1123, at most 63 characters, the same on every
    /// delivery, so a second delivery finds the Job of the first.
    pub job_name: String,
    /// `None`: the agent's own namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub service_account: Option<String>,
    pub image: String,
    /// The container's `command` (the image's entrypoint is replaced).
    pub command: Vec<String>,
    /// Plain variables, including presigned artifact URLs (credentials:
    /// never logged).
    pub env: BTreeMap<String, String>,
    /// Variables read from Kubernetes Secrets in the Job's namespace.
    #[serde(default)]
    pub secret_env: BTreeMap<String, SecretKeyRef>,
    /// The job's timeout: the Job's `activeDeadlineSeconds`.
    pub active_deadline_seconds: u64,
    /// Labels for the Job and its pod (the agent adds its own).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl fmt::Debug for RunJob {
    // The environment holds presigned URLs; only its names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunJob")
            .field("job_id", &self.job_id)
            .field("job_name", &self.job_name)
            .field("namespace", &self.namespace)
            .field("service_account", &self.service_account)
            .field("image", &self.image)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("secret_env", &self.secret_env)
            .field("active_deadline_seconds", &self.active_deadline_seconds)
            .finish_non_exhaustive()
    }
}

/// A first-class Kubernetes runtime's job, carried out by the agent
/// itself: `work` says whether to apply the objects or report their live
/// state. Reported as a [`JobFinished`] like any job: exit 0 with the
/// structured-fetch JSON (fetch) or what was applied (apply) as its log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestsJob {
    pub job_id: JobId,
    pub work: crate::manifests::BuiltinJob,
    /// The job's timeout, in seconds.
    pub deadline_seconds: u64,
}

/// A key of a Kubernetes Secret (`valueFrom.secretKeyRef`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

/// Stop a job: delete its Kubernetes Job (and pod), then report it stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopJob {
    pub job_id: JobId,
    pub job_name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub reason: String,
}

/// `POST /v1/agents/{agent}/reports`: what became of a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum AgentReport {
    /// A job's Kubernetes Job ended.
    JobFinished(JobFinished),
    /// A job's Kubernetes Job was deleted as a stop task asked.
    JobStopped(JobStopped),
    /// The agent's watch saw objects of an instance change: edited or
    /// deleted out of band, or a rollout moved. Vergence looks at the
    /// instance now instead of at its next poll.
    ObjectsChanged(ObjectsChanged),
}

impl AgentReport {
    /// The job the report is about; `None` for a change seen by a watch.
    pub fn job_id(&self) -> Option<&JobId> {
        match self {
            AgentReport::JobFinished(finished) => Some(&finished.job_id),
            AgentReport::JobStopped(stopped) => Some(&stopped.job_id),
            AgentReport::ObjectsChanged(_) => None,
        }
    }

    /// What the report is about, for logs and error messages.
    pub fn subject(&self) -> String {
        match self {
            AgentReport::ObjectsChanged(changed) => format!(
                "objects of {}/{}/{}",
                changed.application, changed.service, changed.release_channel
            ),
            other => other.job_id().map(ToString::to_string).unwrap_or_default(),
        }
    }
}

/// Objects of one instance changed in the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectsChanged {
    pub application: String,
    pub service: String,
    pub release_channel: String,
    /// What changed, for people: `Deployment shop/web edited out of band`.
    pub changes: Vec<String>,
}

/// How a job's Kubernetes Job ended, with what its pod logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobFinished {
    pub job_id: JobId,
    pub ended: JobEnd,
    /// The start of the pod's log, at most 1 MiB. Pod logs mix stdout and
    /// stderr; images running `vergence-wrapper` upload the exact streams,
    /// which take precedence.
    #[serde(default)]
    pub log: String,
    /// The end of the pod's log (a few KiB), for failure reasons.
    #[serde(default)]
    pub log_tail: String,
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
}

/// How the container ended, as the cluster saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum JobEnd {
    /// The program exited with this code.
    Exited { exit_code: i32 },
    /// The cluster ended it without an exit code (`ImagePullBackOff`, a
    /// missing Secret, an eviction): why.
    PlatformFailed { message: String },
    /// It ran past its `activeDeadlineSeconds`.
    TimedOut,
    /// Someone deleted its Job before it ended.
    Stopped { reason: String },
}

/// The Job of a stop task is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStopped {
    pub job_id: JobId,
}

/// The answer to a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportAnswer {
    /// False when the job already had a result (a repeated report, or a
    /// job Vergence had already stopped): nothing more to do either way.
    pub recorded: bool,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tasks_carry_their_kind_beside_the_work_id_and_unknown_kinds_are_kept_apart() {
        let task = Task {
            work_id: "stop-apply-1".into(),
            details: TaskDetails::StopJob(StopJob {
                job_id: JobId("apply-1".into()),
                job_name: "vergence-apply-1".into(),
                namespace: None,
                reason: "superseded".into(),
            }),
        };
        let wire = serde_json::to_value(&task).unwrap();
        assert_eq!(
            wire,
            json!({"workId": "stop-apply-1", "kind": "stopJob", "jobId": "apply-1",
                   "jobName": "vergence-apply-1", "namespace": null, "reason": "superseded"})
        );
        assert_eq!(serde_json::from_value::<Task>(wire).unwrap(), task);
        let newer: PollResponse = serde_json::from_value(json!({"tasks": [
            {"workId": "x", "kind": "applyManifests", "objects": []}
        ]}))
        .unwrap();
        assert_eq!(newer.tasks[0].details, TaskDetails::Unsupported);
    }

    #[test]
    fn reports_say_how_the_job_ended() {
        let report: AgentReport = serde_json::from_value(json!({
            "kind": "jobFinished", "jobId": "apply-1",
            "ended": {"kind": "exited", "exitCode": 3},
            "log": "hello\n", "logTail": "hello\n",
            "finishedAt": "2027-01-15T08:00:00Z"
        }))
        .unwrap();
        let AgentReport::JobFinished(finished) = &report else {
            panic!("a finished job");
        };
        assert_eq!(finished.ended, JobEnd::Exited { exit_code: 3 });
        assert_eq!(report.job_id().unwrap().as_str(), "apply-1");
    }
}
