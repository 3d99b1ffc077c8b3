//! Signals sent to the wrapper are the platform stopping the job (`docker
//! stop`, ECS StopTask, a Cloud Run cancel): they are passed on to the
//! command, which decides what stopping means (Terraform releases its state
//! lock, say). Before the command starts the wrapper just exits; after it
//! ended, the results are uploaded first.

use std::sync::{Arc, Mutex, PoisonError};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::unistd::Pid;

use crate::WrapperError;

/// The signals passed on to the command.
const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Where the job is, which decides what a signal does.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// Downloading inputs: a signal ends the wrapper.
    Preparing,
    /// A signal goes to the command.
    Running(Pid),
    /// The command has ended (it may not be reaped yet, so its pid must
    /// not be signalled): uploads finish first.
    Finishing,
}

/// The thread that receives the wrapper's signals, and the stage it acts
/// on (shared by its clones).
#[derive(Clone, Debug)]
pub struct Forwarding {
    stage: Arc<Mutex<Stage>>,
}

impl Forwarding {
    /// Blocks the forwarded signals in this thread, and so in every thread
    /// started after, and starts the thread that waits for them. Must run
    /// before any other thread starts, or a signal could go to a thread
    /// that does not block it. The command gets a clean signal mask:
    /// `std::process::Command` resets it in the child.
    pub fn start() -> Result<Self, WrapperError> {
        let mut set = SigSet::empty();
        for signal in FORWARDED {
            set.add(signal);
        }
        set.thread_block().map_err(WrapperError::BlockSignals)?;
        let stage = Arc::new(Mutex::new(Stage::Preparing));
        let receiver_stage = Arc::clone(&stage);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || receive(&set, &receiver_stage))
            .map_err(WrapperError::SignalThread)?;
        Ok(Self { stage })
    }

    /// From now on signals go to `pid`.
    pub fn running(&self, pid: Pid) {
        self.set(Stage::Running(pid));
    }

    /// The command has ended: signals no longer go to it.
    pub fn finishing(&self) {
        self.set(Stage::Finishing);
    }

    /// Sends `signal` to the command if it is still running (not yet
    /// reaped, so its pid is still its own); whether it was sent.
    pub fn signal_command(&self, signal: Signal) -> bool {
        let stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner);
        match *stage {
            Stage::Running(pid) => kill(pid, signal).is_ok(),
            Stage::Preparing | Stage::Finishing => false,
        }
    }

    /// Back to before a command: the next invocation of the Lambda mode
    /// prepares its own.
    pub fn preparing(&self) {
        self.set(Stage::Preparing);
    }

    fn set(&self, stage: Stage) {
        *self.stage.lock().unwrap_or_else(PoisonError::into_inner) = stage;
    }
}

fn receive(set: &SigSet, stage: &Mutex<Stage>) {
    loop {
        let signal = match set.wait() {
            Ok(signal) => signal,
            Err(e) => {
                eprintln!(
                    "vergence-wrapper: cannot wait for signals any more ({e}); they are not passed on"
                );
                return;
            }
        };
        // Held while signalling, so the command is not reaped in between
        // and its pid reused.
        let stage = stage.lock().unwrap_or_else(PoisonError::into_inner);
        match *stage {
            Stage::Preparing => {
                eprintln!("vergence-wrapper: {signal} before the command started; exiting");
                std::process::exit(128 + signal as i32);
            }
            Stage::Running(pid) => match kill(pid, signal) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => {
                    eprintln!("vergence-wrapper: cannot pass {signal} on to the command: {e}")
                }
            },
            Stage::Finishing => {
                eprintln!(
                    "vergence-wrapper: {signal} after the command ended; finishing the uploads first"
                );
            }
        }
    }
}
