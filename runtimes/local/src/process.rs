//! Running one job as a local process: checking its directory, program and
//! environment before anything starts, supervising the process under the
//! job's timeout, and turning whatever happened into a [`JobResult`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use nix::sys::signal::Signal;
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tracing::debug;
use vergence_model::ports::ArtifactStore;
use vergence_model::{JobOutcome, JobRecord, JobResult, SecretRef};

use crate::artifacts::{collect_outputs, temp_dir, write_inputs};
use crate::capture::{Head, Tail, head_text, pump, tail_text};
use crate::group::{ProcessGroup, TERM_GRACE};

/// How long output pipes are still read once the job's process has exited.
/// A background child may hold them open indefinitely; whatever it writes
/// after that is not captured.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Runs one job to completion and returns its result. Never panics and
/// never fails: every problem, including not being able to start, is
/// reported in the result.
#[tracing::instrument(name = "local.run_job", skip_all, fields(job = %job.id, kind = %job.kind, instance = %job.instance))]
pub async fn run_job(job: &JobRecord, artifacts: &dyn ArtifactStore) -> JobResult {
    debug!(job = %job.id, kind = %job.kind, "starting local job");
    let result = match Prepared::new(job, artifacts).await {
        Ok(prepared) => prepared.run(job, artifacts).await,
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

/// Everything needed to start the process, checked before anything runs.
/// Deliberately not `Debug`: the environment holds secret values.
struct Prepared {
    /// `cmd[0]` as written, for messages.
    program_name: String,
    program: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
    env: Vec<(String, OsString)>,
    timeout: Duration,
    output_dir: TempDir,
    /// Held so the inputs exist until the job ends.
    _input_dir: Option<TempDir>,
}

impl Prepared {
    async fn new(job: &JobRecord, artifacts: &dyn ArtifactStore) -> Result<Self, String> {
        let (program_name, args) = job
            .spec
            .cmd
            .split_first()
            .ok_or_else(|| "the job has no command to run".to_owned())?;
        let timeout = positive_timeout(job.spec.timeout)?;
        let dir = working_dir(job).await?;
        let secrets = resolve_secrets(&job.spec.secret_env)?;
        let output_dir = temp_dir("vergence-output-")?;
        let input_dir = write_inputs(&job.inputs, artifacts).await?;
        let env = environment(job, secrets, &output_dir, input_dir.as_ref());
        Ok(Self {
            program_name: program_name.clone(),
            program: resolve_program(program_name, &dir),
            args: args.to_vec(),
            dir,
            env,
            timeout,
            output_dir,
            _input_dir: input_dir,
        })
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        // Inherited from a parent that is itself a job, it would point at
        // that job's inputs; it is set again below when this job has any.
        command.env_remove("VERGENCE_INPUT_DIR");
        command
            .args(&self.args)
            .current_dir(&self.dir)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own, so a timeout reaches every process it starts.
            .process_group(0);
        command
    }

    /// Runs the process; the temporary directories go when `self` does.
    async fn run(self, job: &JobRecord, artifacts: &dyn ArtifactStore) -> JobResult {
        let started = Instant::now();
        let mut child = match self.command().spawn() {
            Ok(child) => child,
            Err(e) => {
                let message = format!(
                    "cannot run {} in {}: {e}",
                    self.program_name,
                    self.dir.display()
                );
                return JobResult::not_started(message, Timestamp::now());
            }
        };
        let mut group = ProcessGroup::led_by(child.id());
        let (ended, stdout, stderr) = supervise(&mut child, &mut group, self.timeout).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut notes = Vec::new();
        let (outcome, exit_code) = ended.outcome(&mut notes);
        let outputs = collect_outputs(
            self.output_dir.path(),
            &job.id,
            &job.spec.outputs,
            artifacts,
            &mut notes,
        )
        .await;
        JobResult {
            outcome,
            exit_code,
            stdout: head_text(&stdout, JobResult::MAX_STDOUT),
            stderr_tail: stderr_with_notes(stderr, &notes),
            duration_ms,
            outputs,
            finished_at: Timestamp::now(),
        }
    }
}

/// How the process ended.
enum Ended {
    Exited(ExitStatus),
    /// `killed`: it ignored SIGTERM and needed SIGKILL.
    TimedOut {
        killed: bool,
    },
    WaitFailed(std::io::Error),
}

impl Ended {
    /// The outcome and exit code; what they cannot say goes to `notes`.
    fn outcome(self, notes: &mut Vec<String>) -> (JobOutcome, Option<i32>) {
        match self {
            Ended::Exited(status) => {
                if let Some(signal) = status.signal() {
                    notes.push(killed_by(signal));
                }
                (JobOutcome::Exited, status.code())
            }
            Ended::TimedOut { killed } => {
                if killed {
                    notes.push(format!(
                        "still running {}s after SIGTERM; the job's processes were killed with SIGKILL",
                        TERM_GRACE.as_secs()
                    ));
                }
                (JobOutcome::TimedOut, None)
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

fn killed_by(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(name) => format!("killed by signal {signal} ({name})"),
        Err(_) => format!("killed by signal {signal}"),
    }
}

/// Waits for the process while reading both pipes, so a process writing a
/// lot never blocks on a full pipe. Returns how it ended, the head of
/// stdout and the tail of stderr.
async fn supervise(
    child: &mut Child,
    group: &mut ProcessGroup,
    timeout: Duration,
) -> (Ended, Vec<u8>, Vec<u8>) {
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let mut head = Head::new(JobResult::MAX_STDOUT);
    let mut tail = Tail::new(JobResult::STDERR_TAIL);
    let ended = {
        let readers = async {
            tokio::join!(pump(stdout, &mut head), pump(stderr, &mut tail));
        };
        let waiting = wait_or_terminate(child, group, timeout);
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

async fn wait_or_terminate(
    child: &mut Child,
    group: &mut ProcessGroup,
    timeout: Duration,
) -> Ended {
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => {
            group.release();
            Ended::Exited(status)
        }
        Ok(Err(e)) => {
            group.kill();
            Ended::WaitFailed(e)
        }
        Err(_elapsed) => Ended::TimedOut {
            killed: group.terminate(child).await,
        },
    }
}

fn positive_timeout(timeout: SignedDuration) -> Result<Duration, String> {
    match Duration::try_from(timeout) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        _ => Err(format!("the job's timeout ({timeout:#}) is not positive")),
    }
}

/// `workspace_root` (or the current directory) joined with the job's
/// relative working directory, which must exist: otherwise spawning would
/// fail with an error that reads as if the program were missing.
async fn working_dir(job: &JobRecord) -> Result<PathBuf, String> {
    let root = match &job.workspace_root {
        Some(root) => PathBuf::from(root),
        None => std::env::current_dir()
            .map_err(|e| format!("cannot determine the current directory: {e}"))?,
    };
    let dir = if job.spec.working_dir.is_empty() {
        root
    } else {
        root.join(&job.spec.working_dir)
    };
    match tokio::fs::metadata(&dir).await {
        Ok(meta) if meta.is_dir() => Ok(dir),
        Ok(_) => Err(format!(
            "working directory {} is not a directory",
            dir.display()
        )),
        Err(e) => Err(format!(
            "cannot use working directory {}: {e}",
            dir.display()
        )),
    }
}

/// A program with a '/' is a path relative to the working directory (or
/// absolute); resolving it here avoids depending on whether the platform
/// resolves it against the parent's or the child's directory. A bare name
/// is looked up on PATH.
fn resolve_program(program: &str, dir: &Path) -> PathBuf {
    if program.contains('/') {
        dir.join(program)
    } else {
        PathBuf::from(program)
    }
}

/// Secret values, resolved at run time. Messages name variables only.
fn resolve_secrets(
    secret_env: &BTreeMap<String, SecretRef>,
) -> Result<Vec<(String, OsString)>, String> {
    secret_env
        .iter()
        .map(|(name, source)| match source {
            SecretRef::FromEnv(var) => std::env::var_os(var)
                .map(|value| (name.clone(), value))
                .ok_or_else(|| {
                    format!(
                        "secret {name} comes from environment variable {var}, which is not set where the local runner runs"
                    )
                }),
            other => Err(format!(
                "secret {name} comes from {}, which only the {} runner reads; the local runner reads secrets from its environment (fromEnv)",
                other.describe(),
                other.read_by()
            )),
        })
        .collect()
}

/// The variables added to the inherited environment, in order: later
/// entries win, so a job's own `env` cannot fake the context variables.
fn environment(
    job: &JobRecord,
    secrets: Vec<(String, OsString)>,
    output_dir: &TempDir,
    input_dir: Option<&TempDir>,
) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = job
        .spec
        .env
        .iter()
        .map(|(name, value)| (name.clone(), value.into()))
        .collect();
    env.extend(secrets);
    env.extend(
        job.context_env()
            .into_iter()
            .map(|(name, value)| (name, value.into())),
    );
    env.push((
        "VERGENCE_OUTPUT_DIR".to_owned(),
        output_dir.path().as_os_str().to_owned(),
    ));
    if let Some(dir) = input_dir {
        env.push((
            "VERGENCE_INPUT_DIR".to_owned(),
            dir.path().as_os_str().to_owned(),
        ));
    }
    env
}

/// The stderr tail with the runner's own notes at its end, where
/// [`JobResult::describe`] looks for the reason a job failed.
fn stderr_with_notes(mut stderr: Vec<u8>, notes: &[String]) -> String {
    for note in notes {
        if !stderr.is_empty() && !stderr.ends_with(b"\n") {
            stderr.push(b'\n');
        }
        stderr.extend_from_slice(note.as_bytes());
        stderr.push(b'\n');
    }
    tail_text(&stderr, JobResult::STDERR_TAIL)
}
