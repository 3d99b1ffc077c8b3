//! Running one job to completion: supervising its process (or its
//! container's engine) under the job's timeout and any stop request, and
//! turning whatever happened into a [`JobResult`].

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use nix::sys::signal::Signal;
use tokio::process::Child;
use tracing::debug;
use vergence_model::ports::ArtifactStore;
use vergence_model::{JobOutcome, JobRecord, JobResult, SecretMask};

use crate::artifacts::collect_outputs;
use crate::capture::{Head, Tail, head_text, pump, tail_text};
use crate::container::Container;
use crate::engine::EngineLookup;
use crate::group::{ProcessGroup, TERM_GRACE};
use crate::prepare::Prepared;
use crate::running::StopSignal;

/// How long output pipes are still read once the job's process has exited.
/// A background child may hold them open indefinitely; whatever it writes
/// after that is not captured.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Runs one job to completion and returns its result. Never panics and
/// never fails: every problem, including not being able to start, is
/// reported in the result. A job whose program has an image runs in a
/// container through the first of docker and podman on PATH.
pub async fn run_job(job: &JobRecord, artifacts: &dyn ArtifactStore) -> JobResult {
    execute(
        job,
        artifacts,
        &EngineLookup::default(),
        &mut StopSignal::never(),
    )
    .await
}

/// [`run_job`] with the runner's engine setting, and a way to stop it.
#[tracing::instrument(name = "local.run_job", skip_all, fields(job = %job.id, kind = %job.kind, instance = %job.instance))]
pub(crate) async fn execute(
    job: &JobRecord,
    artifacts: &dyn ArtifactStore,
    engines: &EngineLookup,
    stop: &mut StopSignal,
) -> JobResult {
    debug!(job = %job.id, kind = %job.kind, image = ?job.spec.image, "starting local job");
    let result = match Prepared::new(job, artifacts, engines).await {
        Ok(prepared) => run(prepared, job, artifacts, stop).await,
        Err(message) => JobResult::not_started(message, Timestamp::now()),
    };
    debug!(
        job = %job.id,
        kind = %job.kind,
        outcome = %result.outcome,
        exit_code = ?result.exit_code,
        duration_ms = result.duration_ms,
        "local job finished"
    );
    result
}

/// Starts the job and waits for it; its files go when `prepared` does.
async fn run(
    mut prepared: Prepared,
    job: &JobRecord,
    artifacts: &dyn ArtifactStore,
    stop: &mut StopSignal,
) -> JobResult {
    if let Some(reason) = stop.reason() {
        return JobResult::without_output(JobOutcome::Stopped { reason }, Timestamp::now());
    }
    let started = Instant::now();
    let mut child = match prepared.command.spawn() {
        Ok(child) => child,
        Err(e) if out_of_descriptors(&e) => {
            // Not the job's fault, and it passes as other jobs and
            // connections end: started again later, not a failed attempt.
            let message = format!(
                "cannot start {} yet: {e}; this vergence process has no file descriptors left for its pipes (ulimit -n)",
                prepared.starter
            );
            return JobResult::not_started_for_now(message, Timestamp::now());
        }
        Err(e) => {
            let message = match &prepared.container {
                Some(container) => format!(
                    "cannot run {} ({}) for image {}: {e}",
                    prepared.starter,
                    container.engine.program.display(),
                    container.image
                ),
                None => format!(
                    "cannot run {} in {}: {e}",
                    prepared.starter,
                    prepared.dir.display()
                ),
            };
            return JobResult::not_started(message, Timestamp::now());
        }
    };
    let mut group = ProcessGroup::led_by(child.id());
    let container = prepared.container.as_ref();
    let abandoned = KillIfAbandoned(container);
    // Output is kept a secret's length past its limits, so that a secret
    // the cut goes through is seen whole and masked.
    let margin = prepared.secrets.longest();
    let (ended, stdout, stderr) = supervise(
        &mut child,
        &mut group,
        container,
        prepared.timeout,
        stop,
        margin,
    )
    .await;
    abandoned.disarm();
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Some(message) = engine_failure(container, &ended, &stderr, &prepared.secrets) {
        let mut result = JobResult::not_started(message, Timestamp::now());
        result.duration_ms = duration_ms;
        result.mask(&prepared.secrets);
        return result;
    }
    let mut notes = Vec::new();
    let (outcome, exit_code) = ended.outcome(&mut notes);
    let outputs = collect_outputs(
        &prepared.files.output,
        &job.id,
        &job.spec.outputs,
        artifacts,
        &prepared.secrets,
        &mut notes,
    )
    .await;
    let mut result = JobResult {
        outcome,
        exit_code,
        stdout: head_text(&stdout, JobResult::MAX_STDOUT, &prepared.secrets),
        stderr_tail: stderr_with_notes(stderr, &notes, &prepared.secrets),
        duration_ms,
        outputs,
        finished_at: Timestamp::now(),
    };
    result.mask(&prepared.secrets);
    result
}

/// The process (EMFILE) or the system (ENFILE) has no descriptor left for
/// the child's pipes.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    e.raw_os_error()
        .is_some_and(|code| code == Errno::EMFILE as i32 || code == Errno::ENFILE as i32)
}

/// Why the container never ran, when its engine says it failed itself.
fn engine_failure(
    container: Option<&Container>,
    ended: &Ended,
    stderr: &[u8],
    secrets: &SecretMask,
) -> Option<String> {
    let Ended::Exited(status, _) = ended else {
        return None;
    };
    let stderr = tail_text(stderr, JobResult::STDERR_TAIL, secrets);
    container?.engine_failure(status.code()?, &stderr)
}

/// Kills the job's container when the job's future is dropped half-way
/// (runtime shutdown, cancellation): killing the engine's client, as the
/// process group's own guard does, would leave the container running.
struct KillIfAbandoned<'a>(Option<&'a Container>);

