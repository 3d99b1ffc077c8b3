//! The one error type of the Cloud Run runner, named after the operation
//! that failed, and its conversion to the core's error at the port.

use google_cloud_gax::error::rpc::Code;

/// What went wrong talking to Cloud Run, Cloud Logging or the artifact store.
#[derive(Debug, thiserror::Error)]
pub enum CloudRunError {
    /// No Google credentials could be built from the environment.
    #[error(
        "cannot load Google application-default credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's ADC file, or the metadata server): {0}"
    )]
    Credentials(#[source] google_cloud_auth::build_errors::Error),

    /// A credential configuration given as text is not one.
    #[error("the Google credential configuration {source_name} is invalid: {reason}")]
    CredentialConfig { source_name: String, reason: String },

    /// A client could not be built.
    #[error("cannot build the {client} client: {source}")]
    Client {
        client: &'static str,
        #[source]
        source: google_cloud_gax::client_builder::Error,
    },

    /// The job cannot run in a container as given (no image, files and a
    /// store that cannot hand out URLs).
    #[error("the job cannot run on Cloud Run: {0}")]
    Launch(String),

    /// A job whose runner is not Cloud Run was handed to this runner.
    #[error("job {job} names the {runner} runner, not cloudRun")]
    WrongRunner { job: String, runner: &'static str },

    /// A secret variable whose source Cloud Run cannot read.
    #[error("secret variable {variable}: {reason}")]
    Secret { variable: String, reason: String },

    /// A Cloud Run or Cloud Logging call failed.
    #[error("{operation} {resource}: {source}")]
    Api {
        operation: &'static str,
        resource: String,
        #[source]
        source: google_cloud_gax::error::Error,
    },

    /// A long-running operation ended in an error.
    #[error("{operation} {resource} failed: {message}")]
    Operation {
        operation: &'static str,
        resource: String,
        message: String,
    },

    /// Running a job answered without the execution it started.
    #[error("running {job} answered without its execution: {detail}")]
    NoExecution { job: String, detail: String },

    /// Reading or presigning in the artifact store failed.
    #[error("artifact store: {0}")]
    Artifacts(#[source] vergence_model::Error),
}

impl CloudRunError {
    pub(crate) fn api(
        operation: &'static str,
        resource: impl Into<String>,
    ) -> impl FnOnce(google_cloud_gax::error::Error) -> Self {
        let resource = resource.into();
        move |source| CloudRunError::Api {
            operation,
            resource,
            source,
        }
    }

    /// The `google.rpc.Code` of a failed API call, if it carried one.
    pub(crate) fn code(&self) -> Option<Code> {
        match self {
            CloudRunError::Api { source, .. } => source.status().map(|s| s.code),
            _ => None,
        }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.code() == Some(Code::NotFound)
    }
}

impl From<CloudRunError> for vergence_model::Error {
    fn from(error: CloudRunError) -> Self {
        vergence_model::Error::Runner {
            runner: vergence_model::RunnerKind::CloudRun.as_str().to_owned(),
            message: error.to_string(),
        }
    }
}
