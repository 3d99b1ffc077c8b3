//! Jobs: run-to-completion invocations of a runtime's `fetch`, `apply` or
//! `getInfo`, executed by a runner.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::instance::{InstanceIds, InstanceKey};
use super::release::Version;
use super::runner::{RunnerSpec, SecretRef};

/// A job id. Deterministic per (instance, version, kind, sequence) so a
/// redelivered message can never create a second job for the same attempt.
/// Shared, not copied: the job, the instance's in-flight job and the events
/// about it carry the same id.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub Arc<str>);

impl JobId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobKind {
    Fetch,
    Apply,
    GetInfo,
    /// A protection check; exit 0 = pass.
    Protection,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Fetch => "fetch",
            JobKind::Apply => "apply",
            JobKind::GetInfo => "getInfo",
            JobKind::Protection => "protection",
        }
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fully resolved job: what to run, where, with what environment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    pub runner: RunnerSpec,
    pub image: Option<String>,
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Environment variables whose values are secrets.
    #[serde(default)]
    pub secret_env: BTreeMap<String, SecretRef>,
    /// Directory of the config file that defined the runtime, relative to
    /// the config root ("" for the root itself).
    pub working_dir: String,
    pub timeout: SignedDuration,
    /// Files the job writes to `$VERGENCE_OUTPUT_DIR` that are kept.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Set for the jobs of first-class runtimes, which run no command:
    /// the runner carries this out itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<crate::manifests::BuiltinJob>,
}

/// A file produced by one job and handed to another (a Terraform plan, say).
/// Its content lives in the [`ArtifactStore`](crate::ports::ArtifactStore)
/// (a directory locally, S3 in AWS); records only point at it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub name: String,
    /// Hex SHA-256 of the content, so a plan can be bound to an approval.
    pub sha256: String,
    pub size: u64,
    /// Where the content is in the artifact store.
    pub key: String,
}

impl Artifact {
    /// Describes `content` stored under `key`.
    pub fn of(name: impl Into<String>, key: impl Into<String>, content: &[u8]) -> Self {
        Self {
            name: name.into(),
            sha256: crate::hashing::sha256_hex(content),
            size: content.len() as u64,
            key: key.into(),
        }
    }

    /// Where a job's output `name` is kept: per job, so a container can be
    /// handed a URL to upload it to before anyone knows its digest.
    pub fn output_key(job: &JobId, name: &str) -> String {
        format!("jobs/{job}/outputs/{name}")
    }

    /// The job whose files hold `key` (the `<job>` of `jobs/<job>/…`).
    pub fn job_of(key: &str) -> Option<JobId> {
        let (job, _) = key.strip_prefix("jobs/")?.split_once('/')?;
        (!job.is_empty()).then(|| JobId(job.into()))
    }
}

/// Where a dispatched job runs, as its runner names it (an ECS task ARN, a
/// Cloud Run execution name): what polling and stopping it need.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobHandle(pub String);

impl JobHandle {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum JobOutcome {
    /// The process ran and exited; see the exit code.
    Exited,
    /// The job ran past its timeout and was killed.
    TimedOut,
    /// Nobody reported a result before the deadline.
    Lost,
    /// The runner could not start it (missing program, no runner configured).
    NotStarted {
        message: String,
        /// The runner lacked something that comes back by itself (its
        /// process was out of file descriptors): not a failed attempt;
        /// the job is started again later.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        transient: bool,
    },
    /// The platform ended it without the program's exit code: the image
    /// could not be pulled, the task was stopped by the platform, a quota.
    PlatformFailed { message: String },
    /// Vergence stopped it: a newer version or a rollback superseded it.
    Stopped { reason: String },
    /// A check that reads another system (a metric protection) could not
    /// read it: neither a pass nor a failure. It holds applies and never
    /// fails a version on its own.
    Inconclusive { message: String },
}

impl fmt::Display for JobOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobOutcome::Exited => f.write_str("exited"),
            JobOutcome::TimedOut => f.write_str("timed out"),
            JobOutcome::Lost => f.write_str("lost"),
            JobOutcome::NotStarted { message, .. } => write!(f, "not started: {message}"),
            JobOutcome::PlatformFailed { message } => {
                write!(f, "failed on its platform: {message}")
            }
            JobOutcome::Stopped { reason } => write!(f, "stopped: {reason}"),
            JobOutcome::Inconclusive { message } => write!(f, "inconclusive: {message}"),
        }
    }
}

