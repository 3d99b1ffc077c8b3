//! The scheduler Lambda: EventBridge Scheduler, every minute. It enqueues
//! the due instances, then sends the notifications the events recorded
//! since its last run call for (docs/notifications.md).

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use vergence_lambda::{Deployment, init_logging, scheduler};

/// Notifications' share of each run, well inside the function's 60 s
/// timeout; what is left is sent the next minute.
const NOTIFY_WITHIN: Duration = Duration::from_secs(40);

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_logging();
    let deployment = Deployment::from_env().await?;
    let notifier = vergence_notify::http_notifier(
        deployment.state(),
        deployment.artifacts.clone(),
        deployment.clock.clone(),
        Arc::new(vergence_compiler::YamlCompiler),
        std::env::var("VERGENCE_PUBLIC_URL").ok(),
    )?;
    let (deployment, notifier) = (&deployment, &notifier);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent>| async move {
            let report = scheduler::handle(deployment, event.payload).await?;
            vergence_notify::pass_within(notifier, NOTIFY_WITHIN).await;
            Ok::<_, lambda_runtime::Error>(report)
        },
    ))
    .await
}
