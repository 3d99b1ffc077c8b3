//! `vergence-agent`: the only part of Vergence that talks to a user's
//! Kubernetes API. It dials out to the Vergence API with its agent's token
//! (no inbound port; Vergence holds no cluster credential), long-polls for
//! tasks — the poll is also its heartbeat and renews the leases of the jobs
//! it runs — runs each job as a Kubernetes Job, watches it to the end and
//! reports how it ended. Deleting the agent stops everything in the cluster.
//!
//! An agent that dies leaves its leases to run out; the tasks are then
//! handed out again (to it, restarted, or to a replacement), and since a
//! Job's name is fixed by its job id the new delivery adopts the running
//! Job instead of starting a second.

mod api;
mod error;
mod job_spec;
pub mod manifests;
mod runs;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{info, warn};
use vergence_model::BuiltinJob;
use vergence_model::JobId;
use vergence_model::agent::protocol::{
    AgentReport, JobEnd, JobFinished, JobStopped, MAX_POLL_WAIT_SECONDS, ManifestsJob,
    ObjectsChanged, PollRequest, RunJob, StopJob, Task, TaskDetails,
};

pub use api::VergenceApi;
pub use error::AgentError;
pub use job_spec::job_for;
pub use runs::{Cluster, MAX_LOG_BYTES, Watched};

/// How long to wait before calling the API again after a failed call.
const RETRY_AFTER: Duration = Duration::from_secs(3);

/// Changes seen within this of each other are reported together.
const CHANGE_BURST: Duration = Duration::from_millis(200);

/// What the agent was started with.
#[derive(Clone)]
pub struct Settings {
    /// The Vergence API, without `/v1`.
    pub api_url: String,
    /// This agent's name (`runner: {kubernetes: {agent: NAME}}`).
    pub agent: String,
    /// A token from `vergence token create --agent NAME`.
    pub token: String,
    /// Where Jobs go when a runtime names no namespace (the agent's own).
    pub namespace: String,
    /// How long finished Jobs stay (`ttlSecondsAfterFinished`). Longer
    /// than a task's lease, so a redelivered task still finds its Job.
    pub job_ttl_seconds: u32,
    /// How long one poll asks the API to wait for work. 0 (the default):
    /// answered at once, and the agent waits `poll_interval` itself, which
    /// costs nothing; a held poll keeps an api function busy (docs/cost.md).
    pub poll_wait_seconds: u64,
    /// Polls start at most this often while there is nothing to do; a
    /// poll that brought tasks is followed by the next at once. Also the
    /// most a job queued for an idle agent waits to be handed out.
    pub poll_interval: Duration,
    /// The cluster's name, as shown in status (informational).
    pub cluster: Option<String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("api_url", &self.api_url)
            .field("agent", &self.agent)
            .field("namespace", &self.namespace)
            .field("job_ttl_seconds", &self.job_ttl_seconds)
            .field("poll_wait_seconds", &self.poll_wait_seconds)
            .field("poll_interval", &self.poll_interval)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// Checks the settings, naming the one at fault.
    pub fn check(&self) -> Result<(), AgentError> {
        vergence_model::check_name(&self.agent).map_err(|message| AgentError::Setting {
            setting: "--agent",
            message,
        })?;
        if !(self.api_url.starts_with("https://") || self.api_url.starts_with("http://")) {
            return Err(AgentError::Setting {
                setting: "--api-url",
                message: format!("{:?} is not an http(s) URL", self.api_url),
            });
        }
        if vergence_model::split_token(&self.token).is_none() {
            return Err(AgentError::Setting {
                setting: "--token",
                message: "not a Vergence token (vgt_<id>_<secret>, from `vergence token create --agent NAME`)".to_owned(),
            });
        }
        Ok(())
    }
}

