//! The notifier beside `vergence up` and `vergence serve`: a task that
//! makes a pass every few seconds, on its own, so no step waits for a
//! message; and one last pass when the command ends, within a time limit.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;
use vergence_model::notification::SecretReader;

use crate::Notifier;

/// The running notifier task.
#[derive(Debug)]
pub struct Background {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Starts passes of `notifier` every `every`, the first at once.
pub fn spawn(notifier: Arc<Notifier>, every: Duration) -> Background {
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            // Read before the pass: a stop that comes during a pass gets
            // one more, which sees what was recorded until the stop.
            let last = *stopped.borrow();
            if let Err(e) = notifier.pass().await {
                warn!("notifications: {e}; trying again in {every:?}");
            }
            if last {
                return;
            }
            tokio::select! {
                changed = stopped.changed() => {
                    // The handle was dropped without `finish`: abandoned.
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep(every) => {}
            }
        }
    });
    Background { stop, task }
}

impl Background {
    /// Makes a last pass, so what the command recorded is sent before it
    /// exits, and waits for it at most `limit`. Returns whether it
    /// finished; if not, the next run sends what is left (the cursor only
    /// moves past what was delivered).
    pub async fn finish(self, limit: Duration) -> bool {
        self.stop.send_replace(true);
        let mut task = self.task;
        match tokio::time::timeout(limit, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                task.abort();
                false
            }
        }
    }
}

/// How often the notifier beside `up` and `serve` looks for new events.
pub const LOCAL_PASS_EVERY: Duration = Duration::from_secs(1);

/// A notifier that sends over HTTP and keeps its cursor in `artifacts`:
/// what `vergence up`/`serve` and the scheduler function run. `secrets`
/// reads the `awsSsmParameter` and `awsSecretsManager` references of
/// targets (the AWS SDK's reader, or [`crate::NoCloudSecrets`] in a
/// process without it).
pub fn http_notifier(
    store: Arc<dyn vergence_model::ports::StateStore>,
    artifacts: Arc<dyn vergence_model::ports::ArtifactStore>,
    clock: Arc<dyn vergence_model::ports::Clock>,
    compiler: Arc<dyn vergence_model::ports::Compiler>,
    public_url: Option<String>,
    secrets: Arc<dyn SecretReader>,
) -> Result<Notifier, crate::NotifyError> {
    if let Some(url) = &public_url {
        let valid = ["http://", "https://"].iter().any(|scheme| {
            url.strip_prefix(scheme)
                .is_some_and(|rest| !rest.is_empty())
        });
        if !valid {
            return Err(crate::NotifyError::PublicUrl { url: url.clone() });
        }
    }
    Ok(Notifier::new(
        store,
        compiler,
        Arc::new(crate::HttpSender::new()?.with_secrets(secrets)),
        Arc::new(crate::ArtifactCursorStore::new(artifacts)),
        clock,
    )
    .with_public_url(public_url))
}

/// One pass, given at most `limit` (a scheduled function's share of its
/// timeout). What it had no time for is sent by the next pass: the cursor
/// only moves past what was handled. Failures are logged, never returned:
/// notifications never fail what runs them.
pub async fn pass_within(notifier: &Notifier, limit: Duration) -> Option<crate::PassReport> {
    match tokio::time::timeout(limit, notifier.pass()).await {
        Ok(Ok(report)) => {
            tracing::info!(
                delivered = report.delivered,
                given_up = report.given_up,
                "notifications sent"
            );
            Some(report)
        }
        Ok(Err(e)) => {
            warn!("notifications: {e}; the next pass tries again");
            None
        }
        Err(_) => {
            warn!(
                "notifications: the pass took longer than {limit:?}; the next one sends the rest"
            );
            None
        }
    }
}

/// The notifier of a local deployment (`vergence up`, `vergence serve`):
/// sends over HTTP, keeps its cursor in the artifact directory, and runs
/// in the background until [`Background::finish`].
pub fn spawn_local(
    store: Arc<dyn vergence_model::ports::StateStore>,
    artifacts: Arc<dyn vergence_model::ports::ArtifactStore>,
    clock: Arc<dyn vergence_model::ports::Clock>,
    compiler: Arc<dyn vergence_model::ports::Compiler>,
    public_url: Option<String>,
    secrets: Arc<dyn SecretReader>,
) -> Result<Background, crate::NotifyError> {
    let notifier = http_notifier(store, artifacts, clock, compiler, public_url, secrets)?;
    Ok(spawn(Arc::new(notifier), LOCAL_PASS_EVERY))
}
