//! The engine run in this process over the local state: the driver with
//! this machine's runners, the notifier beside it, and `up`'s run of them
//! until nothing can move (or until stopped).

use std::sync::Arc;

use vergence_embedded::{DriveMode, Driver};
use vergence_engine::{Engine, JobCompletion};
use vergence_model::RunnerKind;
use vergence_runner_kubernetes::AgentRunner;
use vergence_runner_local::{HeldResults, LocalRunner};

use super::Local;
use crate::args::RunnerArgs;
use crate::backend::{Converge, Converged, Result};
use crate::shutdown::{self, Signals};

/// How long a command that ends waits for its last notifications.
const NOTIFY_ON_EXIT: std::time::Duration = std::time::Duration::from_secs(5);

/// `vergence up` on the local state: runs the engine until every instance
/// is settled (or, with `watch`, until a signal), the jobs on this machine.
pub async fn converge(local: &Local, how: Converge<'_>) -> Result<Converged> {
    let notifier = start_notifier(local, local.public_url.clone())?;
    let (driver, local_runner) = local_driver(local, how.runners, "`vergence up`", false);
    let mode = if how.watch {
        DriveMode::Forever
    } else {
        DriveMode::UntilSettled
    };
    let mut signals = Signals::install()?;
    // What an earlier process ran but could not record, before any step
    // takes its job for lost.
    local_runner.recover_held().await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let shutdown = async {
        let stop = signals.next().await;
        let _ = stop_tx.send(stop);
    };
    let driven = driver.run(mode, how.progress.clone(), shutdown).await;
    how.progress.finish();
    if let Err(e) = driven {
        // No job is left running unwatched behind an error.
        local_runner.close("`vergence up` stopped on an error before the job started");
        local_runner
            .stop_all(&format!("`vergence up` stopped on an error: {e}"))
            .await;
        for said in local_runner.flush_held().await {
            eprintln!("{said}");
        }
        return Err(e.into());
    }
    let stopped = match stop_rx.await {
        Ok(stop) => {
            let said = shutdown::wind_down(
                &local_runner,
                local.store.as_ref(),
                stop,
                &mut signals,
                "`vergence up`",
            )
            .await;
            Some((stop, said))
        }
        Err(_) => None,
    };
    finish_notifier(notifier).await;
    if stopped.is_none() {
        let held = local_runner.flush_held().await;
        if !held.is_empty() {
            return Err(anyhow::anyhow!(held.join("\n")));
        }
    }
    Ok(Converged {
        stopped,
        timed_out: None,
    })
}

/// The engine loop over the local state, with this machine's runners;
/// `deployment` names the command, for reasons. With `agents` (a server
/// agents can call), Kubernetes jobs go to the agents' queues.
pub fn local_driver(
    local: &Local,
    runners: &RunnerArgs,
    deployment: &str,
    agents: bool,
) -> (Driver, Arc<LocalRunner>) {
    let max_jobs = runners.max_jobs;
    let sink = Arc::new(JobCompletion::new(
        local.store.clone(),
        local.queue.clone(),
        local.clock.clone(),
    ));
    let local_runner = Arc::new(
        LocalRunner::new(sink.clone(), local.artifacts.clone(), max_jobs)
            .with_container_engine(runners.container_engine)
            .with_held_results(HeldResults::for_state(&local.state_path)),
    );
    let mut router = crate::runners::router(
        runners,
        deployment,
        local_runner.clone(),
        local.artifacts.clone(),
        sink,
    );
    if agents {
        router = router.with(
            RunnerKind::Kubernetes,
            Arc::new(AgentRunner::new(local.store.clone(), local.clock.clone())),
        );
    }
    let engine = Engine::new(
        local.store.clone(),
        local.queue.clone(),
        router,
        local.clock.clone(),
    )
    .with_artifacts(local.artifacts.clone());
    let driver = Driver::new(
        engine,
        local.store.clone(),
        local.queue.clone(),
        local.clock.clone(),
        max_jobs.max(4),
    )
    .with_artifacts(local.artifacts.clone());
    (driver, local_runner)
}

/// Delivers notifications beside the engine, never in its way
/// (docs/notifications.md).
pub fn start_notifier(
    local: &Local,
    public_url: Option<String>,
) -> Result<vergence_notify::Background> {
    Ok(vergence_notify::spawn_local(
        local.store.clone(),
        local.artifacts.clone(),
        local.clock.clone(),
        Arc::new(vergence_compiler::YamlCompiler),
        public_url,
        notification_secrets(),
    )?)
}

/// Where notifications' `awsSsmParameter` and `awsSecretsManager` secrets
/// are read: with this process's AWS credentials, loaded when one is first
/// needed.
#[cfg(feature = "aws")]
fn notification_secrets() -> Arc<dyn vergence_model::notification::SecretReader> {
    Arc::new(vergence_aws::AwsSecretReader::from_environment())
}

/// A build without the AWS SDK says so for every AWS secret.
#[cfg(not(feature = "aws"))]
fn notification_secrets() -> Arc<dyn vergence_model::notification::SecretReader> {
    Arc::new(vergence_notify::NoCloudSecrets::new(
        "this vergence was built without its `aws` feature, which reads AWS secrets: use a \
         build with it (the default), or {fromEnv: VARIABLE}",
    ))
}

pub async fn finish_notifier(notifier: vergence_notify::Background) {
    if !notifier.finish(NOTIFY_ON_EXIT).await {
        eprintln!(
            "warning: notifications not sent within {}s (a receiver is slow or down) are left for the next `vergence up` or `vergence serve`",
            NOTIFY_ON_EXIT.as_secs()
        );
    }
}
