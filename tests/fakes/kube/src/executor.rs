//! What "running a container" means in the fake: an [`Executor`] gets the
//! container as the kubelet resolved it ([`PodRun`]) and reports how it
//! ended. The default runs the command as a local process; tests can plug
//! canned outcomes ([`FnExecutor`]) or a container that never ends
//! ([`NeverFinishes`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use crate::logs::{ContainerLog, Stream};

/// Why the kubelet stopped a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KillReason {
    /// The pod was deleted.
    Deleted,
    /// The Job's `activeDeadlineSeconds` elapsed.
    DeadlineExceeded,
}

/// Tells an executor that its container must stop now.
#[derive(Debug, Clone)]
pub struct Cancellation(pub(crate) watch::Receiver<Option<KillReason>>);

impl Cancellation {
    /// Whether the container has been told to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.borrow().is_some()
    }

    /// Completes when the container is told to stop (never, if it is not).
    pub async fn cancelled(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(Option::is_some).await.is_err() {
            // The kubelet forgot the pod without stopping it: nothing will
            // ever cancel this run.
            std::future::pending::<()>().await;
        }
    }
}

/// Where a container writes its output.
#[derive(Debug, Clone)]
pub struct Output(pub(crate) Arc<ContainerLog>);

impl Output {
    /// Appends to standard output.
    pub fn stdout(&self, bytes: &[u8]) {
        self.0.write(Stream::Stdout, bytes);
    }

    /// Appends to standard error.
    pub fn stderr(&self, bytes: &[u8]) {
        self.0.write(Stream::Stderr, bytes);
    }
}

/// A container about to run, as the kubelet resolved it from the pod.
#[derive(Debug, Clone)]
pub struct PodRun {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub pod: String,
    /// Name of the container.
    pub container: String,
    /// Image of the container (informational: there are no images here).
    pub image: String,
    /// `command`, with `$(VAR)` references expanded.
    pub command: Vec<String>,
    /// `args`, with `$(VAR)` references expanded.
    pub args: Vec<String>,
    /// The container environment, resolved (`value`, `valueFrom`, `envFrom`).
    pub env: Vec<(String, String)>,
    /// `workingDir`, if set.
    pub working_dir: Option<String>,
    /// Where to write output.
    pub output: Output,
    /// Signals that the container must stop.
    pub cancellation: Cancellation,
}

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutcome {
    /// The process exited with this code.
    Exited(i32),
    /// The container could not start (`StartError`, exit code 128).
    StartFailed(String),
    /// The container was stopped through its [`Cancellation`].
    Killed,
}

/// Runs containers for the kubelet stand-in.
#[async_trait]
pub trait Executor: Send + Sync + std::fmt::Debug {
    /// Runs the container to its end, writing output to `pod.output`, and
    /// stops promptly when `pod.cancellation` fires.
    async fn run(&self, pod: &PodRun) -> ExecOutcome;
}

/// Runs `command` + `args` as a local process: environment cleared except
/// `PATH` and `HOME` plus the container's env; working directory
/// `workingDir` when it exists on this machine, else a fresh temporary
/// directory.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessExecutor;

#[async_trait]
impl Executor for ProcessExecutor {
    async fn run(&self, pod: &PodRun) -> ExecOutcome {
        let argv: Vec<&String> = pod.command.iter().chain(pod.args.iter()).collect();
        let Some((program, rest)) = argv.split_first() else {
            return ExecOutcome::StartFailed(
                "no command or args: the fake has no image entrypoints".into(),
            );
        };
        // Kept alive (and then removed) for as long as the process runs.
        let (dir, _scratch) = match working_dir(pod) {
            Ok(found) => found,
            Err(e) => return ExecOutcome::StartFailed(format!("no working directory: {e}")),
        };
        let mut command = tokio::process::Command::new(program);
        command.args(rest).env_clear().current_dir(&dir);
        for var in ["PATH", "HOME"] {
            if let Some(value) = std::env::var_os(var) {
                command.env(var, value);
            }
        }
        command.envs(pod.env.iter().map(|(k, v)| (k, v)));
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match command.spawn() {
            Ok(child) => supervise(child, pod).await,
            Err(e) => ExecOutcome::StartFailed(format!("exec: \"{program}\": {e}")),
        }
    }
}

