//! A job's process group. Every job runs in a group of its own so that
//! signals reach everything it started (a shell script's background children
//! included), and so that nothing it started outlives a timeout or a
//! cancelled job.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

use crate::procfs::{self, Stat};

/// How long a timed-out job gets between SIGTERM and SIGKILL.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(5);

/// How often the group is checked while it shuts down.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The group led by a job's process. While armed, dropping it kills the
/// group: that happens only when the job's future is dropped half-way
/// (runtime shutdown, cancellation), which must not leave processes behind.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: Option<Pid>,
    armed: bool,
}

impl ProcessGroup {
    /// The group of a child spawned with `process_group(0)`: its id is the
    /// child's pid. `None` (a child already reaped) gives a group that
    /// signals nothing.
    pub(crate) fn led_by(child_pid: Option<u32>) -> Self {
        let pgid = child_pid
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw);
        Self { pgid, armed: true }
    }

    /// The job was ended and its group with it: nothing more to kill.
    pub(crate) fn release(&mut self) {
        self.armed = false;
    }

    /// The job's process exited: whatever it left running in its group (a
    /// `server &`, a daemon that only closed its output) ends too, as the
    /// job's timeout or a stop would end it: SIGTERM, then SIGKILL after
    /// [`TERM_GRACE`]. A job owns nothing after it ends; a server meant to
    /// outlive its deploy belongs to a service manager. Returns whether
    /// anything was left.
    pub(crate) async fn end_leftovers(&mut self) -> bool {
        if !self.has_live_members() {
            self.armed = false;
            return false;
        }
        self.signal(Signal::SIGTERM);
        let gone = tokio::time::timeout(TERM_GRACE, async {
            while self.has_live_members() {
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        })
        .await
        .is_ok();
        if !gone {
            self.signal(Signal::SIGKILL);
        }
        self.armed = false;
        true
    }

    /// Kills the whole group at once, without a grace period.
    pub(crate) fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.armed = false;
    }

    /// Waits up to `within` for the child to exit and every other member of
    /// the group with it; returns whether they all did.
    pub(crate) async fn wait_gone(&self, child: &mut Child, within: Duration) -> bool {
        tokio::time::timeout(within, async {
            if let Err(e) = child.wait().await {
                tracing::debug!(error = %e, "waiting for a terminated job failed");
            }
            while self.has_live_members() {
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        })
        .await
        .is_ok()
    }

    /// Kills the group and reaps the child. Bounded: a process stuck in the
    /// kernel may ignore even SIGKILL for a while, and the job's result must
    /// still be reported.
    pub(crate) async fn kill_and_reap(&mut self, child: &mut Child) {
        self.kill();
        let _reaped = tokio::time::timeout(TERM_GRACE, child.wait()).await;
    }

    pub(crate) fn signal(&self, signal: Signal) {
        let Some(pgid) = self.pgid else {
            return;
        };
        match killpg(pgid, signal) {
            // No process left in the group: nothing to do.
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(pgid = pgid.as_raw(), %signal, error = %e, "cannot signal a job's process group")
            }
        }
    }

    /// Whether a process of the group still runs.
    fn has_live_members(&self) -> bool {
        let Some(pgid) = self.pgid else {
            return false;
        };
        match killpg(pgid, None) {
            Err(Errno::ESRCH) => false,
            // kill(2) also finds zombies, which stay around for good when the
            // init process does not reap orphans (common in containers), so
            // ask /proc, where it exists, whether a member is really alive.
            _ => live_member_in_proc(pgid).unwrap_or(true),
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// Whether /proc lists a process of group `pgid` that is not a zombie;
/// `None` without a readable /proc.
fn live_member_in_proc(pgid: Pid) -> Option<bool> {
    // A process that vanished between listing and reading is not alive.
    let live = procfs::pids()?
        .any(|pid| Stat::of(pid).is_some_and(|s| s.group == pgid.as_raw() && s.is_live()));
    Some(live)
}
