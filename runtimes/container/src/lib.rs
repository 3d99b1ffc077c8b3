//! What every runner that runs jobs in containers shares (ECS tasks, Cloud
//! Run jobs, Kubernetes Jobs, and the local runner's `docker run`): the
//! job's launch — image, command, environment, secrets by source — and how
//! its result is read back.
//!
//! A container cannot reach Vergence's artifact store, so a job's input and
//! output files travel through presigned URLs in its environment, and
//! `vergence-wrapper` (the image's entrypoint, when it has one) downloads
//! inputs, runs the command, and uploads the declared outputs and its exact
//! stdout and stderr. Without the wrapper, the exit code and the output
//! come from the platform (its task status and its logs).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use vergence_model::ports::{ArtifactStore, UrlAccess};
use vergence_model::{Artifact, JobId, JobOutcome, JobRecord, JobResult, SecretRef};

/// Environment variables of the container protocol, shared with
/// `vergence-wrapper`.
pub mod env {
    /// Where the job finds its input files.
    pub const INPUT_DIR: &str = "VERGENCE_INPUT_DIR";
    /// Where the job writes its declared output files.
    pub const OUTPUT_DIR: &str = "VERGENCE_OUTPUT_DIR";
    /// JSON object: input file name → URL to GET it from.
    pub const INPUT_URLS: &str = "VERGENCE_INPUT_URLS";
    /// JSON object: declared output name → URL to PUT it to.
    pub const OUTPUT_URLS: &str = "VERGENCE_OUTPUT_URLS";
    /// URL to PUT the command's standard output to.
    pub const STDOUT_URL: &str = "VERGENCE_STDOUT_URL";
    /// URL to PUT the command's standard error to.
    pub const STDERR_URL: &str = "VERGENCE_STDERR_URL";
    /// URL to PUT how the command ended to (JSON, [`super::WrapperResult`]),
    /// after everything else: set by runners whose platform does not say
    /// (the Lambda runner's asynchronous invocations).
    pub const RESULT_URL: &str = "VERGENCE_RESULT_URL";
}

/// Where inputs and outputs are inside a container.
pub const CONTAINER_INPUT_DIR: &str = "/tmp/vergence/input";
pub const CONTAINER_OUTPUT_DIR: &str = "/tmp/vergence/output";

/// The two streams a wrapper captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Where the wrapper uploads a job's stream.
pub fn stream_key(job: &JobId, stream: Stream) -> String {
    format!("jobs/{job}/{}", stream.name())
}

/// Where the wrapper uploads how a job ended, when asked to.
pub fn result_key(job: &JobId) -> String {
    format!("jobs/{job}/result")
}

/// How the command ended, as `vergence-wrapper` uploads it to
/// [`env::RESULT_URL`]: `{"exitCode": 0, "durationMs": 1200,
/// "finishedAtMs": 1790000000000}`, with `"timedOut": true` when the
/// wrapper stopped the command because the invocation's own deadline was
/// near, and `"error"` when an upload failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapperResult {
    pub exit_code: i32,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// When the command ended, by the function's clock.
    pub finished_at: Option<Timestamp>,
    /// What went wrong in the wrapper itself (an upload), if anything.
    pub error: Option<String>,
}

impl WrapperResult {
    /// Reads the wrapper's JSON; a sentence saying what is wrong otherwise.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("the wrapper's result is not JSON ({e})"))?;
        let exit_code = value
            .get("exitCode")
            .and_then(serde_json::Value::as_i64)
            .and_then(|c| i32::try_from(c).ok())
            .ok_or_else(|| "the wrapper's result has no exitCode".to_owned())?;
        Ok(Self {
            exit_code,
            duration_ms: value
                .get("durationMs")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
            timed_out: value
                .get("timedOut")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            finished_at: value
                .get("finishedAtMs")
                .and_then(serde_json::Value::as_i64)
                .and_then(|ms| Timestamp::from_millisecond(ms).ok()),
            error: value
                .get("error")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
        })
    }
}

/// The environment a job's command gets in a container or function: its
/// own variables, the context variables under both prefixes, the input and
/// output directories, and the URLs of its files and streams (valid for
/// `url_ttl`). Fails with a sentence when files must be handed over and
/// the store cannot make URLs.
pub async fn environment(
    job: &JobRecord,
    artifacts: &dyn ArtifactStore,
    url_ttl: SignedDuration,
) -> Result<BTreeMap<String, String>, String> {
    let mut env: BTreeMap<String, String> = job.spec.env.clone();
    env.extend(job.context_env());
    env.insert(env::INPUT_DIR.into(), CONTAINER_INPUT_DIR.into());
    env.insert(env::OUTPUT_DIR.into(), CONTAINER_OUTPUT_DIR.into());
    let mut inputs = serde_json::Map::new();
    for input in &job.inputs {
        let url = url(artifacts, &input.key, UrlAccess::Read, url_ttl).await?;
        inputs.insert(input.name.clone(), url.into());
    }
    let mut outputs = serde_json::Map::new();
    for name in &job.spec.outputs {
        let key = Artifact::output_key(&job.id, name);
        outputs.insert(
            name.clone(),
            url(artifacts, &key, UrlAccess::Write, url_ttl)
                .await?
                .into(),
        );
    }
    if !inputs.is_empty() {
        env.insert(
            env::INPUT_URLS.into(),
            serde_json::Value::Object(inputs).to_string(),
        );
    }
    if !outputs.is_empty() {
        env.insert(
            env::OUTPUT_URLS.into(),
            serde_json::Value::Object(outputs).to_string(),
        );
    }
    // Exact streams when the image runs vergence-wrapper; harmless when
    // it does not.
    for (var, stream) in [
        (env::STDOUT_URL, Stream::Stdout),
        (env::STDERR_URL, Stream::Stderr),
    ] {
        let key = stream_key(&job.id, stream);
        if let Some(url) = artifacts
            .presign(&key, UrlAccess::Write, url_ttl)
            .await
            .map_err(|e| {
                format!(
                    "cannot make an upload URL for the job's {}: {e}",
                    stream.name()
                )
            })?
        {
            env.insert(var.into(), url);
        }
    }
    Ok(env)
}

