//! What Vergence's Lambda functions do, apart from the Lambda runtime
//! itself: how a deployment's clients are built from the environment
//! ([`Deployment`]), one convergence step per SQS message ([`worker`]) and
//! the minute schedule that enqueues due instances ([`scheduler`]). The
//! functions' `main.rs` files only wire these to `lambda_runtime`.

mod deployment;
mod error;
pub mod scheduler;
pub mod worker;

pub use deployment::{AwsClients, Deployment, DeploymentConfig};
pub use error::LambdaError;

/// Sets up JSON logs for CloudWatch, filtered by `RUST_LOG` (default info).
pub fn init_logging() {
    json_logs(std::io::stdout, "info").init();
}

/// JSON log lines that carry the fields of every enclosing span
/// (application, service, release channel, job), so CloudWatch Logs
/// Insights can filter one instance's or one job's lines. `RUST_LOG`
/// overrides `default_filter`.
pub fn json_logs<W>(
    writer: W,
    default_filter: &str,
) -> tracing_subscriber::fmt::SubscriberBuilder<
    tracing_subscriber::fmt::format::JsonFields,
    tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Json, ()>,
    tracing_subscriber::EnvFilter,
    W,
>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(true)
        .without_time()
        .with_writer(writer)
}

/// The HTTP API over a deployment, as the `api` function serves it, with
/// the agent routes (`vergence-agent` long-polls here).
/// `VERGENCE_WEBHOOK_SECRET` (when not empty) makes webhooks require a
/// signature. Configs are checked for the serverless deployment: its
/// worker runs local jobs with no config directory and no container engine.
pub fn api_router(deployment: &Deployment) -> vergence_api::Router {
    let webhook_secret = std::env::var("VERGENCE_WEBHOOK_SECRET")
        .ok()
        .filter(|s| !s.is_empty());
    let config = vergence_api::ApiConfig {
        webhook_secret,
        target: vergence_model::DeploymentTarget::Serverless,
        ..vergence_api::ApiConfig::default()
    };
    let completion = vergence_engine::JobCompletion::new(
        deployment.state(),
        deployment.work(),
        deployment.clock.clone(),
    );
    let agents = vergence_runner_kubernetes::AgentJobs::new(
        deployment.state(),
        deployment.artifacts.clone(),
        std::sync::Arc::new(completion),
        deployment.work(),
        deployment.clock.clone(),
    );
    vergence_api::router(
        vergence_api::ApiState::new(
            std::sync::Arc::new(deployment.control()),
            deployment.state(),
            deployment.clock.clone(),
            config,
        )
        .with_agents(std::sync::Arc::new(agents)),
    )
}
