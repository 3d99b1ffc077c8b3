//! `vergence-wrapper -- <command> [args…]`: the entrypoint of a job's
//! image on container platforms. It downloads the job's inputs, runs the
//! command (passing signals on, copying its output to its own), then
//! uploads the declared outputs and the command's exact stdout and stderr,
//! and exits with the command's exit code. See docs/runners/wrapper.md.

mod capture;
mod child;
mod lambda;
mod protocol;
mod results;
mod signals;
mod transfer;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::ExitCode;

use crate::protocol::Protocol;
use crate::signals::Forwarding;
use crate::transfer::Transfer;

/// Exit code for a command line the wrapper cannot use (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
/// Exit code when the wrapper itself failed: an input could not be
/// downloaded (the command did not run), a result could not be uploaded
/// (after it ran), the protocol's variables are malformed (EX_SOFTWARE).
pub const EXIT_FAILED: u8 = 70;

const USAGE: &str = "usage: vergence-wrapper [--] <command> [args…]
       vergence-wrapper --lambda

Downloads $VERGENCE_INPUT_URLS into $VERGENCE_INPUT_DIR, runs the command,
then uploads the files of $VERGENCE_OUTPUT_URLS found in $VERGENCE_OUTPUT_DIR
and the command's stdout and stderr ($VERGENCE_STDOUT_URL,
$VERGENCE_STDERR_URL). Exits with the command's exit code (128 + the signal
that killed it); 70 when a download or an upload failed, 64 on a bad
command line.

--lambda (or no arguments where $AWS_LAMBDA_RUNTIME_API is set) serves a
Lambda function's invocations: each runs one job of Vergence's lambda
runner and uploads how it ended to $VERGENCE_RESULT_URL.";

/// What the wrapper can fail at on its own.
#[derive(Debug, thiserror::Error)]
pub enum WrapperError {
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    #[error("cannot block signals to pass them on: {0}")]
    BlockSignals(#[source] nix::errno::Errno),
    #[error("cannot start the thread that passes signals on: {0}")]
    SignalThread(#[source] std::io::Error),
    #[error("{variable} is malformed: {reason}")]
    Protocol { variable: String, reason: String },
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot download input {name} from {reason}; the command was not run")]
    Download { name: String, reason: String },
    #[error("{0}")]
    Lambda(String),
    #[error("cannot upload the job's results (the command exited with {exit_code}): {}", failures.join("; "))]
    Upload {
        exit_code: u8,
        failures: Vec<String>,
    },
}

impl WrapperError {
    fn exit_code(&self) -> u8 {
        match self {
            WrapperError::Usage(_) => EXIT_USAGE,
            _ => EXIT_FAILED,
        }
    }
}

fn main() -> ExitCode {
    // First, before any other thread exists (see `Forwarding::start`).
    let forwarding = Forwarding::start();
    let outcome = forwarding.and_then(|forwarding| {
        let mut peek = std::env::args_os().skip(1);
        let first = peek.next();
        if lambda::wanted(
            first.as_ref().and_then(|a| a.to_str()),
            peek.next().is_some(),
        ) {
            return lambda::serve(forwarding);
        }
        let Some((program, args)) = command_line(std::env::args_os().skip(1))? else {
            println!("{USAGE}");
            return Ok(0);
        };
        wrap(&program, &args, &forwarding)
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("vergence-wrapper: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The command and its arguments; `None` when help was asked for.
fn command_line(
    mut args: impl Iterator<Item = OsString>,
) -> Result<Option<(OsString, Vec<OsString>)>, WrapperError> {
    let mut first = args.next();
    match first.as_ref().and_then(|arg| arg.to_str()) {
        Some("--") => first = args.next(),
        Some("-h" | "--help") => return Ok(None),
        Some(option) if option.starts_with('-') => {
            return Err(WrapperError::Usage(format!("unknown option {option}")));
        }
        _ => {}
    }
    let program = first.ok_or_else(|| WrapperError::Usage("no command to run".to_owned()))?;
    Ok(Some((program, args.collect())))
}

/// Downloads, runs, uploads; returns the exit code to exit with.
fn wrap(
    program: &OsString,
    args: &[OsString],
    forwarding: &Forwarding,
) -> Result<u8, WrapperError> {
    let protocol = Protocol::read(|name| std::env::var(name).ok())?;
    let transfer = Transfer::new();
    if let Err(e) = results::prepare(&protocol, &transfer) {
        // So that the job's result says why, where platform logs are slow.
        results::report_early_failure(&protocol, &transfer, &e);
        return Err(e);
    }
    let finished = child::run(program, args, &BTreeMap::new(), &protocol, forwarding);
    let exit_code = finished.exit_code;
    results::upload(&protocol, &transfer, finished)?;
    Ok(exit_code)
}