/// What a container runner starts.
#[derive(Clone, PartialEq, Eq)]
pub struct Launch {
    pub image: String,
    /// The program and its arguments (the image's entrypoint is replaced).
    pub command: Vec<String>,
    /// Plain variables: the job's own, the context variables under both
    /// prefixes, the input and output directories and the artifact URLs.
    pub env: BTreeMap<String, String>,
    /// Variables whose values the platform resolves from a secret store.
    pub secrets: BTreeMap<String, SecretRef>,
}

impl std::fmt::Debug for Launch {
    // The URLs in the environment are credentials; they are not logged.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("image", &self.image)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("secrets", &self.secrets)
            .finish()
    }
}

impl Launch {
    /// The launch of `job`, with URLs valid for `url_ttl` for its files.
    /// Fails with a sentence when the job cannot run in a container: no
    /// image, or files to hand over and a store that cannot make URLs.
    pub async fn prepare(
        job: &JobRecord,
        artifacts: &dyn ArtifactStore,
        url_ttl: SignedDuration,
    ) -> Result<Self, String> {
        let image = job.spec.image.clone().ok_or_else(|| {
            format!(
                "the {} job has no image: jobs on the {} runner run in containers; give the program an image",
                job.kind,
                job.spec.runner.name()
            )
        })?;
        let env = environment(job, artifacts, url_ttl).await?;
        Ok(Self {
            image,
            command: job.spec.cmd.clone(),
            env,
            secrets: job.spec.secret_env.clone(),
        })
    }
}

async fn url(
    artifacts: &dyn ArtifactStore,
    key: &str,
    access: UrlAccess,
    ttl: SignedDuration,
) -> Result<String, String> {
    artifacts
        .presign(key, access, ttl)
        .await
        .map_err(|e| format!("cannot make a URL for artifact {key}: {e}"))?
        .ok_or_else(|| {
            format!(
                "artifact {key} must reach a container, but this deployment's artifact store cannot hand out URLs"
            )
        })
}

/// How a container ended, as its platform saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The program exited with this code.
    Exited(i32),
    /// The platform ended it without an exit code (the image could not be
    /// pulled, the task was stopped by the platform, a quota): why.
    PlatformFailed(String),
    /// It ran past its timeout on the platform.
    TimedOut,
    /// Vergence (or a person) stopped it: why.
    Stopped(String),
}

/// What the platform logged of the job. Platforms that cannot tell the
/// streams apart (awslogs, pod logs) put everything in `stdout`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlatformLogs {
    pub stdout: String,
    pub stderr: String,
}

/// The streams the wrapper uploaded, if it ran: exact where platform logs
/// may mix them. Read before asking the platform for its logs.
pub async fn captured_streams(
    job: &JobRecord,
    artifacts: &dyn ArtifactStore,
) -> vergence_model::Result<Option<PlatformLogs>> {
    let stdout = artifacts.get(&stream_key(&job.id, Stream::Stdout)).await?;
    let Some(stdout) = stdout else {
        return Ok(None);
    };
    let stderr = artifacts
        .get(&stream_key(&job.id, Stream::Stderr))
        .await?
        .unwrap_or_default();
    Ok(Some(PlatformLogs {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }))
}

/// The declared outputs the job uploaded (absent ones are simply missing).
pub async fn outputs(
    job: &JobRecord,
    artifacts: &dyn ArtifactStore,
) -> vergence_model::Result<Vec<Artifact>> {
    let mut found = Vec::new();
    for name in &job.spec.outputs {
        let key = Artifact::output_key(&job.id, name);
        if let Some(content) = artifacts.get(&key).await? {
            found.push(Artifact::of(name.as_str(), key, &content));
        }
    }
    Ok(found)
}

/// The job's result from how it ended, its streams and its outputs:
/// stdout bounded to [`JobResult::MAX_STDOUT`], the tail of stderr.
pub fn result(
    ended: Ended,
    logs: PlatformLogs,
    outputs: Vec<Artifact>,
    started_at: Option<Timestamp>,
    finished_at: Timestamp,
) -> JobResult {
    let (outcome, exit_code) = match ended {
        Ended::Exited(code) => (JobOutcome::Exited, Some(code)),
        Ended::PlatformFailed(message) => (JobOutcome::PlatformFailed { message }, None),
        Ended::TimedOut => (JobOutcome::TimedOut, None),
        Ended::Stopped(reason) => (JobOutcome::Stopped { reason }, None),
    };
    let duration_ms = started_at
        .map(|s| finished_at.duration_since(s))
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .unwrap_or(0);
    JobResult {
        outcome,
        exit_code,
        stdout: head(&logs.stdout, JobResult::MAX_STDOUT),
        stderr_tail: tail(&logs.stderr, JobResult::STDERR_TAIL),
        duration_ms,
        outputs,
        finished_at,
    }
}

/// The first `max` bytes of `text`, cut at a character boundary.
pub fn head(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

#[cfg(test)]
mod tests;
