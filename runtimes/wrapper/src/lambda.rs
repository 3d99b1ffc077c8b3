//! The Lambda mode: `vergence-wrapper` as a Lambda function's custom
//! runtime (its `bootstrap`, or its image's entrypoint). Each invocation
//! is one Vergence job, sent by the Lambda runner as an asynchronous
//! invocation:
//!
//! ```json
//! {"vergenceJob": {"id": "apply-…", "command": ["./deploy.sh"], "env": {"PVN_…": "…"}}}
//! ```
//!
//! The job runs as in a container — inputs downloaded, the command run
//! with the job's environment, outputs and streams uploaded — and then how
//! it ended is uploaded to `$VERGENCE_RESULT_URL`, which is what the
//! runner's poll looks for: an asynchronous invocation's response goes
//! nowhere. The response says the same, for a synchronous caller.
//!
//! The invocation always succeeds, whatever the command did: a function
//! error would make Lambda invoke it again, and an apply must not run twice
//! because it failed once.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use lambda_runtime::{LambdaEvent, service_fn};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::WrapperError;
use crate::protocol::{self, Protocol};
use crate::signals::Forwarding;
use crate::transfer::Transfer;
use crate::{child, results};

/// The environment variables the Lambda runtime API client needs; Lambda
/// sets them, an emulator (`cargo lambda watch`) asks for them.
const RUNTIME_VARIABLES: [&str; 4] = [
    "AWS_LAMBDA_RUNTIME_API",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
];

/// Before the invocation's deadline, the command gets SIGTERM this long
/// ahead, then SIGKILL [`KILL_AHEAD`] ahead: the time left is the uploads'.
const TERM_AHEAD: Duration = Duration::from_secs(20);
const KILL_AHEAD: Duration = Duration::from_secs(10);

/// Whether the wrapper was started as a Lambda function: `--lambda`, or
/// no command at all where the Lambda runtime API is (a `bootstrap` gets
/// no arguments).
pub fn wanted(first: Option<&str>, has_more: bool) -> bool {
    match first {
        Some("--lambda") => true,
        None => !has_more && std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some(),
        Some(_) => false,
    }
}

