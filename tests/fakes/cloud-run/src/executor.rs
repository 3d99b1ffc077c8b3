//! What runs a task. The fake hands each attempt of each task to a
//! [`TaskExecutor`]: by default [`ProcessExecutor`](crate::ProcessExecutor)
//! runs the container's command as a local process; tests plug in
//! [`CannedExecutor`] or [`NeverEndingExecutor`] when the process itself
//! does not matter. The fake enforces the task's timeout and cancellation
//! around any executor (dropping its future), so an executor only has to
//! run and write its output.

use std::sync::Weak;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::state::Shared;

/// Runs one attempt of one task.
#[async_trait]
pub trait TaskExecutor: Send + Sync + 'static {
    /// Runs `task` to its end. Lines written with [`TaskRun::write_stdout`]
    /// and [`TaskRun::write_stderr`] reach Cloud Logging as they are written.
    async fn run(&self, task: &TaskRun) -> TaskOutcome;
}

/// How an attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskOutcome {
    /// The container exited with this code; 0 is success.
    Exited(i32),
    /// The task's timeout elapsed and it was stopped.
    TimedOut,
    /// The execution was cancelled while the task ran.
    Cancelled,
    /// The platform could not run the container; no exit code.
    Failed(String),
}

/// One attempt of one task, after the run's overrides: what to run and
/// where its output goes.
#[derive(Clone, Debug)]
pub struct TaskRun {
    pub project: String,
    pub location: String,
    /// The job's id.
    pub job: String,
    /// The execution's id (`{job}-{5 chars}`).
    pub execution: String,
    pub task_index: u32,
    /// 0 for the first attempt, 1 for the first retry, …
    pub task_attempt: u32,
    pub task_count: u32,
    pub image: String,
    /// The container's `command` (its entrypoint).
    pub command: Vec<String>,
    /// The container's `args`, after the run's overrides.
    pub args: Vec<String>,
    /// The container's environment after overrides, then the variables the
    /// platform sets (`CLOUD_RUN_JOB`, `CLOUD_RUN_EXECUTION`,
    /// `CLOUD_RUN_TASK_INDEX`, `CLOUD_RUN_TASK_ATTEMPT`,
    /// `CLOUD_RUN_TASK_COUNT`).
    pub env: Vec<(String, String)>,
    /// The container's `workingDir`, if it set one.
    pub working_dir: Option<String>,
    pub timeout: Duration,
    pub(crate) cancel: watch::Receiver<bool>,
    pub(crate) output: TaskOutput,
}

impl TaskRun {
    /// The value of an environment variable of the task.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the execution has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves once the execution is cancelled (or deleted).
    pub async fn cancelled(&self) {
        let mut cancel = self.cancel.clone();
        // An error means the execution is gone, which ends the task too.
        let _gone = cancel.wait_for(|cancelled| *cancelled).await;
    }

    /// Writes a line to the task's stdout log.
    pub fn write_stdout(&self, line: &str) {
        self.output.write(&self.labels(), "stdout", line);
    }

    /// Writes a line to the task's stderr log.
    pub fn write_stderr(&self, line: &str) {
        self.output.write(&self.labels(), "stderr", line);
    }

    fn labels(&self) -> LogLabels<'_> {
        LogLabels {
            project: &self.project,
            location: &self.location,
            job: &self.job,
            execution: &self.execution,
            task_index: self.task_index,
            task_attempt: self.task_attempt,
        }
    }
}

/// What a log entry of a task says about where it came from.
#[derive(Debug)]
pub(crate) struct LogLabels<'a> {
    pub(crate) project: &'a str,
    pub(crate) location: &'a str,
    pub(crate) job: &'a str,
    pub(crate) execution: &'a str,
    pub(crate) task_index: u32,
    pub(crate) task_attempt: u32,
}

/// Where a task's lines go: the fake's log store. Weak, because the store
/// keeps every [`TaskRun`] it started; lines written after the fake has
/// stopped go nowhere.
#[derive(Clone, Debug)]
pub(crate) struct TaskOutput {
    pub(crate) shared: Weak<Shared>,
}

impl TaskOutput {
    fn write(&self, labels: &LogLabels<'_>, stream: &str, line: &str) {
        if let Some(shared) = self.shared.upgrade() {
            let delay = shared.config.log_delay;
            shared
                .lock()
                .logs
                .append_task_line(labels, stream, line, delay);
        }
    }
}

/// An executor that runs nothing: it writes the lines it was given, waits
/// `delay`, and ends with a canned outcome (per attempt, the last one
/// repeating).
#[derive(Clone, Debug)]
pub struct CannedExecutor {
    outcomes: Vec<TaskOutcome>,
    stdout: Vec<String>,
    stderr: Vec<String>,
    delay: Duration,
}

impl CannedExecutor {
    /// Every attempt ends with `outcome`.
    pub fn new(outcome: TaskOutcome) -> Self {
        Self::per_attempt(vec![outcome])
    }

    /// Attempt `n` ends with `outcomes[n]`, later ones with the last.
    pub fn per_attempt(outcomes: Vec<TaskOutcome>) -> Self {
        Self {
            outcomes,
            stdout: Vec::new(),
            stderr: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    /// Lines each attempt writes to stdout.
    pub fn with_stdout<S: Into<String>>(mut self, lines: impl IntoIterator<Item = S>) -> Self {
        self.stdout = lines.into_iter().map(Into::into).collect();
        self
    }

    /// Lines each attempt writes to stderr.
    pub fn with_stderr<S: Into<String>>(mut self, lines: impl IntoIterator<Item = S>) -> Self {
        self.stderr = lines.into_iter().map(Into::into).collect();
        self
    }

    /// How long each attempt takes.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

#[async_trait]
impl TaskExecutor for CannedExecutor {
    async fn run(&self, task: &TaskRun) -> TaskOutcome {
        self.stdout.iter().for_each(|line| task.write_stdout(line));
        self.stderr.iter().for_each(|line| task.write_stderr(line));
        tokio::time::sleep(self.delay).await;
        let attempt = usize::try_from(task.task_attempt).unwrap_or(usize::MAX);
        self.outcomes
            .get(attempt)
            .or(self.outcomes.last())
            .cloned()
            .unwrap_or(TaskOutcome::Exited(0))
    }
}

/// An executor whose tasks never finish on their own: only a timeout or a
/// cancellation ends them.
#[derive(Clone, Copy, Debug, Default)]
pub struct NeverEndingExecutor;

#[async_trait]
impl TaskExecutor for NeverEndingExecutor {
    async fn run(&self, task: &TaskRun) -> TaskOutcome {
        task.cancelled().await;
        TaskOutcome::Cancelled
    }
}
