//! The scheduler: every minute, the instances whose `next_check_at` has
//! come go to the work queue. The due index makes this cost O(due).

use tracing::info;
use vergence_engine::enqueue_due;

use crate::Deployment;

/// Most instances enqueued per run; the rest are still due next minute.
pub const MAX_PER_RUN: usize = 10_000;

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleReport {
    pub enqueued: usize,
}

/// Handles one EventBridge Scheduler invocation: enqueues every due
/// instance. The event carries nothing the run needs beyond its arrival.
pub async fn handle(
    deployment: &Deployment,
    event: aws_lambda_events::event::eventbridge::EventBridgeEvent,
) -> vergence_model::Result<ScheduleReport> {
    info!(source = %event.source, detail_type = %event.detail_type, "schedule fired");
    run(deployment).await
}

/// Enqueues every due instance.
pub async fn run(deployment: &Deployment) -> vergence_model::Result<ScheduleReport> {
    let now = deployment.clock.now();
    let state = deployment.state();
    let work = deployment.work();
    let enqueued = enqueue_due(state.as_ref(), work.as_ref(), now, MAX_PER_RUN).await?;
    info!(enqueued, "scheduled due instances");
    Ok(ScheduleReport { enqueued })
}