/// The agent: its API client, its cluster, and the jobs it watches now.
#[derive(Clone)]
pub struct Agent {
    settings: Settings,
    api: VergenceApi,
    cluster: Cluster,
    objects: manifests::Objects,
    /// What the watches of applied objects saw change, until `run` takes it.
    changes: Arc<Mutex<Option<mpsc::UnboundedReceiver<ObjectsChanged>>>>,
    running: Arc<Mutex<BTreeSet<JobId>>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Agent {
    pub fn new(settings: Settings, client: kube::Client) -> Result<Self, AgentError> {
        settings.check()?;
        let api = VergenceApi::new(&settings.api_url, &settings.agent, &settings.token)?;
        let (changed, changes) = mpsc::unbounded_channel();
        let objects = manifests::Objects::new(client.clone(), settings.namespace.clone(), changed);
        let cluster = Cluster {
            client,
            agent: settings.agent.clone(),
            namespace: settings.namespace.clone(),
            job_ttl_seconds: settings.job_ttl_seconds,
        };
        Ok(Self {
            settings,
            api,
            cluster,
            objects,
            changes: Arc::new(Mutex::new(Some(changes))),
            running: Arc::default(),
        })
    }

    /// Polls and carries out tasks until `stop` completes.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        info!(agent = %self.settings.agent, api = %self.settings.api_url, namespace = %self.settings.namespace, "connecting out for work");
        let changes = self
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(changes) = changes {
            let agent = self.clone();
            tokio::spawn(async move { agent.tell_changes(changes).await });
        }
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                resumed = self.resume() => if resumed { break },
            }
        }
        loop {
            tokio::select! {
                () = &mut stop => return,
                () = self.poll_once() => {}
            }
        }
    }

    /// Watches again the Jobs an earlier run of this agent left running, so
    /// their results are reported without waiting for their tasks' leases
    /// to run out. `false` (after a pause) when the cluster cannot be read.
    async fn resume(&self) -> bool {
        match self.cluster.unfinished_jobs().await {
            Ok(jobs) => {
                for watched in jobs {
                    info!(job = %watched.job_id, job_name = %watched.job_name, "watching again a Job an earlier run of this agent started");
                    self.watch(watched, None);
                }
                true
            }
            Err(e) => {
                warn!(error = %e, "cannot list this agent's Jobs; trying again");
                tokio::time::sleep(RETRY_AFTER).await;
                false
            }
        }
    }

    /// Carries out a job (creating its Job first when `run` is given)
    /// unless this agent already watches it.
    fn watch(&self, watched: Watched, run: Option<RunJob>) {
        if self.claim(&watched.job_id) {
            let agent = self.clone();
            tokio::spawn(async move { agent.carry_out(watched, run).await });
        }
    }

    /// Marks a job as carried out by this agent; `false` when it already
    /// is: a task delivered again (its lease ran out during a long poll,
    /// or the agent resumed it) needs nothing more.
    fn claim(&self, job: &JobId) -> bool {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(job.clone())
    }

    async fn poll_once(&self) {
        let started = tokio::time::Instant::now();
        let poll = PollRequest {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            namespace: Some(self.settings.namespace.clone()),
            cluster: self.settings.cluster.clone(),
            running: self.running().into_iter().collect(),
            max_tasks: None,
            wait_seconds: Some(self.settings.poll_wait_seconds.min(MAX_POLL_WAIT_SECONDS)),
        };
        match self.api.poll(&poll).await {
            Ok(answer) => {
                let idle = answer.tasks.is_empty();
                for task in answer.tasks {
                    self.start(task);
                }
                // Nothing to do: the next poll after the interval (a poll
                // held that long by the API goes again at once). Tasks:
                // there may be more, ask again now.
                if idle {
                    tokio::time::sleep_until(started + self.settings.poll_interval).await;
                }
            }
            Err(e) => {
                warn!(error = %e, "polling the Vergence API failed; trying again");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }

    fn running(&self) -> BTreeSet<JobId> {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn start(&self, task: Task) {
        match task.details {
            TaskDetails::RunJob(run) => self.watch(self.cluster.watched(&run), Some(run)),
            TaskDetails::StopJob(stop) => {
                let agent = self.clone();
                tokio::spawn(async move { agent.stop(stop).await });
            }
            TaskDetails::Manifests(job) => {
                if self.claim(&job.job_id) {
                    let agent = self.clone();
                    tokio::spawn(async move { agent.carry_out_manifests(job).await });
                }
            }
            TaskDetails::Unsupported => {
                warn!(work = %task.work_id, "a task of a kind this agent does not know; upgrade vergence-agent");
            }
        }
    }

    /// Runs a job's Kubernetes Job to its end and reports it; transient
    /// failures (the API server or Vergence unreachable) are retried, the
    /// lease kept meanwhile by the polls.
    async fn carry_out(&self, watched: Watched, run: Option<RunJob>) {
        let finished = loop {
            match self.run_to_end(&watched, run.as_ref()).await {
                Ok(finished) => break finished,
                Err(e) if is_permanent(&e) => {
                    warn!(job = %watched.job_id, error = %e, "the job cannot run as a Kubernetes Job");
                    break JobFinished {
                        job_id: watched.job_id.clone(),
                        ended: JobEnd::PlatformFailed {
                            message: e.to_string(),
                        },
                        log: String::new(),
                        log_tail: String::new(),
                        started_at: None,
                        finished_at: jiff::Timestamp::now(),
                    };
                }
                Err(e) => {
                    warn!(job = %watched.job_id, error = %e, "trying again");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        };
        self.report(AgentReport::JobFinished(finished)).await;
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&watched.job_id);
    }

    async fn run_to_end(
        &self,
        watched: &Watched,
        run: Option<&RunJob>,
    ) -> Result<JobFinished, AgentError> {
        if let Some(run) = run {
            self.cluster.ensure_job(run).await?;
        }
        self.cluster.await_end(watched).await
    }

    /// Applies or reads a Kubernetes runtime's objects and reports it as
    /// a job: exit 0 with what was done (apply) or the structured fetch
    /// (fetch); exit 1 with the reason when the cluster refused.
    async fn carry_out_manifests(&self, job: ManifestsJob) {
        let started_at = jiff::Timestamp::now();
        let deadline = Duration::from_secs(job.deadline_seconds);
        let work = async {
            match &job.work {
                BuiltinJob::KubernetesApply(objects) => {
                    self.objects.apply(objects).await.map_err(|e| e.to_string())
                }
                BuiltinJob::KubernetesFetch(objects) => {
                    self.objects.fetch(objects).await.map_err(|e| e.to_string())
                }
                // Vergence hands an agent only its cluster's work; another
                // runtime's job here is a bug worth a clear failure.
                other => Err(format!(
                    "{} runtime jobs are not carried out by vergence-agent",
                    other.platform().map_or("unknown", |p| p.as_str())
                )),
            }
        };
        let (ended, log, log_tail) = match tokio::time::timeout(deadline, work).await {
            Ok(Ok(output)) => (JobEnd::Exited { exit_code: 0 }, output, String::new()),
            Ok(Err(e)) => {
                warn!(job = %job.job_id, error = %e, "the Kubernetes runtime's job failed");
                (
                    JobEnd::Exited { exit_code: 1 },
                    String::new(),
                    e.to_string(),
                )
            }
            Err(_) => (JobEnd::TimedOut, String::new(), String::new()),
        };
        self.report(AgentReport::JobFinished(JobFinished {
            job_id: job.job_id.clone(),
            ended,
            log,
            log_tail,
            started_at: Some(started_at),
            finished_at: jiff::Timestamp::now(),
        }))
        .await;
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&job.job_id);
    }

    /// Tells Vergence what the watches saw change, a burst at a time: one
    /// report per instance, however many of its objects moved.
    async fn tell_changes(&self, mut changes: mpsc::UnboundedReceiver<ObjectsChanged>) {
        while let Some(first) = changes.recv().await {
            tokio::time::sleep(CHANGE_BURST).await;
            let mut by_instance: std::collections::BTreeMap<(String, String, String), Vec<String>> =
                std::collections::BTreeMap::new();
            let mut burst = vec![first];
            while let Ok(more) = changes.try_recv() {
                burst.push(more);
            }
            for change in burst {
                let key = (change.application, change.service, change.release_channel);
                by_instance.entry(key).or_default().extend(change.changes);
            }
            for ((application, service, release_channel), changes) in by_instance {
                info!(%application, %service, %release_channel, ?changes, "objects changed in the cluster");
                let report = AgentReport::ObjectsChanged(ObjectsChanged {
                    application,
                    service,
                    release_channel,
                    changes,
                });
                let agent = self.clone();
                tokio::spawn(async move { agent.report(report).await });
            }
        }
    }

    async fn stop(&self, stop: StopJob) {
        loop {
            match self
                .cluster
                .stop(stop.namespace.as_deref(), &stop.job_name)
                .await
            {
                Ok(()) => break,
                Err(e) => {
                    warn!(job = %stop.job_id, error = %e, "cannot delete the Job yet; trying again");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
        info!(job = %stop.job_id, reason = %stop.reason, "stopped");
        self.report(AgentReport::JobStopped(JobStopped {
            job_id: stop.job_id,
        }))
        .await;
    }

    /// Reports until Vergence has it (a refusal other than "unavailable"
    /// is final: Vergence knows the job no more, or not as this agent's).
    async fn report(&self, report: AgentReport) {
        loop {
            match self.api.report(&report).await {
                Ok(answer) => {
                    info!(about = %report.subject(), recorded = answer.recorded, "reported");
                    return;
                }
                Err(AgentError::Refused { status, body, .. }) if status < 500 && status != 429 => {
                    warn!(about = %report.subject(), status, %body, "the report was refused; dropping it");
                    return;
                }
                Err(e) => {
                    warn!(about = %report.subject(), error = %e, "reporting failed; trying again");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }
}

/// Errors that trying again cannot fix: the cluster refused the Job as
/// given (invalid, forbidden, a missing namespace), or its name is taken.
fn is_permanent(error: &AgentError) -> bool {
    match error {
        AgentError::NameTaken { .. } | AgentError::BuildJob { .. } => true,
        AgentError::Kube {
            operation: "creating",
            source: kube::Error::Api(status),
            ..
        } => matches!(status.code, 400 | 403 | 404 | 422),
        _ => false,
    }
}
