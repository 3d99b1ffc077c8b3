//! Which process holds a local job. A job dispatched by the local runner of
//! one `vergence` process (an `up`, an `up --watch`, a `serve`) runs as a
//! child of that process and only that process can report its result. Its
//! handle names the process, so another `vergence` process sharing the
//! state can tell "it runs there, wait" from "the process that ran it is
//! gone, it will never report": the second is lost at once instead of at
//! the job's deadline (30 minutes by default).

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use vergence_model::{JobHandle, JobId};

use crate::procfs::{self, Stat};

const PREFIX: &str = "local:";

/// A process, told apart from a later one with the same pid by its start
/// time (in clock ticks since boot; `None` where /proc is not readable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    host: String,
    pid: i32,
    start: Option<u64>,
}

/// What became of a job's owner.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// This very process.
    Me,
    Alive,
    /// Ended (or its pid was reused by a later process).
    Gone,
    /// On another machine: nothing can be said from here.
    Elsewhere,
}

impl Owner {
    pub(crate) fn this_process() -> Self {
        let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        Self {
            host: host_name(),
            pid,
            start: start_time(pid),
        }
    }

    pub(crate) fn handle(&self) -> JobHandle {
        let start = self.start.map(|s| s.to_string()).unwrap_or_default();
        JobHandle(format!(
            "{PREFIX}host={};pid={};start={start}",
            self.host, self.pid
        ))
    }

    /// The owner a handle names; `None` for a handle of another form.
    pub(crate) fn parse(handle: &JobHandle) -> Option<Self> {
        let rest = handle.as_str().strip_prefix(PREFIX)?;
        let (mut host, mut pid, mut start) = (None, None, None);
        for part in rest.split(';') {
            match part.split_once('=')? {
                ("host", value) => host = Some(value.to_owned()),
                ("pid", value) => pid = value.parse().ok(),
                ("start", value) => start = Some(value.parse().ok()),
                _ => {}
            }
        }
        Some(Self {
            host: host?,
            pid: pid?,
            start: start.flatten(),
        })
    }

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    pub(crate) fn liveness(&self, me: &Owner) -> Liveness {
        if self.host != me.host {
            return Liveness::Elsewhere;
        }
        if self == me {
            return Liveness::Me;
        }
        let exists = !matches!(
            kill(Pid::from_raw(self.pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if !exists {
            return Liveness::Gone;
        }
        match (self.start, start_time(self.pid)) {
            (Some(recorded), Some(now)) if recorded != now => Liveness::Gone,
            _ => Liveness::Alive,
        }
    }
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

fn start_time(pid: i32) -> Option<u64> {
    Stat::of(pid)?.start
}

/// The processes still running for job `id`, found by the `VERGENCE_JOB_ID`
/// every job's process inherits (a job's children too, unless they clear
/// their environment). Empty where /proc is not readable.
pub(crate) fn job_processes(id: &JobId) -> Vec<Pid> {
    let Some(pids) = procfs::pids() else {
        return Vec::new();
    };
    let needle = format!("VERGENCE_JOB_ID={}", id.as_str());
    pids.filter(|pid| {
        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
            environ
                .split(|b| *b == 0)
                .any(|var| var == needle.as_bytes())
        }) && Stat::of(*pid).is_some_and(|s| s.is_live())
    })
    .map(Pid::from_raw)
    .collect()
}

/// Ends the processes a job left behind when the process that ran it died:
/// SIGTERM, `grace` to exit, then SIGKILL.
pub(crate) async fn end_orphans(id: &JobId, grace: Duration) -> usize {
    let orphans = job_processes(id);
    for pid in &orphans {
        let _ = kill(*pid, Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline && !job_processes(id).is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for pid in job_processes(id) {
        let _ = kill(pid, Signal::SIGKILL);
    }
    orphans.len()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_handle_names_its_process_and_reads_back() {
        let me = Owner::this_process();
        let parsed = Owner::parse(&me.handle()).unwrap();
        assert_eq!(parsed, me);
        assert_eq!(parsed.liveness(&me), Liveness::Me);
        assert!(Owner::parse(&JobHandle("arn:aws:ecs:task/1".into())).is_none());
    }

    #[test]
    fn a_process_that_ended_or_whose_pid_was_reused_is_gone() {
        let me = Owner::this_process();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        child.wait().unwrap();
        let ended = Owner {
            host: me.host.clone(),
            pid,
            start: Some(1),
        };
        assert_eq!(ended.liveness(&me), Liveness::Gone);
        let reused = Owner {
            start: me.start.map(|s| s + 1),
            ..me.clone()
        };
        assert_eq!(reused.liveness(&me), Liveness::Gone);
        let parent = Owner {
            pid: nix::unistd::getppid().as_raw(),
            start: start_time(nix::unistd::getppid().as_raw()),
            ..me.clone()
        };
        assert_eq!(parent.liveness(&me), Liveness::Alive);
        let remote = Owner {
            host: "elsewhere.example".into(),
            ..me
        };
        assert_eq!(remote.liveness(&Owner::this_process()), Liveness::Elsewhere);
    }
}
