//! The one error type of the agent-backed Kubernetes runner, and its
//! conversion to the core's error at the port.

use vergence_model::RunnerKind;

/// What went wrong queueing work for an agent or taking its report.
#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    /// A job whose runner is not Kubernetes was handed to this runner.
    #[error("job {job} names the {runner} runner, not kubernetes")]
    WrongRunner { job: String, runner: &'static str },

    /// The runner block names an agent that is not a valid name.
    #[error("job {job}: runner.kubernetes.agent {agent:?} is not a valid agent name: {reason}")]
    AgentName {
        job: String,
        agent: String,
        reason: String,
    },

    /// A secret variable whose source a Kubernetes Job cannot read.
    #[error(
        "secret variable {variable}: the kubernetes runner reads only Kubernetes Secrets (secret: {{kubernetesSecret: {{name, key}}}}), not {source_described}"
    )]
    Secret {
        variable: String,
        source_described: String,
    },

    /// A store call (the agent's queue, the job records, artifacts) failed.
    #[error("{operation}: {source}")]
    Store {
        operation: &'static str,
        #[source]
        source: vergence_model::Error,
    },
}

impl KubernetesError {
    pub(crate) fn store(operation: &'static str) -> impl FnOnce(vergence_model::Error) -> Self {
        move |source| KubernetesError::Store { operation, source }
    }
}

impl From<KubernetesError> for vergence_model::Error {
    fn from(error: KubernetesError) -> Self {
        match error {
            // A store error keeps its own kind, so retrying stays possible.
            KubernetesError::Store { source, .. } => source,
            other => vergence_model::Error::Runner {
                runner: RunnerKind::Kubernetes.as_str().to_owned(),
                message: other.to_string(),
            },
        }
    }
}
