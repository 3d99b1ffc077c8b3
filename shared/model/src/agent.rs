//! Agents: `vergence-agent` runs in a user's Kubernetes cluster, dials out
//! to the Vergence API, long-polls for work and reports what became of it,
//! so Vergence never holds a credential for the cluster. Here is what
//! Vergence keeps about agents — when each last called, and the work
//! queued for it — and, in [`protocol`], what the two say to each other.
//!
//! Work for an agent is a queue of [`AgentWork`] items with leases: a poll
//! leases the items that are free, the agent renews the lease of the jobs
//! it still runs on every poll, and an item whose lease ran out (an agent
//! that died holding it) is handed out again. Items are removed when the
//! agent reports them done. Ids are derived from the job, so dispatching
//! the same job twice queues it once.

pub mod protocol;

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::job::JobId;
use crate::names::AgentName;

/// An agent that has not called for this long is presumed gone: its
/// instances wait with a reason instead of queueing work nobody takes.
pub const AGENT_STALE_AFTER: SignedDuration = SignedDuration::from_mins(2);

/// How long a leased item stays with the agent that took it. Agents poll
/// at least every half minute and renew the items they still work on, so
/// only an agent that went away lets a lease run out.
pub const AGENT_LEASE: SignedDuration = SignedDuration::from_secs(60);

/// What Vergence knows about an agent from its last call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentState {
    pub name: AgentName,
    pub last_seen: Timestamp,
    /// The agent's own version (`vergence-agent --version`).
    pub version: String,
    /// The namespace its Jobs go to when a runtime names none.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The cluster it runs in, as it says (informational).
    #[serde(default)]
    pub cluster: Option<String>,
}

impl AgentState {
    /// Whether the agent called recently enough to take work.
    pub fn is_alive(&self, now: Timestamp) -> bool {
        now.duration_since(self.last_seen) <= AGENT_STALE_AFTER
    }

    /// "last seen 6m ago", for reasons and status lines.
    pub fn last_contact(&self, now: Timestamp) -> String {
        format!(
            "last seen {} ago",
            coarse(now.duration_since(self.last_seen))
        )
    }
}

/// A duration in its largest whole unit: `45s`, `6m`, `3h`, `2d`.
fn coarse(duration: SignedDuration) -> String {
    let secs = duration.as_secs().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// What an agent is asked to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum AgentTask {
    /// Run a job as a Kubernetes Job and report its result.
    RunJob { job_id: JobId },
    /// Stop a job's Kubernetes Job (superseded, or past its deadline).
    StopJob { job_id: JobId, reason: String },
}

impl AgentTask {
    pub fn job_id(&self) -> &JobId {
        match self {
            AgentTask::RunJob { job_id } | AgentTask::StopJob { job_id, .. } => job_id,
        }
    }

    /// The id of the work item: one per job and task kind, so a job
    /// dispatched again (a redelivered message) is queued once.
    pub fn work_id(&self) -> String {
        match self {
            AgentTask::RunJob { job_id } => AgentWork::run_id(job_id),
            AgentTask::StopJob { job_id, .. } => AgentWork::stop_id(job_id),
        }
    }
}

/// One item of an agent's work queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentWork {
    pub id: String,
    pub agent: AgentName,
    pub task: AgentTask,
    pub created_at: Timestamp,
    /// Until when the agent that took it has it; free when `None` or past.
    #[serde(default)]
    pub leased_until: Option<Timestamp>,
    /// How often it was handed out.
    #[serde(default)]
    pub deliveries: u32,
}

impl AgentWork {
    /// A new, free item for `task`.
    pub fn new(agent: AgentName, task: AgentTask, now: Timestamp) -> Self {
        Self {
            id: task.work_id(),
            agent,
            task,
            created_at: now,
            leased_until: None,
            deliveries: 0,
        }
    }

    /// The id of the item that runs `job`.
    pub fn run_id(job: &JobId) -> String {
        format!("run-{job}")
    }

    /// The id of the item that stops `job`.
    pub fn stop_id(job: &JobId) -> String {
        format!("stop-{job}")
    }

    /// Whether the item can be leased at `now`.
    pub fn is_free(&self, now: Timestamp) -> bool {
        self.leased_until.is_none_or(|until| until <= now)
    }
}

impl fmt::Display for AgentTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentTask::RunJob { job_id } => write!(f, "run job {job_id}"),
            AgentTask::StopJob { job_id, reason } => write!(f, "stop job {job_id} ({reason})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn an_agent_is_alive_for_two_minutes_after_its_last_call() {
        let agent = AgentState {
            name: "prod-eu".parse().unwrap(),
            last_seen: at(0),
            version: "0.1.0".into(),
            namespace: None,
            cluster: None,
        };
        assert!(agent.is_alive(at(120)));
        assert!(!agent.is_alive(at(121)));
        assert_eq!(agent.last_contact(at(45)), "last seen 45s ago");
        assert_eq!(agent.last_contact(at(6 * 60 + 59)), "last seen 6m ago");
        assert_eq!(agent.last_contact(at(3 * 3600)), "last seen 3h ago");
        assert_eq!(agent.last_contact(at(3 * 86_400)), "last seen 3d ago");
    }

    #[test]
    fn work_ids_come_from_the_job_and_the_task_kind() {
        let job = JobId("apply-1234".into());
        let run = AgentTask::RunJob {
            job_id: job.clone(),
        };
        let stop = AgentTask::StopJob {
            job_id: job.clone(),
            reason: "superseded".into(),
        };
        assert_eq!(run.work_id(), "run-apply-1234");
        assert_eq!(stop.work_id(), "stop-apply-1234");
        let stored = serde_json::to_value(&stop).unwrap();
        assert_eq!(
            stored,
            serde_json::json!({"kind": "stopJob", "jobId": "apply-1234", "reason": "superseded"})
        );
        let item = AgentWork::new("prod-eu".parse().unwrap(), run, at(0));
        assert!(item.is_free(at(0)));
        let leased = AgentWork {
            leased_until: Some(at(60)),
            ..item
        };
        assert!(!leased.is_free(at(59)));
        assert!(leased.is_free(at(60)));
    }
}
