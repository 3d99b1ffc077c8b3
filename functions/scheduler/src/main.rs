//! The scheduler Lambda: EventBridge Scheduler, every minute.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, service_fn};
use vergence_lambda::{Deployment, init_logging, scheduler};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_logging();
    let deployment = Deployment::from_env().await?;
    let deployment = &deployment;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent>| async move {
            Ok::<_, lambda_runtime::Error>(scheduler::handle(deployment, event.payload).await?)
        },
    ))
    .await
}