impl KillIfAbandoned<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for KillIfAbandoned<'_> {
    fn drop(&mut self) {
        if let Some(container) = self.0 {
            container.kill_detached();
        }
    }
}

/// How the process ended.
enum Ended {
    /// With whether it left processes behind in its group (ended since).
    Exited(ExitStatus, bool),
    /// `killed`: it ignored SIGTERM and needed SIGKILL.
    TimedOut {
        killed: bool,
    },
    /// Asked to stop (see [`vergence_model::ports::Runner::stop`]).
    Stopped {
        reason: String,
        killed: bool,
    },
    WaitFailed(std::io::Error),
}

impl Ended {
    /// The outcome and exit code; what they cannot say goes to `notes`.
    fn outcome(self, notes: &mut Vec<String>) -> (JobOutcome, Option<i32>) {
        match self {
            Ended::Exited(status, left_behind) => {
                if let Some(signal) = status.signal() {
                    notes.push(killed_by(signal));
                }
                if left_behind {
                    notes.push(format!(
                        "it left processes running in the background when it exited; they were ended (SIGTERM, SIGKILL after {}s)",
                        TERM_GRACE.as_secs()
                    ));
                }
                (JobOutcome::Exited, status.code())
            }
            Ended::TimedOut { killed } => {
                if killed {
                    notes.push(needed_sigkill());
                }
                (JobOutcome::TimedOut, None)
            }
            Ended::Stopped { reason, killed } => {
                if killed {
                    notes.push(needed_sigkill());
                }
                (JobOutcome::Stopped { reason }, None)
            }
            Ended::WaitFailed(e) => {
                notes.push(format!(
                    "lost track of the process ({e}); its process group was killed"
                ));
                (JobOutcome::Exited, None)
            }
        }
    }
}

fn needed_sigkill() -> String {
    format!(
        "still running {}s after SIGTERM; the job's processes were killed with SIGKILL",
        TERM_GRACE.as_secs()
    )
}

fn killed_by(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(name) => format!("killed by signal {signal} ({name})"),
        Err(_) => format!("killed by signal {signal}"),
    }
}

/// Waits for the process while reading both pipes, so a process writing a
/// lot never blocks on a full pipe. Returns how it ended, the head of
/// stdout and the tail of stderr, each `margin` bytes longer than kept.
async fn supervise(
    child: &mut Child,
    group: &mut ProcessGroup,
    container: Option<&Container>,
    timeout: Duration,
    stop: &mut StopSignal,
    margin: usize,
) -> (Ended, Vec<u8>, Vec<u8>) {
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let mut head = Head::new(JobResult::MAX_STDOUT + margin);
    let mut tail = Tail::new(JobResult::STDERR_TAIL + margin);
    let ended = {
        let readers = async {
            tokio::join!(pump(stdout, &mut head), pump(stderr, &mut tail));
        };
        let waiting = wait_or_terminate(child, group, container, timeout, stop);
        tokio::pin!(readers, waiting);
        tokio::select! {
            ended = &mut waiting => {
                if tokio::time::timeout(DRAIN_GRACE, &mut readers).await.is_err() {
                    debug!("a job's output stayed open after it exited; stopped reading it");
                }
                ended
            }
            () = &mut readers => waiting.await,
        }
    };
    (ended, head.into_bytes(), tail.into_bytes())
}

/// Why a job is ended before it exits on its own.
enum Cut {
    Timeout,
    Stop(String),
}

async fn wait_or_terminate(
    child: &mut Child,
    group: &mut ProcessGroup,
    container: Option<&Container>,
    timeout: Duration,
    stop: &mut StopSignal,
) -> Ended {
    let cut = tokio::select! {
        status = child.wait() => return match status {
            Ok(status) => {
                let left_behind = group.end_leftovers().await;
                Ended::Exited(status, left_behind)
            }
            Err(e) => {
                if let Some(container) = container {
                    container.kill(Signal::SIGKILL).await;
                }
                group.kill();
                Ended::WaitFailed(e)
            }
        },
        () = tokio::time::sleep(timeout) => Cut::Timeout,
        reason = stop.requested() => Cut::Stop(reason),
    };
    let killed = terminate(child, group, container).await;
    match cut {
        Cut::Timeout => Ended::TimedOut { killed },
        Cut::Stop(reason) => Ended::Stopped { reason, killed },
    }
}

/// Ends a job early: SIGTERM (to the container, or to every process of the
/// group), up to [`TERM_GRACE`] for it to exit, then SIGKILL. Returns
/// whether SIGKILL was needed.
async fn terminate(
    child: &mut Child,
    group: &mut ProcessGroup,
    container: Option<&Container>,
) -> bool {
    match container {
        // The engine's client exits once its container has.
        Some(container) => container.kill(Signal::SIGTERM).await,
        None => group.signal(Signal::SIGTERM),
    }
    let exited = group.wait_gone(child, TERM_GRACE).await;
    if !exited {
        if let Some(container) = container {
            container.kill(Signal::SIGKILL).await;
        }
        group.kill_and_reap(child).await;
    }
    group.release();
    !exited
}

/// The stderr tail with the runner's own notes at its end, where
/// [`JobResult::describe`] looks for the reason a job failed.
fn stderr_with_notes(mut stderr: Vec<u8>, notes: &[String], secrets: &SecretMask) -> String {
    for note in notes {
        if !stderr.is_empty() && !stderr.ends_with(b"\n") {
            stderr.push(b'\n');
        }
        stderr.extend_from_slice(note.as_bytes());
        stderr.push(b'\n');
    }
    tail_text(&stderr, JobResult::STDERR_TAIL, secrets)
}
