//! `runner: kubernetes` on the Vergence side. Jobs run as Kubernetes Jobs
//! created by `vergence-agent` inside the user's cluster; Vergence never
//! talks to the cluster. So this crate holds no Kubernetes client:
//!
//! - [`AgentRunner`] is the engine's [`Runner`](vergence_model::ports::Runner):
//!   dispatching a job queues a task for the agent the runtime names,
//!   stopping one queues a stop, and an agent that has gone quiet makes the
//!   runner unavailable, so the instance waits with "agent prod-eu last
//!   seen 6m ago" instead of failing attempts.
//! - [`AgentJobs`] is the API's [`AgentDesk`](vergence_model::ports::AgentDesk):
//!   it records the agent's heartbeat, leases it tasks (with the job's whole
//!   launch: image, command, environment, secret references), and turns its
//!   reports into job results, recorded once.

mod desk;
mod error;
mod runner;

use std::collections::BTreeMap;

use vergence_model::agent::protocol::labels;
use vergence_model::{AgentName, JobId, JobRecord, KubernetesRunnerSpec, RunnerSpec};

pub use desk::AgentJobs;
pub use error::KubernetesError;
pub use runner::AgentRunner;

/// The Kubernetes runner settings of a job.
fn kubernetes_spec(job: &JobRecord) -> Result<&KubernetesRunnerSpec, KubernetesError> {
    match &job.spec.runner {
        RunnerSpec::Kubernetes(spec) => Ok(spec),
        other => Err(KubernetesError::WrongRunner {
            job: job.id.to_string(),
            runner: other.name(),
        }),
    }
}

/// The agent that runs `job`, and its runner settings.
fn agent_of(job: &JobRecord) -> Result<(AgentName, &KubernetesRunnerSpec), KubernetesError> {
    let spec = kubernetes_spec(job)?;
    let agent = spec
        .agent
        .parse()
        .map_err(|reason| KubernetesError::AgentName {
            job: job.id.to_string(),
            agent: spec.agent.clone(),
            reason,
        })?;
    Ok((agent, spec))
}

/// The Kubernetes Job's name: fixed by the job id, so a task delivered
/// twice (an agent that died and came back) finds the Job of the first
/// delivery (409 on create) instead of starting a second.
pub fn job_name(job: &JobId) -> String {
    // Job ids are `<kind>-<20 hex>`, already a DNS-1123 label; anything
    // else is kept to the characters a label allows.
    let cleaned: String = job
        .as_str()
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let mut name = format!("vergence-{cleaned}");
    // 63 is the label limit; the Job controller adds `-xxxxx` for pods.
    name.truncate(57);
    name.trim_end_matches('-').to_owned()
}

/// Labels on a job's Kubernetes Job and pod: whose it is, for `kubectl get
/// jobs -l` and for the agent to find its own Jobs again.
fn job_labels(job: &JobRecord, agent: &AgentName) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED_BY.to_owned(), "vergence-agent".to_owned()),
        (labels::AGENT.to_owned(), agent.to_string()),
        (labels::JOB_ID.to_owned(), job.id.to_string()),
        (
            labels::APPLICATION.to_owned(),
            job.instance.application.to_string(),
        ),
        (labels::SERVICE.to_owned(), job.instance.service.to_string()),
        (
            labels::RELEASE_CHANNEL.to_owned(),
            job.instance.release_channel.to_string(),
        ),
        (
            labels::JOB_KIND.to_owned(),
            job.kind.as_str().to_lowercase(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_come_from_the_job_id_and_are_dns_labels() {
        assert_eq!(
            job_name(&JobId("apply-0123456789abcdef0123".into())),
            "vergence-apply-0123456789abcdef0123"
        );
        let odd = job_name(&JobId(format!("Fetch_{}", "x".repeat(80)).into()));
        assert!(odd.len() <= 57, "{odd}");
        assert!(odd.starts_with("vergence-fetch-xxx"), "{odd}");
    }
}
