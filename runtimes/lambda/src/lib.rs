//! The Lambda runner: custom-runtime jobs (fetch, apply, getInfo,
//! protection checks) as asynchronous invocations (`InvocationType:
//! Event`) of the user's Lambda function, which runs `vergence-wrapper` in
//! its Lambda mode (docs/runners/lambda.md).
//!
//! - Dispatch sends the job — its command, and its environment with the
//!   presigned URLs of its files and streams as for a container — as the
//!   invocation's payload, and returns as soon as Lambda has queued it.
//! - The wrapper runs the command, uploads outputs, stderr and stdout, and
//!   last how the command ended (`jobs/<job>/result`); poll looks for that
//!   file, as the ECS runner looks at its task, and reads the rest then.
//! - Lambda cannot stop an invocation: `stop` says so in the log, and the
//!   wrapper itself stops the command before the function's timeout.
//!
//! Asynchronous, not synchronous: a synchronous Invoke holds its caller for
//! as long as the job runs (up to 15 minutes), and the caller is the
//! serverless worker, a Lambda function with its own timeout and an SQS
//! message's visibility. Dispatch and poll keep the worker's calls short,
//! as for ECS tasks and Cloud Run executions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_lambda::config::Region;
use aws_sdk_lambda::config::http::HttpResponse;
use aws_sdk_lambda::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use tracing::{info, instrument};
use vergence_container::{Ended, PlatformLogs, WrapperResult};
use vergence_model::ports::{ArtifactStore, JobProgress, Runner, UrlAccess};
use vergence_model::{JobHandle, JobRecord, JobResult, LambdaRunnerSpec, RunnerSpec};

/// Lambda queues asynchronous invocations of at most this many bytes.
pub const MAX_PAYLOAD: usize = 256 * 1024;

/// Where the runner notes that a job's invocation was queued (its request
/// id), so a repeated dispatch adopts it instead of invoking again.
fn invoked_key(job: &JobRecord) -> String {
    format!("jobs/{}/invoked", job.id)
}

/// The crate's one error type; at the `Runner` port it becomes
/// `vergence_model::Error::Runner { runner: "lambda", .. }`.
#[derive(Debug, thiserror::Error)]
pub enum LambdaError {
    #[error("job {job} is for the {runner} runner, not lambda")]
    NotALambdaJob { job: String, runner: &'static str },

    #[error(
        "no region for function {function}: set `region` in the runtime's lambda runner, name the function by its ARN, or give Vergence's AWS clients a region"
    )]
    NoRegion { function: String },

    #[error("{message}")]
    Launch { message: String },

    #[error(
        "the lambda runner needs an S3 artifact bucket: the function reports each job's result through it (give `vergence up` or `vergence serve` --artifact-bucket BUCKET)"
    )]
    NoUrls,

    #[error(
        "secret variable {variable} comes from {origin}, which the lambda runner cannot hand to a function; set it in the function's own configuration (environment, or read it from the secret store in the command)"
    )]
    UnreadableSecret { variable: String, origin: String },

    #[error(
        "the job's command and environment come to {size} bytes of invocation payload; Lambda queues at most {limit} (the artifact URLs count too: fewer declared outputs or inputs help)"
    )]
    PayloadTooLarge { size: usize, limit: usize },

    #[error("Invoke of function {function} failed: {detail}")]
    Invoke {
        function: String,
        detail: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    #[error("Invoke of function {function} answered HTTP {status}: {detail}")]
    Refused {
        function: String,
        status: i32,
        detail: String,
    },

    #[error("the files of job {job}: {source}")]
    Artifacts {
        job: String,
        #[source]
        source: vergence_model::Error,
    },

    #[error(
        "the result function {function} uploaded for job {job} is unreadable: {reason} (is the function running vergence-wrapper in its Lambda mode?)"
    )]
    BadResult {
        function: String,
        job: String,
        reason: String,
    },
}

impl From<LambdaError> for vergence_model::Error {
    fn from(error: LambdaError) -> Self {
        vergence_model::Error::Runner {
            runner: "lambda".to_owned(),
            message: error.to_string(),
        }
    }
}

/// How the runner treats every job.
#[derive(Clone, Debug)]
pub struct LambdaSettings {
    /// Added to a job's timeout for the life of its artifact URLs: an
    /// asynchronous invocation may wait in Lambda's queue before it runs.
    pub url_margin: SignedDuration,
}

impl Default for LambdaSettings {
    fn default() -> Self {
        Self {
            url_margin: SignedDuration::from_mins(30),
        }
    }
}

