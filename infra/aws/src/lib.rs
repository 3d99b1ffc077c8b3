//! AWS adapters for the serverless shape: the DynamoDB [`DynamoStore`]
//! (every [`vergence_model::ports::StateStore`] record in one table), the
//! SQS [`SqsQueue`] ([`vergence_model::ports::WorkQueue`]) and the S3
//! [`S3ArtifactStore`] ([`vergence_model::ports::ArtifactStore`]), and the
//! [`AwsSecretReader`] ([`vergence_model::notification::SecretReader`]) of
//! notification secrets in SSM and Secrets Manager. Clients are built by the
//! caller (a Lambda's `main`, a test) and handed in.

pub mod dynamo;
mod error;
pub mod s3;
mod secrets;
pub mod sqs;
#[cfg(feature = "testing")]
pub mod testing;

pub use dynamo::{DEFAULT_EVENT_RETENTION, DynamoStore};
pub use error::AwsError;
pub use s3::S3ArtifactStore;
pub use secrets::AwsSecretReader;
#[cfg(feature = "testing")]
pub use sqs::ReceivedWork;
pub use sqs::{SqsQueue, WorkMessage};
