//! The scheduler: every minute, the instances whose `next_check_at` has
//! come go to the work queue (the due index makes this cost O(due)); then
//! one pass of the notifier sends what the events recorded since the last
//! run call for (docs/notifications.md).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;
use vergence_engine::enqueue_due;
use vergence_notify::Notifier;

use crate::{Deployment, LambdaError};

/// Most instances enqueued per run; the rest are still due next minute.
pub const MAX_PER_RUN: usize = 10_000;

/// Notifications' share of each run, well inside the function's 60 s
/// timeout; what is left is sent the next minute.
pub const NOTIFY_WITHIN: Duration = Duration::from_secs(40);

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleReport {
    pub enqueued: usize,
    /// Messages delivered by this run's notifier pass.
    pub notifications_delivered: usize,
    /// Messages given up on (recorded as `notificationFailed` events).
    pub notifications_given_up: usize,
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
    Ok(ScheduleReport {
        enqueued,
        ..ScheduleReport::default()
    })
}

/// What the scheduler function does each minute: enqueue, then notify.
#[allow(missing_debug_implementations)] // holds SDK clients behind trait objects
pub struct Scheduler {
    deployment: Deployment,
    notifier: Notifier,
}

impl Scheduler {
    /// With the notifier the function runs: over HTTP, its cursor in the
    /// artifact bucket, secrets from its environment or, for
    /// `awsSsmParameter` and `awsSecretsManager`, from AWS when sending
    /// ([`Deployment::notification_secrets`]). `public_url` is where the
    /// status pages are, for the messages' links.
    pub fn new(deployment: Deployment, public_url: Option<String>) -> Result<Self, LambdaError> {
        let notifier = vergence_notify::http_notifier(
            deployment.state(),
            deployment.artifacts.clone(),
            deployment.clock.clone(),
            Arc::new(vergence_compiler::YamlCompiler),
            public_url,
            deployment.notification_secrets.clone(),
        )?;
        Ok(Self {
            deployment,
            notifier,
        })
    }

    /// Enqueues the due instances, then makes one notifier pass of at most
    /// [`NOTIFY_WITHIN`]. Notifications never fail the run: what could not
    /// be sent is logged, recorded or left for the next minute.
    pub async fn handle(
        &self,
        event: aws_lambda_events::event::eventbridge::EventBridgeEvent,
    ) -> vergence_model::Result<ScheduleReport> {
        let mut report = handle(&self.deployment, event).await?;
        if let Some(pass) = vergence_notify::pass_within(&self.notifier, NOTIFY_WITHIN).await {
            report.notifications_delivered = pass.delivered;
            report.notifications_given_up = pass.given_up;
        }
        Ok(report)
    }
}
