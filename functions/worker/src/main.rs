//! The worker Lambda: SQS-triggered, one convergence step per message.

use std::time::{Duration, Instant, SystemTime};

use lambda_runtime::{LambdaEvent, service_fn};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_lambda::{Deployment, init_logging};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_logging();
    let worker = Worker::new(Deployment::from_env().await?, WorkerConfig::from_env()?);
    // A timeout that leaves local jobs no time is a broken stack: say so
    // at once rather than with the first local job.
    worker.local_job_limit()?;
    let worker = &worker;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        // The context's deadline is wall-clock milliseconds; steps measure
        // with a monotonic clock.
        let left = Duration::from_millis(event.context.deadline)
            .checked_sub(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH)?)
            .unwrap_or_default();
        let deadline = Instant::now() + left;
        Ok::<_, lambda_runtime::Error>(worker.handle(event.payload, Some(deadline)).await)
    }))
    .await
}
