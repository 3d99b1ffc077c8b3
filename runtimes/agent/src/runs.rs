//! One task's Kubernetes Job, from creation to the report of how it ended.
//!
//! The Job's name is fixed by the job id, so a task delivered again (this
//! agent restarted, or another took over after its lease ran out) finds the
//! Job of the first delivery: create answers 409, and the agent watches the
//! Job that exists instead of starting a second.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use tracing::{info, warn};
use vergence_model::JobId;
use vergence_model::agent::protocol::{JobEnd, JobFinished, RunJob, labels};

use crate::error::AgentError;
use crate::job_spec::{CONTAINER, job_for};

/// The most of a pod's log reported as the job's output (structured fetch
/// and getInfo read it); the same bound as every runner's stdout.
pub const MAX_LOG_BYTES: usize = 1024 * 1024;
/// The end of the log kept for failure reasons.
const LOG_TAIL_BYTES: usize = 4096;
/// How often a running Job's pod is checked for a state it cannot leave by
/// itself (an image that never pulls, a missing Secret).
const STUCK_CHECK_EVERY: Duration = Duration::from_secs(5);
/// Waiting reasons a pod does not recover from without a change.
const STUCK_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// A job's Kubernetes Job being watched to its end.
#[derive(Clone, Debug)]
pub struct Watched {
    pub job_id: JobId,
    pub namespace: String,
    pub job_name: String,
}

/// The cluster as one task needs it.
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
    pub agent: String,
    /// Where Jobs go when the task names no namespace.
    pub namespace: String,
    pub job_ttl_seconds: u32,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("agent", &self.agent)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    fn namespace_of<'a>(&'a self, requested: Option<&'a str>) -> &'a str {
        requested.unwrap_or(&self.namespace)
    }

    /// What to watch for a task.
    pub fn watched(&self, run: &RunJob) -> Watched {
        Watched {
            job_id: run.job_id.clone(),
            namespace: self.namespace_of(run.namespace.as_deref()).to_owned(),
            job_name: run.job_name.clone(),
        }
    }

    /// Creates the task's Job, or adopts the one a previous delivery made.
    pub async fn ensure_job(&self, run: &RunJob) -> Result<(), AgentError> {
        let namespace = self.namespace_of(run.namespace.as_deref());
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let job = job_for(run, &self.agent, namespace, self.job_ttl_seconds)?;
        let object = format!("Job {namespace}/{}", run.job_name);
        let created = jobs
            .create(&PostParams::default(), &job)
            .await
            .map_err(AgentError::kube("creating", object.clone()));
        match created {
            Ok(_) => {
                info!(job = %run.job_id, %object, "created");
                Ok(())
            }
            Err(e) if e.is_status(409) => {
                let existing = jobs
                    .get(&run.job_name)
                    .await
                    .map_err(AgentError::kube("reading", object.clone()))?;
                let owner = existing
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::JOB_ID))
                    .cloned();
                if owner.as_deref() != Some(run.job_id.as_str()) {
                    return Err(AgentError::NameTaken {
                        namespace: namespace.to_owned(),
                        name: run.job_name.clone(),
                        expected: run.job_id.to_string(),
                        found: owner,
                    });
                }
                info!(job = %run.job_id, %object, "the Job exists already (an earlier delivery); adopting it");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The Jobs of this agent in its own namespace that have not ended:
    /// what a restarted agent watches again at once, before their tasks'
    /// leases run out.
    pub async fn unfinished_jobs(&self) -> Result<Vec<Watched>, AgentError> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!("{}={}", labels::AGENT, self.agent);
        let listed = jobs
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(AgentError::kube(
                "listing the Jobs of agent",
                self.agent.clone(),
            ))?;
        Ok(listed
            .items
            .iter()
            .filter(|job| !is_finished(job))
            .filter_map(|job| {
                let job_id = job.metadata.labels.as_ref()?.get(labels::JOB_ID)?;
                Some(Watched {
                    job_id: JobId(job_id.clone().into()),
                    namespace: self.namespace.clone(),
                    job_name: job.metadata.name.clone()?,
                })
            })
            .collect())
    }

    /// Waits until the Job ended (or is gone) and reads how.
    pub async fn await_end(&self, watched: &Watched) -> Result<JobFinished, AgentError> {
        let namespace = watched.namespace.as_str();
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        let ended = await_condition(jobs.clone(), &watched.job_name, |job: Option<&Job>| {
            job.is_none_or(is_finished)
        });
        let stuck = self.stuck(namespace, &watched.job_name);
        tokio::select! {
            ended = ended => {
                let job = ended.map_err(|source| AgentError::Watch {
                    job: watched.job_name.clone(),
                    source,
                })?;
                self.finished(watched, job.as_ref()).await
            }
            reason = stuck => {
                // The Job would only end at its deadline: end it now.
                self.delete(namespace, &watched.job_name).await?;
                Ok(JobFinished {
                    job_id: watched.job_id.clone(),
                    ended: JobEnd::PlatformFailed { message: reason },
                    log: String::new(),
                    log_tail: String::new(),
                    started_at: None,
                    finished_at: Timestamp::now(),
                })
            }
        }
    }

    /// Completes with why when the Job's pod is stuck; never otherwise.
    async fn stuck(&self, namespace: &str, job_name: &str) -> String {
        loop {
            tokio::time::sleep(STUCK_CHECK_EVERY).await;
            if let Ok(Some(pod)) = self.latest_pod(namespace, job_name).await
                && let Some(reason) = stuck_reason(&pod)
            {
                return reason;
            }
        }
    }

    /// Deletes the task's Job and its pod; one already gone is fine.
    pub async fn delete(&self, namespace: &str, job_name: &str) -> Result<(), AgentError> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
        match jobs
            .delete(job_name, &DeleteParams::background())
            .await
            .map_err(AgentError::kube(
                "deleting",
                format!("Job {namespace}/{job_name}"),
            )) {
            Ok(_) => Ok(()),
            Err(e) if e.is_status(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes a stopped task's Job.
    pub async fn stop(&self, namespace: Option<&str>, job_name: &str) -> Result<(), AgentError> {
        let namespace = self.namespace_of(namespace).to_owned();
        self.delete(&namespace, job_name).await
    }

    async fn latest_pod(&self, namespace: &str, job_name: &str) -> Result<Option<Pod>, AgentError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let listed = pods
            .list(&ListParams::default().labels(&format!("job-name={job_name}")))
            .await
            .map_err(AgentError::kube(
                "listing the pods of",
                format!("Job {namespace}/{job_name}"),
            ))?;
        Ok(listed
            .items
            .into_iter()
            .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0)))
    }

    /// How the Job ended, with its pod's log.
    async fn finished(
        &self,
        watched: &Watched,
        job: Option<&Job>,
    ) -> Result<JobFinished, AgentError> {
        let namespace = watched.namespace.as_str();
        let pod = self.latest_pod(namespace, &watched.job_name).await?;
        let ended = match job {
            None => JobEnd::Stopped {
                reason: "its Kubernetes Job was deleted before it ended".to_owned(),
            },
            Some(job) => end_of(job, pod.as_ref()),
        };
        let (log, log_tail) = match &pod {
            Some(pod) => self.logs(namespace, pod).await,
            None => (String::new(), String::new()),
        };
        let status = job.and_then(|j| j.status.as_ref());
        Ok(JobFinished {
            job_id: watched.job_id.clone(),
            ended,
            log,
            log_tail,
            started_at: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            finished_at: status
                .and_then(|s| s.completion_time.as_ref())
                .map_or_else(Timestamp::now, |t| t.0),
        })
    }

    /// The head of the pod's log (bounded) and its tail. A log that cannot
    /// be read (the pod is already gone) is reported empty, not as an error:
    /// the exit code is what decides.
    async fn logs(&self, namespace: &str, pod: &Pod) -> (String, String) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let head = LogParams {
            container: Some(CONTAINER.to_owned()),
            limit_bytes: i64::try_from(MAX_LOG_BYTES).ok(),
            ..LogParams::default()
        };
        let tail = LogParams {
            container: Some(CONTAINER.to_owned()),
            tail_lines: Some(200),
            ..LogParams::default()
        };
        let read = async |params: &LogParams| match pods.logs(&name, params).await {
            Ok(text) => text,
            Err(e) => {
                warn!(pod = %name, error = %e, "cannot read the pod's log");
                String::new()
            }
        };
        let log = read(&head).await;
        let log_tail = last_bytes(&read(&tail).await, LOG_TAIL_BYTES);
        (log, log_tail)
    }
}

