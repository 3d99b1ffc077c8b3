//! The scheduler Lambda: EventBridge Scheduler, every minute. It enqueues
//! the due instances, then sends the notifications the events recorded
//! since its last run call for (docs/notifications.md).

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use vergence_lambda::scheduler::Scheduler;
use vergence_lambda::{Deployment, init_logging};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_logging();
    let scheduler = Scheduler::new(
        Deployment::from_env().await?,
        std::env::var("VERGENCE_PUBLIC_URL").ok(),
    )?;
    let scheduler = &scheduler;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent>| async move {
            Ok::<_, lambda_runtime::Error>(scheduler.handle(event.payload).await?)
        },
    ))
    .await
}
