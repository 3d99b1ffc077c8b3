//! Jobs: run-to-completion invocations of a runtime's `fetch`, `apply` or
//! `getInfo`, executed by a runner.

use std::collections::BTreeMap;
use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::instance::{InstanceIds, InstanceKey};
use super::release::Version;

/// A job id. Deterministic per (instance, version, kind, sequence) so a
/// redelivered message can never create a second job for the same attempt.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub String);

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

/// Where a job runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum RunnerSpec {
    /// A process on the machine running Vergence (or inside the worker).
    Local,
    /// A Kubernetes Job created by the agent running in the user's cluster.
    Kubernetes {
        agent: String,
        namespace: Option<String>,
    },
    /// An ECS task.
    #[serde(rename_all = "camelCase")]
    Ecs {
        cluster: String,
        subnets: Vec<String>,
        security_groups: Vec<String>,
        assign_public_ip: bool,
    },
    /// A Cloud Run job.
    CloudRun { project: String, region: String },
}

impl RunnerSpec {
    pub fn kind(&self) -> RunnerKind {
        match self {
            RunnerSpec::Local => RunnerKind::Local,
            RunnerSpec::Kubernetes { .. } => RunnerKind::Kubernetes,
            RunnerSpec::Ecs { .. } => RunnerKind::Ecs,
            RunnerSpec::CloudRun { .. } => RunnerKind::CloudRun,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// The kinds of runner, without their settings: what a deployment has a
/// runner for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunnerKind {
    Local,
    Kubernetes,
    Ecs,
    CloudRun,
}

impl RunnerKind {
    pub const ALL: [RunnerKind; 4] = [
        RunnerKind::Local,
        RunnerKind::Kubernetes,
        RunnerKind::Ecs,
        RunnerKind::CloudRun,
    ];

    /// The name used in config (`runner: {ecs: …}`) and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::Local => "local",
            RunnerKind::Kubernetes => "kubernetes",
            RunnerKind::Ecs => "ecs",
            RunnerKind::CloudRun => "cloudRun",
        }
    }
}

impl fmt::Display for RunnerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a secret value comes from. Secrets are resolved by the runner at
/// dispatch time and never stored or logged.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SecretRef {
    /// An environment variable of the process that runs the job's runner.
    FromEnv(String),
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
}

/// A file produced by one job and handed to another (a Terraform plan, say).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub name: String,
    /// Hex SHA-256 of the content, so a plan can be bound to an approval.
    pub sha256: String,
    /// The content, hex encoded so binary plans survive JSON stores.
    pub content_hex: String,
}

impl Artifact {
    pub fn new(name: impl Into<String>, content: &[u8]) -> Self {
        Self {
            name: name.into(),
            sha256: crate::hashing::sha256_hex(content),
            content_hex: hex::encode(content),
        }
    }

    pub fn content(&self) -> Result<Vec<u8>, String> {
        hex::decode(&self.content_hex)
            .map_err(|e| format!("artifact {} is corrupt: {e}", self.name))
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
    NotStarted { message: String },
}

impl fmt::Display for JobOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobOutcome::Exited => f.write_str("exited"),
            JobOutcome::TimedOut => f.write_str("timed out"),
            JobOutcome::Lost => f.write_str("lost"),
            JobOutcome::NotStarted { message } => write!(f, "not started: {message}"),
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

    /// A result for a job that never ran.
    pub fn not_started(message: impl Into<String>, at: Timestamp) -> Self {
        Self {
            outcome: JobOutcome::NotStarted {
                message: message.into(),
            },
            exit_code: None,
            stdout: String::new(),
            stderr_tail: String::new(),
            duration_ms: 0,
            outputs: Vec::new(),
            finished_at: at,
        }
    }

    /// True when the process ran and exited with `code`.
    pub fn exited_with(&self, code: i32) -> bool {
        self.outcome == JobOutcome::Exited && self.exit_code == Some(code)
    }

    /// One line saying how the job ended, with the end of stderr when useful.
    pub fn describe(&self) -> String {
        let head = match (&self.outcome, self.exit_code) {
            (JobOutcome::Exited, Some(code)) => format!("exited with {code}"),
            (JobOutcome::Exited, None) => "exited without a code (killed by a signal)".to_owned(),
            (other, _) => other.to_string(),
        };
        match last_line(&self.stderr_tail) {
            Some(line) => format!("{head}: {line}"),
            None => head,
        }
    }
}

/// The last non-empty line of some output, for one-line reasons.
pub fn last_line(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum JobState {
    /// Recorded, not yet handed to a runner.
    Created,
    /// Claimed and handed to a runner.
    Dispatched {
        at: Timestamp,
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
    pub ids: InstanceIds,
    pub kind: JobKind,
    pub version: Version,
    pub attempt: u32,
    pub spec: JobSpec,
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