/// `workingDir` when it exists here, else a fresh temporary directory.
fn working_dir(pod: &PodRun) -> std::io::Result<(PathBuf, Option<tempfile::TempDir>)> {
    match pod
        .working_dir
        .as_deref()
        .map(Path::new)
        .filter(|d| d.is_dir())
    {
        Some(dir) => Ok((dir.to_path_buf(), None)),
        None => {
            let scratch = tempfile::tempdir()?;
            Ok((scratch.path().to_path_buf(), Some(scratch)))
        }
    }
}

/// Copies the process's output to the pod's log until it exits or is
/// cancelled (then killed).
async fn supervise(mut child: tokio::process::Child, pod: &PodRun) -> ExecOutcome {
    let readers = [
        child
            .stdout
            .take()
            .map(|out| tokio::spawn(pump(out, pod.output.clone(), Stream::Stdout))),
        child
            .stderr
            .take()
            .map(|err| tokio::spawn(pump(err, pod.output.clone(), Stream::Stderr))),
    ];
    let status = tokio::select! {
        status = child.wait() => Some(status),
        () = pod.cancellation.cancelled() => None,
    };
    if status.is_none() {
        // Already exited is fine: then there is nothing left to kill.
        let _already_exited = child.kill().await;
    }
    for reader in readers.into_iter().flatten() {
        // A grandchild may hold the pipes open; don't wait on it forever.
        let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    }
    match status {
        None => ExecOutcome::Killed,
        Some(Ok(status)) => ExecOutcome::Exited(exit_code(status)),
        Some(Err(e)) => ExecOutcome::StartFailed(format!("waiting for the process: {e}")),
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    status.code().unwrap_or(1)
}

async fn pump(mut from: impl AsyncRead + Unpin, to: Output, stream: Stream) {
    let mut buffer = vec![0u8; 8192];
    while let Ok(n) = from.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        to.0.write(stream, &buffer[..n]);
    }
}

/// A canned container run: what it prints, how long it takes, its exit code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Canned {
    /// Exit code.
    pub exit_code: i32,
    /// Printed to standard output.
    pub stdout: String,
    /// Printed to standard error (after stdout).
    pub stderr: String,
    /// How long the run takes.
    pub duration: Duration,
}

impl Canned {
    /// A run that exits with `code` at once, printing nothing.
    pub fn exit(code: i32) -> Self {
        Self {
            exit_code: code,
            ..Self::default()
        }
    }

    /// Prints `text` to standard output.
    #[must_use]
    pub fn stdout(mut self, text: &str) -> Self {
        self.stdout = text.to_owned();
        self
    }

    /// Prints `text` to standard error.
    #[must_use]
    pub fn stderr(mut self, text: &str) -> Self {
        self.stderr = text.to_owned();
        self
    }

    /// Takes `duration` before exiting.
    #[must_use]
    pub fn after(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }
}

type CannedFn = dyn Fn(&PodRun) -> Canned + Send + Sync;

/// Answers every container with a [`Canned`] run chosen by a closure.
pub struct FnExecutor(Box<CannedFn>);

impl FnExecutor {
    /// An executor that runs `decide(pod)` for each container.
    pub fn new(decide: impl Fn(&PodRun) -> Canned + Send + Sync + 'static) -> Self {
        Self(Box::new(decide))
    }
}

impl std::fmt::Debug for FnExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnExecutor")
    }
}

#[async_trait]
impl Executor for FnExecutor {
    async fn run(&self, pod: &PodRun) -> ExecOutcome {
        let canned = (self.0)(pod);
        tokio::select! {
            () = tokio::time::sleep(canned.duration) => {}
            () = pod.cancellation.cancelled() => return ExecOutcome::Killed,
        }
        pod.output.stdout(canned.stdout.as_bytes());
        pod.output.stderr(canned.stderr.as_bytes());
        ExecOutcome::Exited(canned.exit_code)
    }
}

/// A container that runs until it is stopped (deadline, deletion).
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverFinishes;

#[async_trait]
impl Executor for NeverFinishes {
    async fn run(&self, pod: &PodRun) -> ExecOutcome {
        pod.cancellation.cancelled().await;
        ExecOutcome::Killed
    }
}
