//! What Vergence's Lambda functions do, apart from the Lambda runtime
//! itself: how a deployment's clients are built from the environment
//! ([`Deployment`]), one convergence step per SQS message ([`worker`]) and
//! the minute schedule that enqueues due instances ([`scheduler`]). The
//! functions' `main.rs` files only wire these to `lambda_runtime`.

mod deployment;
mod error;
pub mod scheduler;
pub mod worker;

pub use deployment::{Deployment, DeploymentConfig};
pub use error::LambdaError;

/// Sets up JSON logs for CloudWatch, filtered by `RUST_LOG` (default info).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .without_time()
        .init();
}

/// The HTTP API over a deployment, as the `api` function serves it.
/// `VERGENCE_WEBHOOK_SECRET` (when not empty) makes webhooks require a
/// signature.
pub fn api_router(deployment: &Deployment) -> vergence_api::Router {
    let webhook_secret = std::env::var("VERGENCE_WEBHOOK_SECRET")
        .ok()
        .filter(|s| !s.is_empty());
    let config = vergence_api::ApiConfig {
        webhook_secret,
        ..vergence_api::ApiConfig::default()
    };
    vergence_api::router(vergence_api::ApiState::new(
        std::sync::Arc::new(deployment.control()),
        deployment.state(),
        deployment.clock.clone(),
        config,
    ))
}