/// Whether a Job has a Complete or Failed condition.
fn is_finished(job: &Job) -> bool {
    finished_condition(job).is_some()
}

fn finished_condition(job: &Job) -> Option<&k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// How a finished Job ended: its container's exit code when it ran, its
/// deadline, or the cluster's reason.
fn end_of(job: &Job, pod: Option<&Pod>) -> JobEnd {
    let condition = finished_condition(job);
    if condition.and_then(|c| c.reason.as_deref()) == Some("DeadlineExceeded") {
        return JobEnd::TimedOut;
    }
    let terminated = pod
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    if let Some(terminated) = terminated {
        return JobEnd::Exited {
            exit_code: terminated.exit_code,
        };
    }
    let message = pod
        .and_then(stuck_reason)
        .or_else(|| {
            condition.map(|c| {
                format!(
                    "{}: {}",
                    c.reason.as_deref().unwrap_or("Failed"),
                    c.message.as_deref().unwrap_or("the Job failed")
                )
            })
        })
        .unwrap_or_else(|| "the Job ended without its container running".to_owned());
    JobEnd::PlatformFailed { message }
}

/// Why a pod's container cannot start, if it is stuck waiting.
fn stuck_reason(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        STUCK_REASONS.contains(&reason).then(|| {
            format!(
                "pod {}: {reason}: {}",
                pod.metadata.name.as_deref().unwrap_or("?"),
                waiting.message.as_deref().unwrap_or("")
            )
        })
    })
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn last_bytes(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}
