//! How `vergence up` and `vergence serve` end on a signal, and what they
//! say about the jobs they were running: nothing is left behind unrecorded.
//!
//! - Ctrl-C (SIGINT) stops new work and lets the jobs already running
//!   finish, recording their results; a second Ctrl-C stops them.
//! - SIGTERM (a CI cancel, systemd, `timeout`, Kubernetes) stops them at
//!   once: such senders follow up with SIGKILL after a short grace, and a
//!   job killed with its parent would be recorded as running for good.
//!
//! A stopped job is recorded as stopped; the next `vergence up` runs it
//! again.

use anyhow::{Context, Result};
use tokio::signal::unix::{Signal, SignalKind, signal};
use vergence_model::ports::StateStore;
use vergence_runner_local::LocalRunner;

/// Which signal asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Interrupt,
    Terminate,
}

impl Stop {
    fn name(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
        }
    }

    /// The exit code of a command ended by this signal (128 + its number).
    pub fn exit_code(self) -> u8 {
        match self {
            Stop::Interrupt => 130,
            Stop::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM, listened to from the start, so that none is lost
/// between the first and the second.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    pub fn install() -> Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
        })
    }

    pub async fn next(&mut self) -> Stop {
        tokio::select! {
            _ = self.interrupt.recv() => Stop::Interrupt,
            _ = self.terminate.recv() => Stop::Terminate,
        }
    }
}

/// After the engine loop stopped on `first`: starts nothing more, then
/// waits for or stops the jobs in hand as the signal asks. Returns what
/// became of them, for the user, with where each result the state would
/// not take is kept.
pub async fn wind_down(
    runner: &LocalRunner,
    store: &dyn StateStore,
    first: Stop,
    signals: &mut Signals,
    command: &str,
) -> String {
    let jobs = runner.jobs_in_hand();
    let mut said = jobs_wound_down(runner, first, signals, command).await;
    for held in runner.flush_held().await {
        said.push('\n');
        said.push_str(&held);
    }
    // No step takes their results up before the next run: their instances
    // say what became of them instead of showing them running.
    let stopping = format!("{command} was stopping ({})", first.name());
    for job in &jobs {
        if let Err(e) =
            vergence_engine::note_interrupted(store, job, &stopping, jiff::Timestamp::now()).await
        {
            tracing::warn!(job = %job, error = %e, "cannot say on its instance what became of a job ended while stopping");
        }
    }
    said
}

async fn jobs_wound_down(
    runner: &LocalRunner,
    first: Stop,
    signals: &mut Signals,
    command: &str,
) -> String {
    runner.close(&format!(
        "{command} received {} before the job started",
        first.name()
    ));
    let in_hand = runner.in_hand();
    if in_hand == 0 {
        return format!("{}: no job was running", stopped_by(first));
    }
    let stop = match first {
        Stop::Terminate => Stop::Terminate,
        Stop::Interrupt => {
            eprintln!(
                "interrupted: waiting for {in_hand} running job(s) to finish and be recorded; press Ctrl-C again to stop them"
            );
            tokio::select! {
                () = runner.finished() => {
                    return format!(
                        "interrupted: the {in_hand} job(s) that were running finished and were recorded"
                    );
                }
                second = signals.next() => second,
            }
        }
    };
    let stopped = runner
        .stop_all(&format!("{command} received {}", stop.name()))
        .await;
    format!(
        "{}: {stopped} running job(s) were stopped and recorded as stopped; the next `vergence up` runs them again",
        stopped_by(stop)
    )
}

fn stopped_by(stop: Stop) -> &'static str {
    match stop {
        Stop::Interrupt => "interrupted",
        Stop::Terminate => "terminated",
    }
}
