//! Running the command: its environment without the protocol's URLs, its
//! stdout and stderr copied to the wrapper's own (so platform logs still
//! show them) while their head and tail are kept, and its end awaited —
//! reaping any orphan handed to the wrapper on the way, as PID 1 must.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

use crate::capture::{Head, Tail};
use crate::protocol::{self, MAX_STDOUT, Protocol, STDERR_TAIL};
use crate::signals::Forwarding;

/// How long the streams are still read once the command has exited: a
/// background child of it may hold them open indefinitely.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How the command ended and what it wrote.
#[derive(Debug)]
pub struct Finished {
    /// The wrapper's exit code: the command's, or 128 + the signal that
    /// killed it, or 126/127 when it could not run.
    pub exit_code: u8,
    pub stdout: Head,
    pub stderr: Tail,
    /// What the wrapper has to say about how it ended, for stderr.
    pub notes: Vec<String>,
}

/// Runs `program` with `args` and waits for it; `env` is added to the
/// wrapper's own environment (the job's, in the Lambda mode).
pub fn run(
    program: &OsString,
    args: &[OsString],
    env: &BTreeMap<String, String>,
    protocol: &Protocol,
    forwarding: &Forwarding,
) -> Finished {
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(env)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in protocol::URL_VARIABLES {
        command.env_remove(name);
    }
    // Set when the wrapper chose them, so the command finds the same.
    for (name, dir) in [
        (protocol::INPUT_DIR, &protocol.input_dir),
        (protocol::OUTPUT_DIR, &protocol.output_dir),
    ] {
        if let Some(dir) = dir {
            command.env(name, dir);
        }
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return not_run(program, &e),
    };
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    forwarding.running(pid);
    let stdout = Arc::new(Mutex::new(Head::new(MAX_STDOUT)));
    let stderr = Arc::new(Mutex::new(Tail::new(STDERR_TAIL)));
    let (done, drained) = mpsc::channel();
    if let Some(pipe) = child.stdout.take() {
        tee(
            pipe,
            std::io::stdout(),
            Arc::clone(&stdout),
            Head::push,
            done.clone(),
        );
    }
    if let Some(pipe) = child.stderr.take() {
        tee(
            pipe,
            std::io::stderr(),
            Arc::clone(&stderr),
            Tail::push,
            done,
        );
    }
    let status = wait_for(pid, forwarding);
    // Each stream reports when it was read to its end (or gave up); a
    // stream never opened dropped its sender, which ends the wait too.
    let deadline = Instant::now() + DRAIN_GRACE;
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        if drained.recv_timeout(left).is_err() {
            break;
        }
    }
    let mut notes = Vec::new();
    let exit_code = exit_code(status, &mut notes);
    Finished {
        exit_code,
        stdout: take(&stdout, Head::new(0)),
        stderr: take(&stderr, Tail::new(STDERR_TAIL)),
        notes,
    }
}

fn not_run(program: &OsString, e: &std::io::Error) -> Finished {
    // The codes a shell uses for the same failures.
    let exit_code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Finished {
        exit_code,
        stdout: Head::new(0),
        stderr: Tail::new(STDERR_TAIL),
        notes: vec![format!(
            "vergence-wrapper: cannot run {}: {e}",
            program.to_string_lossy()
        )],
    }
}

/// Copies `from` to `to` while keeping what `keep` keeps of it.
fn tee<K: Send + 'static>(
    mut from: impl Read + Send + 'static,
    mut to: impl Write + Send + 'static,
    kept: Arc<Mutex<K>>,
    keep: fn(&mut K, &[u8]),
    done: mpsc::Sender<()>,
) {
    std::thread::spawn(move || {
        let mut buffer = vec![0_u8; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    keep(
                        &mut kept.lock().unwrap_or_else(PoisonError::into_inner),
                        &buffer[..n],
                    );
                    // The platform's log may be gone; the copy kept is what counts.
                    let _ = to.write_all(&buffer[..n]).and_then(|()| to.flush());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done.send(());
    });
}

/// Waits until `pid` exits, reaping other children on the way: as a
/// container's PID 1 the wrapper inherits every orphan. Signals stop going
/// to `pid` before it is reaped, so they never reach a reused pid.
fn wait_for(pid: Pid, forwarding: &Forwarding) -> Option<WaitStatus> {
    loop {
        match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(status) if status.pid() == Some(pid) => {
                forwarding.finishing();
                return waitpid(pid, None).ok();
            }
            Ok(other) => {
                if let Some(orphan) = other.pid() {
                    let _ = waitpid(orphan, None);
                }
            }
            Err(Errno::EINTR) => {}
            Err(e) => {
                eprintln!("vergence-wrapper: lost track of the command: {e}");
                forwarding.finishing();
                return None;
            }
        }
    }
}

fn exit_code(status: Option<WaitStatus>, notes: &mut Vec<String>) -> u8 {
    match status {
        Some(WaitStatus::Exited(_, code)) => u8::try_from(code).unwrap_or(u8::MAX),
        Some(WaitStatus::Signaled(_, signal, _)) => {
            notes.push(format!("killed by signal {} ({signal})", signal as i32));
            signal_exit_code(signal)
        }
        _ => {
            notes.push("vergence-wrapper: the command's exit status is unknown".to_owned());
            crate::EXIT_FAILED
        }
    }
}

/// 128 + the signal, as shells report it.
fn signal_exit_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(u8::MAX)
}

fn take<T>(shared: &Mutex<T>, empty: T) -> T {
    std::mem::replace(
        &mut shared.lock().unwrap_or_else(PoisonError::into_inner),
        empty,
    )
}