/// What a runner reports when a job ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobResult {
    pub outcome: JobOutcome,
    pub exit_code: Option<i32>,
    /// Standard output, truncated to [`JobResult::MAX_STDOUT`] bytes.
    pub stdout: String,
    /// The last [`JobResult::STDERR_TAIL`] bytes of standard error.
    pub stderr_tail: String,
    pub duration_ms: u64,
    #[serde(default)]
    pub outputs: Vec<Artifact>,
    pub finished_at: Timestamp,
}

impl JobResult {
    /// Structured fetch output larger than this is rejected as malformed.
    pub const MAX_STDOUT: usize = 1024 * 1024;
    pub const STDERR_TAIL: usize = 4096;

    /// A result without output: the job never ran, or ran somewhere that
    /// said nothing about it.
    pub fn without_output(outcome: JobOutcome, at: Timestamp) -> Self {
        Self {
            outcome,
            exit_code: None,
            stdout: String::new(),
            stderr_tail: String::new(),
            duration_ms: 0,
            outputs: Vec::new(),
            finished_at: at,
        }
    }

    /// The result of a job a first-class runtime carried out with API calls
    /// in-process: what it printed (exit 0), or what the platform refused
    /// (exit 1, on stderr), as a program's result would say it.
    pub fn of_call(done: Result<String, String>, took: std::time::Duration, at: Timestamp) -> Self {
        let (code, stdout, stderr_tail) = match done {
            Ok(stdout) => (0, stdout, String::new()),
            Err(error) => (1, String::new(), error),
        };
        Self {
            outcome: JobOutcome::Exited,
            exit_code: Some(code),
            stdout,
            stderr_tail,
            duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            outputs: Vec::new(),
            finished_at: at,
        }
    }

    /// A result for a job that never ran.
    pub fn not_started(message: impl Into<String>, at: Timestamp) -> Self {
        Self::without_output(
            JobOutcome::NotStarted {
                message: message.into(),
                transient: false,
            },
            at,
        )
    }

    /// A result for a job that could not start for now, for lack of
    /// something that comes back by itself: not a failed attempt.
    pub fn not_started_for_now(message: impl Into<String>, at: Timestamp) -> Self {
        Self::without_output(
            JobOutcome::NotStarted {
                message: message.into(),
                transient: true,
            },
            at,
        )
    }

    /// True when it could not start for now and is to be started again
    /// later, without counting as a failed attempt.
    pub fn is_transient_not_started(&self) -> bool {
        matches!(
            self.outcome,
            JobOutcome::NotStarted {
                transient: true,
                ..
            }
        )
    }

    /// Replaces the job's known secret values in everything it printed and
    /// in the runner's messages, before the result is stored or shown.
    pub fn mask(&mut self, secrets: &crate::SecretMask) {
        if secrets.is_empty() {
            return;
        }
        secrets.apply_in_place(&mut self.stdout);
        secrets.apply_in_place(&mut self.stderr_tail);
        match &mut self.outcome {
            JobOutcome::NotStarted { message, .. }
            | JobOutcome::PlatformFailed { message }
            | JobOutcome::Inconclusive { message } => {
                secrets.apply_in_place(message);
            }
            JobOutcome::Stopped { reason } => secrets.apply_in_place(reason),
            JobOutcome::Exited | JobOutcome::TimedOut | JobOutcome::Lost => {}
        }
    }

    /// True when the process ran and exited with `code`.
    pub fn exited_with(&self, code: i32) -> bool {
        self.outcome == JobOutcome::Exited && self.exit_code == Some(code)
    }

    /// One line saying how the job ended, with what stderr says about it.
    pub fn describe(&self) -> String {
        let head = match (&self.outcome, self.exit_code) {
            (JobOutcome::Exited, Some(code)) => format!("exited with {code}"),
            (JobOutcome::Exited, None) => "exited without a code (killed by a signal)".to_owned(),
            (other, _) => other.to_string(),
        };
        match stderr_excerpt(&self.stderr_tail) {
            Some(excerpt) => format!("{head}: {excerpt}"),
            None => head,
        }
    }
}