/// Serves invocations until the runtime API goes away.
pub fn serve(forwarding: Forwarding) -> Result<u8, WrapperError> {
    let missing: Vec<&str> = RUNTIME_VARIABLES
        .into_iter()
        .filter(|name| std::env::var_os(name).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(WrapperError::Lambda(format!(
            "the Lambda mode needs {} in its environment (Lambda sets them; so does `cargo lambda watch`)",
            missing.join(", ")
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WrapperError::Lambda(format!("cannot start the async runtime: {e}")))?;
    let forwarding = Arc::new(forwarding);
    let handler = service_fn(move |event: LambdaEvent<Value>| {
        let forwarding = Arc::clone(&forwarding);
        async move {
            let deadline = event.context.deadline();
            // The job blocks (processes, pipes, HTTP): off the runtime's thread.
            let response = tokio::task::spawn_blocking(move || {
                invocation(&event.payload, deadline, &forwarding)
            })
            .await
            .unwrap_or_else(|e| json!({ "error": format!("the job's thread failed: {e}") }));
            Ok::<Value, lambda_runtime::Error>(response)
        }
    });
    runtime
        .block_on(lambda_runtime::run(handler))
        .map_err(|e| WrapperError::Lambda(format!("the Lambda runtime API failed: {e}")))?;
    Ok(0)
}

/// The job an invocation carries.
struct Job {
    id: String,
    program: OsString,
    args: Vec<OsString>,
    env: BTreeMap<String, String>,
}

fn job(payload: &Value) -> Result<Job, String> {
    let job = payload.get("vergenceJob").ok_or(
        "the event is not a Vergence job (no vergenceJob): this function runs vergence-wrapper's Lambda mode, invoked by Vergence's lambda runner",
    )?;
    let id = job
        .get("id")
        .and_then(Value::as_str)
        .ok_or("vergenceJob.id is missing")?
        .to_owned();
    let command: Vec<OsString> = job
        .get("command")
        .and_then(Value::as_array)
        .ok_or("vergenceJob.command is not a list")?
        .iter()
        .map(|arg| arg.as_str().map(OsString::from))
        .collect::<Option<_>>()
        .ok_or("vergenceJob.command has an argument that is not a string")?;
    let mut env = BTreeMap::new();
    for (name, value) in job
        .get("env")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let value = value
            .as_str()
            .ok_or_else(|| format!("vergenceJob.env.{name} is not a string"))?;
        env.insert(name.clone(), value.to_owned());
    }
    let mut command = command.into_iter();
    let program = command.next().ok_or("vergenceJob.command is empty")?;
    Ok(Job {
        id,
        program,
        args: command.collect(),
        env,
    })
}

/// Runs one job and reports how it ended; the invocation's response.
fn invocation(payload: &Value, deadline: SystemTime, forwarding: &Forwarding) -> Value {
    forwarding.preparing();
    let job = match job(payload) {
        Ok(job) => job,
        Err(e) => {
            eprintln!("vergence-wrapper: {e}");
            return json!({ "error": e });
        }
    };
    eprintln!("vergence-wrapper: job {}", job.id);
    let protocol = match Protocol::read(|name| job.env.get(name).cloned()) {
        Ok(protocol) => protocol,
        Err(e) => {
            eprintln!("vergence-wrapper: {e}");
            return json!({ "job": job.id, "error": e.to_string() });
        }
    };
    let transfer = Transfer::new();
    let started = Instant::now();
    // A warm function keeps /tmp: the last job's files are not this one's.
    for dir in [&protocol.input_dir, &protocol.output_dir]
        .into_iter()
        .flatten()
    {
        remove_dir(dir);
    }
    let (exit_code, timed_out, error) = match results::prepare(&protocol, &transfer) {
        Err(e) => {
            results::report_early_failure(&protocol, &transfer, &e);
            (crate::EXIT_FAILED, false, Some(e.to_string()))
        }
        Ok(()) => {
            let env: BTreeMap<String, String> = job
                .env
                .iter()
                .filter(|(name, _)| !protocol::URL_VARIABLES.contains(&name.as_str()))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            let watchdog = watchdog(deadline, forwarding);
            let finished = child::run(&job.program, &job.args, &env, &protocol, forwarding);
            let timed_out = watchdog.is_some_and(|(done, thread)| {
                let _ = done.send(());
                thread.join().unwrap_or(false)
            });
            let exit_code = finished.exit_code;
            let error = results::upload(&protocol, &transfer, finished)
                .err()
                .map(|e| e.to_string());
            (exit_code, timed_out, error)
        }
    };
    let mut result = json!({
        "exitCode": exit_code,
        "durationMs": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "timedOut": timed_out,
        "finishedAtMs": SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    });
    if let Some(error) = &error {
        eprintln!("vergence-wrapper: {error}");
        result["error"] = json!(error);
    }
    if let Some(url) = &protocol.result_url
        && let Err(e) = transfer.upload(url, result.to_string().as_bytes())
    {
        eprintln!("vergence-wrapper: cannot upload the job's result to {e}");
        result["error"] = json!(format!("cannot upload the job's result to {e}"));
    }
    result["job"] = json!(job.id);
    result
}

/// Stops the command before the invocation's deadline, unless told on the
/// returned sender that it ended; the thread says whether it stopped it.
/// `None` when the deadline has already passed as the job starts: not one
/// Lambda gives (an emulator's, such as `cargo lambda watch`'s fixed
/// 600000), so there is nothing to watch for.
type Watchdog = (mpsc::Sender<()>, std::thread::JoinHandle<bool>);

fn watchdog(deadline: SystemTime, forwarding: &Forwarding) -> Option<Watchdog> {
    let Ok(left) = deadline.duration_since(SystemTime::now()) else {
        eprintln!(
            "vergence-wrapper: the invocation's deadline has passed already; the command runs without one"
        );
        return None;
    };
    let (done, ended) = mpsc::channel::<()>();
    let term_in = left.saturating_sub(TERM_AHEAD);
    let kill_in = left.saturating_sub(KILL_AHEAD).saturating_sub(term_in);
    // Signals go through the forwarding's stage, which knows whether the
    // command's pid is still its own.
    let stage = forwarding.clone();
    let thread = std::thread::spawn(move || {
        if ended.recv_timeout(term_in) != Err(mpsc::RecvTimeoutError::Timeout) {
            return false;
        }
        let mut stopped = stage.signal_command(Signal::SIGTERM);
        eprintln!(
            "vergence-wrapper: the invocation's deadline is near; stopping the command (SIGTERM)"
        );
        if ended.recv_timeout(kill_in) == Err(mpsc::RecvTimeoutError::Timeout) {
            stopped |= stage.signal_command(Signal::SIGKILL);
        }
        stopped
    });
    Some((done, thread))
}

fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => eprintln!(
            "vergence-wrapper: cannot empty {} from an earlier job: {e}",
            dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_event_that_is_not_a_job_is_refused_saying_what_the_function_is() {
        let error = job(&json!({"key": "value"})).err().unwrap();
        assert!(error.contains("not a Vergence job"), "{error}");
        let error = job(&json!({"vergenceJob": {"id": "a", "command": []}}))
            .err()
            .unwrap();
        assert_eq!(error, "vergenceJob.command is empty");
        let parsed = job(&json!({"vergenceJob": {
            "id": "apply-1", "command": ["./deploy.sh", "x"], "env": {"PVN_VERSION": "2"}
        }}))
        .ok()
        .unwrap();
        assert_eq!(parsed.program, "./deploy.sh");
        assert_eq!(parsed.args, [OsString::from("x")]);
        assert_eq!(parsed.env["PVN_VERSION"], "2");
    }
}
