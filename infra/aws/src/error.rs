//! The crate's one error type, converted to the core's error at the port
//! boundary with whether retrying can help (so the worker can choose between
//! "retry the message" and "record a failure").

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{
    BoxError, BuildError, DisplayErrorContext, ProvideErrorMetadata, SdkError,
};

#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// A DynamoDB call failed for a reason other than a lost condition.
    #[error("{operation}: DynamoDB: {detail}")]
    Dynamo {
        operation: &'static str,
        retryable: bool,
        detail: String,
        #[source]
        source: BoxError,
    },
    /// DynamoDB kept leaving writes of a batch unprocessed (throttling).
    #[error("{operation}: DynamoDB left {count} writes unprocessed after several attempts")]
    Unprocessed {
        operation: &'static str,
        count: usize,
    },
    /// An SQS call failed.
    #[error("{operation}: SQS: {detail}")]
    Sqs {
        operation: &'static str,
        retryable: bool,
        detail: String,
        #[source]
        source: BoxError,
    },
    /// An S3 call of the artifact store failed.
    #[error("{operation}: S3: {detail}")]
    S3 {
        operation: &'static str,
        retryable: bool,
        detail: String,
        #[source]
        source: BoxError,
    },
    /// SendMessageBatch answered, but refused some of the messages.
    #[error("{operation}: SQS refused {failed} of {total} messages; first: {first}")]
    SqsRefused {
        operation: &'static str,
        failed: usize,
        total: usize,
        first: String,
        retryable: bool,
    },
    /// A request could not be put together (a required field was missing).
    #[error("{operation}: cannot build the request: {source}")]
    BuildRequest {
        operation: &'static str,
        #[source]
        source: BuildError,
    },
    #[error("{operation}: cannot encode a record: {source}")]
    Encode {
        operation: &'static str,
        #[source]
        source: BoxError,
    },
    #[error(
        "{operation}: {what} is unreadable (written by another version of vergence?): {source}"
    )]
    Decode {
        operation: &'static str,
        what: String,
        #[source]
        source: BoxError,
    },
    /// A record exceeds what DynamoDB can store for it.
    #[error("{operation}: {what} is {size} bytes encoded; at most {limit} can be stored")]
    TooLarge {
        operation: &'static str,
        what: String,
        size: usize,
        limit: usize,
    },
    /// A conditional write lost to a concurrent writer.
    #[error("{what} was changed concurrently")]
    Conflict { what: String },
    /// A work message body is not one this crate wrote.
    #[error("not a vergence work message: {source}")]
    InvalidMessage {
        #[source]
        source: serde_json::Error,
    },
}

/// Error codes that say "not now" rather than "never": throttling, a
/// service-side fault, or a transaction still settling on the same items.
const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "InternalServerError",
    "InternalFailure",
    "InternalError",
    "ServiceUnavailable",
    "TransactionInProgressException",
    "TransactionConflictException",
    "ReplicatedWriteConflictException",
    "RequestThrottled",
    "AWS.SimpleQueueService.RequestThrottled",
    "KmsThrottled",
];

/// Whether an SDK error is worth retrying: connection problems, timeouts,
/// garbled responses, server faults and throttling are; client faults
/// (validation, missing table, access denied) are not.
pub(crate) fn is_retryable<E: ProvideErrorMetadata>(error: &SdkError<E, HttpResponse>) -> bool {
    match error {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(service) => {
            service.raw().status().is_server_error()
                || error
                    .code()
                    .is_some_and(|code| RETRYABLE_CODES.contains(&code))
        }
        _ => false,
    }
}

impl AwsError {
    pub(crate) fn dynamo<E>(operation: &'static str, error: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        AwsError::Dynamo {
            operation,
            retryable: is_retryable(&error),
            detail: DisplayErrorContext(&error).to_string(),
            source: Box::new(error),
        }
    }

    /// A DynamoDB failure that is not a single call's (a waiter giving up).
    pub(crate) fn dynamo_other(
        operation: &'static str,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        AwsError::Dynamo {
            operation,
            retryable: true,
            detail: DisplayErrorContext(&error).to_string(),
            source: Box::new(error),
        }
    }

    pub(crate) fn s3<E>(operation: &'static str, error: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        AwsError::S3 {
            operation,
            retryable: is_retryable(&error),
            detail: DisplayErrorContext(&error).to_string(),
            source: Box::new(error),
        }
    }

    pub(crate) fn sqs<E>(operation: &'static str, error: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        AwsError::Sqs {
            operation,
            retryable: is_retryable(&error),
            detail: DisplayErrorContext(&error).to_string(),
            source: Box::new(error),
        }
    }

    pub(crate) fn build(operation: &'static str) -> impl FnOnce(BuildError) -> Self {
        move |source| AwsError::BuildRequest { operation, source }
    }

    pub(crate) fn decode(
        operation: &'static str,
        what: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        AwsError::Decode {
            operation,
            what: what.into(),
            source: source.into(),
        }
    }

    pub(crate) fn conflict(what: impl Into<String>) -> Self {
        AwsError::Conflict { what: what.into() }
    }

    /// Whether the same call may succeed later (throttling, a timeout, a
    /// lost race); callers at the edge retry the message for these.
    pub fn is_retryable(&self) -> bool {
        match self {
            AwsError::Dynamo { retryable, .. }
            | AwsError::S3 { retryable, .. }
            | AwsError::Sqs { retryable, .. }
            | AwsError::SqsRefused { retryable, .. } => *retryable,
            AwsError::Conflict { .. } | AwsError::Unprocessed { .. } => true,
            AwsError::BuildRequest { .. }
            | AwsError::Encode { .. }
            | AwsError::Decode { .. }
            | AwsError::TooLarge { .. }
            | AwsError::InvalidMessage { .. } => false,
        }
    }

    fn operation(&self) -> &'static str {
        match self {
            AwsError::Dynamo { operation, .. }
            | AwsError::S3 { operation, .. }
            | AwsError::Sqs { operation, .. }
            | AwsError::SqsRefused { operation, .. }
            | AwsError::Unprocessed { operation, .. }
            | AwsError::BuildRequest { operation, .. }
            | AwsError::Encode { operation, .. }
            | AwsError::Decode { operation, .. }
            | AwsError::TooLarge { operation, .. } => operation,
            AwsError::Conflict { .. } => "write",
            AwsError::InvalidMessage { .. } => "parse message",
        }
    }

    fn is_queue_error(&self) -> bool {
        matches!(
            self,
            AwsError::Sqs { .. } | AwsError::SqsRefused { .. } | AwsError::InvalidMessage { .. }
        )
    }

    /// The core's error for a failure of the work queue, whatever the
    /// cause (encoding a message counts as the queue's failure too).
    pub(crate) fn into_queue_error(self) -> vergence_model::Error {
        match self {
            AwsError::Conflict { what } => vergence_model::Error::Conflict { what },
            other => vergence_model::Error::Queue {
                operation: other.operation(),
                retryable: other.is_retryable(),
                source: Box::new(other),
            },
        }
    }
}

impl From<AwsError> for vergence_model::Error {
    fn from(error: AwsError) -> Self {
        match error {
            AwsError::Conflict { what } => vergence_model::Error::Conflict { what },
            other if other.is_queue_error() => other.into_queue_error(),
            other => vergence_model::Error::Store {
                operation: other.operation(),
                retryable: other.is_retryable(),
                source: Box::new(other),
            },
        }
    }
}