/// Runs jobs as asynchronous invocations of a Lambda function.
pub struct LambdaRunner {
    client: aws_sdk_lambda::Client,
    /// Clients of regions other than `client`'s own, made on first use.
    regional: Mutex<HashMap<String, aws_sdk_lambda::Client>>,
    artifacts: Arc<dyn ArtifactStore>,
    settings: LambdaSettings,
}

impl std::fmt::Debug for LambdaRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LambdaRunner")
            .field("region", &self.client.config().region())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl LambdaRunner {
    /// A runner invoking functions through `client` (whose region is the
    /// one of runtimes that name none), keeping job files in `artifacts`.
    pub fn new(
        client: aws_sdk_lambda::Client,
        artifacts: Arc<dyn ArtifactStore>,
        settings: LambdaSettings,
    ) -> Self {
        Self {
            client,
            regional: Mutex::new(HashMap::new()),
            artifacts,
            settings,
        }
    }

    fn spec<'a>(&self, job: &'a JobRecord) -> Result<&'a LambdaRunnerSpec, LambdaError> {
        match &job.spec.runner {
            RunnerSpec::Lambda(spec) => Ok(spec),
            other => Err(LambdaError::NotALambdaJob {
                job: job.id.to_string(),
                runner: other.name(),
            }),
        }
    }

    /// The client of the function's region: its ARN's, the settings', or
    /// the runner's own.
    fn client_for(&self, spec: &LambdaRunnerSpec) -> Result<aws_sdk_lambda::Client, LambdaError> {
        let own = self.client.config().region().map(|r| r.as_ref().to_owned());
        let wanted = arn_region(&spec.function).or(spec.region.as_deref());
        match (wanted, own) {
            (Some(wanted), Some(own)) if wanted == own => Ok(self.client.clone()),
            (Some(wanted), _) => {
                let mut regional = self.regional.lock().unwrap_or_else(PoisonError::into_inner);
                Ok(regional
                    .entry(wanted.to_owned())
                    .or_insert_with(|| {
                        let config = self
                            .client
                            .config()
                            .to_builder()
                            .region(Region::new(wanted.to_owned()))
                            .build();
                        aws_sdk_lambda::Client::from_conf(config)
                    })
                    .clone())
            }
            (None, Some(_)) => Ok(self.client.clone()),
            (None, None) => Err(LambdaError::NoRegion {
                function: spec.function.clone(),
            }),
        }
    }

    /// Queues the job's invocation, or finds the one already queued.
    #[instrument(name = "lambda.dispatch", skip_all, fields(job = %job.id, function = function(job)))]
    async fn invoke(&self, job: &JobRecord) -> Result<JobHandle, LambdaError> {
        let spec = self.spec(job)?;
        let artifacts = |source| LambdaError::Artifacts {
            job: job.id.to_string(),
            source,
        };
        // A redelivered dispatch, or a racing worker, finds the invocation
        // the first one queued: Lambda has no idempotency token for Invoke.
        if let Some(noted) = self
            .artifacts
            .get(&invoked_key(job))
            .await
            .map_err(artifacts)?
        {
            let request = String::from_utf8_lossy(&noted).into_owned();
            info!(request = %request, "the job's invocation was already queued; adopting it");
            return Ok(JobHandle(request));
        }
        if let Some((variable, origin)) = job.spec.secret_env.iter().next() {
            return Err(LambdaError::UnreadableSecret {
                variable: variable.clone(),
                origin: origin.describe(),
            });
        }
        let ttl = job.spec.timeout.saturating_add(self.settings.url_margin);
        // The function reports through this URL: without one, nothing
        // would ever say how the job ended.
        let result_url = self
            .artifacts
            .presign(
                &vergence_container::result_key(&job.id),
                UrlAccess::Write,
                ttl,
            )
            .await
            .map_err(artifacts)?
            .ok_or(LambdaError::NoUrls)?;
        let launch = |message| LambdaError::Launch { message };
        let mut env = vergence_container::environment(job, self.artifacts.as_ref(), ttl)
            .await
            .map_err(launch)?;
        env.insert(vergence_container::env::RESULT_URL.to_owned(), result_url);
        let payload = json!({
            "vergenceJob": {
                "id": job.id.as_str(),
                "command": job.spec.cmd,
                "env": env,
            }
        })
        .to_string();
        if payload.len() > MAX_PAYLOAD {
            return Err(LambdaError::PayloadTooLarge {
                size: payload.len(),
                limit: MAX_PAYLOAD,
            });
        }
        let client = self.client_for(spec)?;
        let output = client
            .invoke()
            .function_name(&spec.function)
            .set_qualifier(spec.qualifier.clone())
            .invocation_type(InvocationType::Event)
            .payload(Blob::new(payload))
            .send()
            .await
            .map_err(|e| LambdaError::Invoke {
                function: spec.function.clone(),
                detail: describe(&e),
                source: Box::new(e),
            })?;
        // 202: queued. A 200 is a function that already ran (an emulator
        // that runs every invocation synchronously): its result is there.
        let status = output.status_code();
        if !(200..300).contains(&status) {
            return Err(LambdaError::Refused {
                function: spec.function.clone(),
                status,
                detail: output
                    .function_error()
                    .unwrap_or("no function error given")
                    .to_owned(),
            });
        }
        let request = aws_sdk_lambda::operation::RequestId::request_id(&output)
            .map_or_else(|| job.id.to_string(), str::to_owned);
        self.artifacts
            .put(&invoked_key(job), request.as_bytes())
            .await
            .map_err(artifacts)?;
        info!(request = %request, status, "queued the job's invocation");
        Ok(JobHandle(request))
    }

    /// Whether the wrapper has reported how the job ended, and the result.
    #[instrument(name = "lambda.poll", skip_all, fields(job = %job.id, function = function(job)))]
    async fn progress(&self, job: &JobRecord) -> Result<JobProgress, LambdaError> {
        let spec = self.spec(job)?;
        let artifacts = |source| LambdaError::Artifacts {
            job: job.id.to_string(),
            source,
        };
        let Some(reported) = self
            .artifacts
            .get(&vergence_container::result_key(&job.id))
            .await
            .map_err(artifacts)?
        else {
            return Ok(JobProgress::Running);
        };
        let reported =
            WrapperResult::parse(&reported).map_err(|reason| LambdaError::BadResult {
                function: spec.function.clone(),
                job: job.id.to_string(),
                reason,
            })?;
        let captured = vergence_container::captured_streams(job, self.artifacts.as_ref())
            .await
            .map_err(artifacts)?;
        let mut output = captured.unwrap_or_else(|| PlatformLogs {
            stdout: String::new(),
            stderr: format!(
                "vergence-wrapper did not upload the command's output; see the function's logs in CloudWatch (/aws/lambda/{})\n",
                spec.function
            ),
        });
        if let Some(error) = &reported.error
            && !output.stderr.contains(error.as_str())
        {
            output
                .stderr
                .push_str(&format!("vergence-wrapper: {error}\n"));
        }
        let outputs = vergence_container::outputs(job, self.artifacts.as_ref())
            .await
            .map_err(artifacts)?;
        let finished = reported.finished_at.unwrap_or_else(Timestamp::now);
        let started = finished
            .checked_sub(SignedDuration::from_millis(
                i64::try_from(reported.duration_ms).unwrap_or(i64::MAX),
            ))
            .ok();
        let ended = if reported.timed_out {
            Ended::TimedOut
        } else {
            Ended::Exited(reported.exit_code)
        };
        let result: JobResult =
            vergence_container::result(ended, output, outputs, started, finished);
        info!(outcome = %result.outcome, exit_code = ?result.exit_code, "the job's invocation reported");
        Ok(JobProgress::Finished(result))
    }
}

