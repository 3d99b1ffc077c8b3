//! [`AgentRunner`]: the [`Runner`] port over an agent's work queue. It
//! never waits for the agent: dispatch queues, poll looks at the queue,
//! and results arrive through the agent's reports ([`crate::AgentJobs`]).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tracing::{info, instrument};
use vergence_model::ports::{Availability, Clock, JobProgress, Runner, StateStore};
use vergence_model::{AgentTask, AgentWork, JobHandle, JobRecord, RunnerSpec};

use crate::error::KubernetesError;
use crate::{agent_of, job_name};

/// Runs jobs whose spec says [`RunnerSpec::Kubernetes`] by queueing them
/// for the agent the spec names.
pub struct AgentRunner {
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for AgentRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentRunner").finish_non_exhaustive()
    }
}

impl AgentRunner {
    pub fn new(store: Arc<dyn StateStore>, clock: Arc<dyn Clock>) -> Self {
        Self { store, clock }
    }

    async fn queue(&self, job: &JobRecord) -> Result<JobHandle, KubernetesError> {
        let (agent, spec) = agent_of(job)?;
        let task = AgentTask::RunJob {
            job_id: job.id.clone(),
        };
        let added = self
            .store
            .put_agent_work(&AgentWork::new(agent.clone(), task, self.clock.now()))
            .await
            .map_err(KubernetesError::store("queueing the job for its agent"))?;
        if added {
            info!(%agent, "queued for the agent");
        }
        let namespace = spec.namespace.as_deref().unwrap_or("(the agent's)");
        if let Some(objects) = job
            .spec
            .builtin
            .as_ref()
            .and_then(|b| b.kubernetes_objects())
        {
            return Ok(JobHandle(format!(
                "agent {agent}: {} of {} object(s) from {}",
                job.kind,
                objects.objects.len(),
                objects.source
            )));
        }
        Ok(JobHandle(format!(
            "agent {agent}: Job {namespace}/{}",
            job_name(&job.id)
        )))
    }

    async fn progress(&self, job: &JobRecord) -> Result<JobProgress, KubernetesError> {
        let (agent, _) = agent_of(job)?;
        let queued = self
            .store
            .get_agent_work(&agent, &AgentWork::run_id(&job.id))
            .await
            .map_err(KubernetesError::store("reading the agent's queue"))?;
        // The agent's report removes the item after recording the result;
        // an item gone without a result means the job was lost with
        // whatever held it, which only its deadline can tell for sure.
        Ok(if queued.is_some() {
            JobProgress::Running
        } else {
            JobProgress::Unknown
        })
    }

    async fn queue_stop(&self, job: &JobRecord, reason: &str) -> Result<(), KubernetesError> {
        let (agent, _) = agent_of(job)?;
        let run_id = AgentWork::run_id(&job.id);
        let queued = self
            .store
            .get_agent_work(&agent, &run_id)
            .await
            .map_err(KubernetesError::store("reading the agent's queue"))?;
        if let Some(item) = queued
            && item.deliveries == 0
        {
            // Never handed out: taking it back is the whole stop.
            self.store
                .finish_agent_work(&agent, &run_id)
                .await
                .map_err(KubernetesError::store("taking the job back from the queue"))?;
            return Ok(());
        }
        let task = AgentTask::StopJob {
            job_id: job.id.clone(),
            reason: reason.to_owned(),
        };
        self.store
            .put_agent_work(&AgentWork::new(agent, task, self.clock.now()))
            .await
            .map_err(KubernetesError::store("queueing the stop for the agent"))?;
        Ok(())
    }
}

#[async_trait]
impl Runner for AgentRunner {
    #[instrument(name = "kubernetes.dispatch", skip_all, fields(job = %job.id))]
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        Ok(Some(self.queue(job).await?))
    }

    #[instrument(name = "kubernetes.poll", skip_all, fields(job = %job.id))]
    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(self.progress(job).await?)
    }

    #[instrument(name = "kubernetes.stop", skip_all, fields(job = %job.id))]
    async fn stop(&self, job: &JobRecord, reason: &str) -> vergence_model::Result<()> {
        Ok(self.queue_stop(job, reason).await?)
    }

    async fn availability(&self, spec: &RunnerSpec) -> Availability {
        let RunnerSpec::Kubernetes(spec) = spec else {
            return Availability::Ready;
        };
        let agent = match spec.agent.parse() {
            Ok(agent) => agent,
            Err(reason) => {
                return Availability::Unavailable(format!(
                    "runner.kubernetes.agent {:?} is not a valid agent name: {reason}",
                    spec.agent
                ));
            }
        };
        match self.store.get_agent(&agent).await {
            Ok(Some(state)) if state.is_alive(self.clock.now()) => Availability::Ready,
            Ok(Some(state)) => Availability::Unavailable(format!(
                "agent {agent} {}; jobs wait until it connects again (is vergence-agent running in that cluster?)",
                state.last_contact(self.clock.now())
            )),
            Ok(None) => Availability::Unavailable(format!(
                "agent {agent} has never connected; install vergence-agent in the cluster with a token from `vergence token create --agent {agent}`"
            )),
            Err(e) => Availability::Unavailable(format!(
                "cannot read when agent {agent} last called: {e}"
            )),
        }
    }
}
