//! The default executor: a task's container `command` + `args` run as a
//! local process (`args` alone when the container sets no command: the
//! image's entrypoint is unknown here), with only the container's
//! environment (plus `PATH` and `HOME`, so ordinary tools resolve), in the
//! container's `workingDir` when that exists on this machine and in a fresh
//! temporary directory otherwise. Stdout and stderr go to the log store
//! line by line.
//!
//! The process leads a process group of its own. When it exits, or when
//! the fake stops the task (timeout, cancellation), the whole group is
//! killed — as a container's processes all end with the container.

use std::path::Path;
use std::process::{ExitStatus, Stdio};

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;

use crate::executor::{TaskExecutor, TaskOutcome, TaskRun};

/// Runs each task's command and args as a local process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessExecutor;

#[async_trait]
impl TaskExecutor for ProcessExecutor {
    async fn run(&self, task: &TaskRun) -> TaskOutcome {
        let mut words = task.command.iter().chain(&task.args);
        let Some(program) = words.next() else {
            return TaskOutcome::Failed(
                "The container sets neither command nor args; the fake has no image entrypoint to run."
                    .to_owned(),
            );
        };
        let temp_dir;
        let dir = match task.working_dir.as_deref().map(Path::new) {
            Some(dir) if dir.is_dir() => dir,
            _ => match tempfile::tempdir() {
                Ok(dir) => {
                    temp_dir = dir;
                    temp_dir.path()
                }
                Err(e) => return TaskOutcome::Failed(format!("No working directory: {e}")),
            },
        };
        let mut command = Command::new(program);
        command
            .args(words)
            .env_clear()
            .envs(
                ["PATH", "HOME"]
                    .iter()
                    .filter_map(|k| Some((k, std::env::var_os(k)?))),
            )
            .envs(task.env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        match command.spawn() {
            Ok(child) => supervise(child, task).await,
            Err(e) => TaskOutcome::Failed(format!("Could not start '{program}': {e}")),
        }
    }
}

/// Waits for the process while copying its output; kills what it leaves
/// behind once it exits.
async fn supervise(mut child: tokio::process::Child, task: &TaskRun) -> TaskOutcome {
    let mut group = ProcessGroup(child.id().and_then(|pid| i32::try_from(pid).ok()));
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let exited = async {
        let status = child.wait().await;
        // Background children would otherwise hold the pipes open.
        group.kill();
        status
    };
    let copied = async {
        tokio::join!(
            copy_lines(stdout, |line| task.write_stdout(line)),
            copy_lines(stderr, |line| task.write_stderr(line)),
        )
    };
    let (status, _) = tokio::join!(exited, copied);
    match status {
        Ok(status) => TaskOutcome::Exited(exit_code(status)),
        Err(e) => TaskOutcome::Failed(format!("Waiting for the task's process failed: {e}")),
    }
}

/// The code a container runtime reports: the exit code, or 128 + the
/// signal that killed the process.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}

/// Hands every line of `stream` to `write`, without its newline; bytes
/// that are not UTF-8 are replaced.
async fn copy_lines(stream: Option<impl AsyncRead + Unpin>, write: impl Fn(&str)) {
    let Some(stream) = stream else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                write(text.trim_end_matches(['\n', '\r']));
            }
        }
    }
}

/// The task's process group; killed when the task ends or is dropped.
#[derive(Debug)]
struct ProcessGroup(Option<i32>);

impl ProcessGroup {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH: every member has exited already.
            let _gone = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}