/// The region an ARN names (`arn:aws:lambda:REGION:…`).
fn arn_region(function: &str) -> Option<&str> {
    let mut parts = function.split(':');
    (parts.next() == Some("arn"))
        .then(|| parts.nth(2))
        .flatten()
        .filter(|r| !r.is_empty())
}

/// The function of a Lambda job, for spans.
fn function(job: &JobRecord) -> &str {
    match &job.spec.runner {
        RunnerSpec::Lambda(spec) => &spec.function,
        _ => "",
    }
}

/// An SDK error in a sentence: Lambda's code and message, or for an
/// answer without them the HTTP status and the start of the body.
fn describe<E>(error: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    if let Some(service) = error.as_service_error()
        && let Some(message) = service.message()
    {
        return format!("{}: {message}", service.code().unwrap_or("error"));
    }
    if let Some(raw) = error.raw_response() {
        let body = raw
            .body()
            .bytes()
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned())
            .unwrap_or_default();
        return format!("HTTP {}: {}", raw.status().as_u16(), body.trim());
    }
    DisplayErrorContext(error).to_string()
}

#[async_trait]
impl Runner for LambdaRunner {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        Ok(Some(self.invoke(job).await?))
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(self.progress(job).await?)
    }

    async fn stop(&self, job: &JobRecord, reason: &str) -> vergence_model::Result<()> {
        // Lambda has no call that ends a running invocation; the wrapper
        // stops the command before the function's own timeout.
        info!(job = %job.id, reason, "Lambda cannot stop an invocation; it runs until its command ends or the function times out");
        Ok(())
    }
}
