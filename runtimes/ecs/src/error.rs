//! The crate's one error type. Every variant names the ECS or CloudWatch
//! Logs operation that failed and what it was about (cluster, task or
//! service, task definition family, log stream); at the `Runner` port it becomes
//! `vergence_model::Error::Runner { runner: "ecs", .. }`.

use aws_sdk_ecs::config::http::HttpResponse;
use aws_sdk_ecs::error::{
    BoxError, BuildError, DisplayErrorContext, ProvideErrorMetadata, SdkError,
};

#[derive(Debug, thiserror::Error)]
pub enum EcsError {
    /// The job was routed here but names another runner.
    #[error("job {job} is for the {runner} runner, not ecs")]
    NotAnEcsJob { job: String, runner: &'static str },

    /// ECS keeps at most 36 characters of `startedBy`, which is how the
    /// runner finds a job's task again.
    #[error("job id {job} is {len} characters; ECS's startedBy holds at most 36")]
    JobIdTooLong { job: String, len: usize },

    /// Neither the runner settings nor the client name a region.
    #[error(
        "no region for cluster {cluster}: set `region` in the runtime's ecs runner, or give Vergence's AWS clients a region"
    )]
    NoRegion { cluster: String },

    /// The job cannot run in a container (no image, no artifact URLs).
    #[error("{message}")]
    Launch { message: String },

    /// A secret comes from a store ECS cannot read.
    #[error(
        "secret variable {variable} comes from {origin}, which ECS tasks cannot read; give it an AWS Secrets Manager secret or an SSM parameter"
    )]
    UnreadableSecret { variable: String, origin: String },

    /// RunTask takes at most 8 KiB of overrides (command and environment).
    #[error(
        "the job's command and environment come to {size} characters of RunTask overrides; ECS takes at most {limit} (the artifact URLs count too: fewer declared outputs or inputs help)"
    )]
    OverridesTooLarge { size: usize, limit: usize },

    /// A request could not be put together (a required field was missing).
    #[error("{operation}: cannot build the request: {source}")]
    BuildRequest {
        operation: &'static str,
        #[source]
        source: BuildError,
    },

    #[error("DescribeTaskDefinition of family {family} failed: {detail}")]
    DescribeTaskDefinition {
        family: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("TagResource of {resource} (marking it as Vergence's) failed: {detail}")]
    TagResource {
        resource: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("RegisterTaskDefinition of family {family} failed: {detail}")]
    RegisterTaskDefinition {
        family: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("ListTasks of job {job} in cluster {cluster} failed: {detail}")]
    ListTasks {
        cluster: String,
        job: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("RunTask of family {family} in cluster {cluster} failed: {detail}")]
    RunTask {
        cluster: String,
        family: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    /// RunTask answered, but started nothing (`failures[]`: no capacity,
    /// a missing cluster, a bad subnet).
    #[error("RunTask of family {family} in cluster {cluster} started no task: {reasons}")]
    RunTaskRefused {
        cluster: String,
        family: String,
        reasons: String,
    },

    #[error("DescribeTasks of task {task} in cluster {cluster} failed: {detail}")]
    DescribeTasks {
        cluster: String,
        task: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("StopTask of task {task} in cluster {cluster} failed: {detail}")]
    StopTask {
        cluster: String,
        task: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("GetLogEvents of stream {stream} in log group {group} failed: {detail}")]
    GetLogEvents {
        group: String,
        stream: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    /// The job's streams or outputs could not be read from the artifact store.
    #[error("reading the artifacts of job {job} failed: {source}")]
    Artifacts {
        job: String,
        #[source]
        source: vergence_model::Error,
    },

    /// A job routed to the ECS runtime carries no ECS service.
    #[error("job {job} is not a job of the first-class ECS runtime")]
    NotAnEcsServiceJob { job: String },

    /// The rendered request of a service's file is not a JSON object
    /// (the compiler checked it; a spec from another version might not be).
    #[error("the {what} of ECS service {service} is not a JSON object: {source}")]
    InvalidServiceRequest {
        service: String,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error("DescribeServices of service {service} in cluster {cluster} failed: {detail}")]
    DescribeServices {
        cluster: String,
        service: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("DescribeServiceDeployments of service {service} ({deployment}) failed: {detail}")]
    DescribeServiceDeployments {
        service: String,
        deployment: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("CreateService of service {service} in cluster {cluster} failed: {detail}")]
    CreateService {
        cluster: String,
        service: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    #[error("UpdateService of service {service} in cluster {cluster} failed: {detail}")]
    UpdateService {
        cluster: String,
        service: String,
        detail: String,
        #[source]
        source: BoxError,
    },

    /// ECS is deleting the service; it cannot be updated nor created again
    /// until it is gone.
    #[error(
        "ECS service {service} in cluster {cluster} is being deleted (DRAINING); the apply is tried again once it is gone"
    )]
    ServiceDraining { cluster: String, service: String },

    /// ECS answered without what it always returns.
    #[error("{operation} answered without {missing}")]
    IncompleteAnswer {
        operation: &'static str,
        missing: &'static str,
    },

    /// A queue message is not an ECS task state change event.
    #[error("not an ECS task state change event: {reason}")]
    InvalidEvent { reason: String },
}

/// What an SDK error says, in one line: the service's code and message, or
/// the whole chain for failures that never reached the service. An answer
/// without an AWS error message (a proxy's or load balancer's 502 page) is
/// told by its HTTP status and the start of its body.
pub(crate) fn describe<E>(error: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match error.as_service_error() {
        Some(service) => {
            let code = service.code().unwrap_or("error");
            match service.message().filter(|m| !m.trim().is_empty()) {
                Some(message) => format!("{code}: {message}"),
                None => match error.raw_response() {
                    Some(response) => format!("{code}: {}", http_answer(response)),
                    None => format!("{code}: (no message)"),
                },
            }
        }
        None => DisplayErrorContext(error).to_string(),
    }
}

/// How much of an answer's body an error quotes.
const BODY_QUOTED: usize = 200;

/// An HTTP answer without an AWS error message, for an error's line: its
/// status and the first [`BODY_QUOTED`] bytes of its body, quoted with
/// control characters escaped (an HTML page's line ends too).
fn http_answer(response: &HttpResponse) -> String {
    let status = response.status().as_u16();
    let body = response.body().bytes().unwrap_or_default();
    if body.is_empty() {
        return format!("HTTP {status} without an error message, and an empty body");
    }
    let head = String::from_utf8_lossy(&body[..body.len().min(BODY_QUOTED)]);
    let more = if body.len() > BODY_QUOTED {
        format!(" (first {BODY_QUOTED} of {} bytes)", body.len())
    } else {
        String::new()
    };
    format!("HTTP {status} without an error message; body {head:?}{more}")
}

impl EcsError {
    pub(crate) fn build(operation: &'static str) -> impl Fn(BuildError) -> Self {
        move |source| EcsError::BuildRequest { operation, source }
    }
}

impl From<EcsError> for vergence_model::Error {
    fn from(error: EcsError) -> Self {
        vergence_model::Error::Runner {
            runner: "ecs".to_owned(),
            message: error.to_string(),
        }
    }
}