/// The last non-empty line of some output, for one-line reasons.
pub fn last_line(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

/// Most lines of stderr a reason quotes.
const EXCERPT_LINES: usize = 5;
/// Longest stderr excerpt a reason quotes, in characters.
const EXCERPT_CHARS: usize = 600;

/// What stderr says about a failure, on one line: the first `Error:` block
/// when there is one (Terraform's and many tools' way of saying what went
/// wrong, often followed by warnings or hints), else the last few lines.
/// Box-drawing frames (`│`, `╷`, `╵`) are dropped.
pub fn stderr_excerpt(stderr: &str) -> Option<String> {
    let raw: Vec<&str> = stderr.lines().collect();
    let clean = |l: &str| l.trim_start_matches(['│', '╷', '╵']).trim().to_owned();
    let picked: Vec<String> = match raw.iter().position(|l| clean(l).starts_with("Error:")) {
        Some(start) => {
            let mut block = vec![clean(raw[start])];
            for line in &raw[start + 1..] {
                let text = clean(line);
                // A frame's end, or the next diagnostic, ends the block.
                if line.trim_start().starts_with('╵')
                    || text.starts_with("Error:")
                    || text.starts_with("Warning:")
                {
                    break;
                }
                if !text.is_empty() {
                    block.push(text);
                }
            }
            block
        }
        None => {
            let mut tail: Vec<String> = raw
                .iter()
                .rev()
                .map(|l| clean(l))
                .filter(|l| !l.is_empty())
                .take(3)
                .collect();
            tail.reverse();
            tail
        }
    };
    if picked.is_empty() {
        return None;
    }
    let joined = picked
        .into_iter()
        .take(EXCERPT_LINES)
        .collect::<Vec<_>>()
        .join(" / ");
    Some(match joined.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    })
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum JobState {
    /// Recorded, not yet handed to a runner.
    Created,
    /// Claimed and handed to a runner.
    Dispatched {
        at: Timestamp,
        /// Where it runs, once the runner said (asynchronous runners).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handle: Option<JobHandle>,
    },
    Finished {
        result: JobResult,
    },
}

/// A job as stored: written before dispatch so a redelivered message finds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    pub id: JobId,
    pub instance: InstanceKey,
    pub ids: Arc<InstanceIds>,
    pub kind: JobKind,
    pub version: Version,
    pub attempt: u32,
    /// The compiled spec, shared with the instance it came from.
    pub spec: Arc<JobSpec>,
    /// Absolute directory `spec.working_dir` is relative to, for local runs.
    pub workspace_root: Option<String>,
    #[serde(default)]
    pub inputs: Vec<Artifact>,
    pub created_at: Timestamp,
    pub deadline: Timestamp,
    pub state: JobState,
}

impl JobRecord {
    pub fn result(&self) -> Option<&JobResult> {
        match &self.state {
            JobState::Finished { result } => Some(result),
            _ => None,
        }
    }

    /// Where the runner said the job runs, once it said.
    pub fn handle(&self) -> Option<&JobHandle> {
        match &self.state {
            JobState::Dispatched { handle, .. } => handle.as_ref(),
            JobState::Created | JobState::Finished { .. } => None,
        }
    }

    /// The variables every job gets, under both the `VERGENCE_` and the
    /// `PVN_` prefix so existing Prodvana custom-runtime images run unchanged.
    pub fn context_env(&self) -> Vec<(String, String)> {
        let values = [
            ("APPLICATION", self.instance.application.as_str()),
            ("APPLICATION_ID", self.ids.application_id.as_str()),
            ("RELEASE_CHANNEL", self.instance.release_channel.as_str()),
            ("RELEASE_CHANNEL_ID", self.ids.release_channel_id.as_str()),
            ("SERVICE", self.instance.service.as_str()),
            ("SERVICE_ID", self.ids.service_id.as_str()),
            ("SERVICE_VERSION", self.version.as_str()),
            ("JOB_ID", self.id.as_str()),
        ];
        let mut env = Vec::with_capacity(values.len() * 2);
        for prefix in ["VERGENCE_", "PVN_"] {
            for (name, value) in values {
                env.push((format!("{prefix}{name}"), value.to_owned()));
            }
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excerpt_of_a_terraform_error_is_its_error_block_not_the_last_line() {
        let stderr = "╷\n│ Error: Error acquiring the state lock\n│ \n│ Error message: resource temporarily unavailable\n│ Lock Info:\n│   ID:        7d2c\n╵\n\nTerraform acquires a state lock to protect the state from being written\nby multiple users at the same time. Please resolve the issue above and try\nagain. For most commands, you can disable locking with the \"-lock=false\"\nflag, but this is not recommended.\n";
        let excerpt = stderr_excerpt(stderr).unwrap();
        assert!(
            excerpt.starts_with("Error: Error acquiring the state lock / Error message: resource temporarily unavailable"),
            "{excerpt}"
        );
        assert!(!excerpt.contains("not recommended"), "{excerpt}");
    }

    #[test]
    fn without_an_error_block_the_excerpt_is_the_last_lines() {
        assert_eq!(
            stderr_excerpt("one\n\ntwo\nthree\nfour\n").as_deref(),
            Some("two / three / four")
        );
        assert_eq!(stderr_excerpt("\n  \n"), None);
        let long = "x".repeat(5000);
        assert!(stderr_excerpt(&long).unwrap().ends_with('…'));
    }
}
