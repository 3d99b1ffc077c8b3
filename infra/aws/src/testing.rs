//! Clients and fresh tables and queues for tests against the stand-ins of
//! TESTING.md (DynamoDB Local, moto), with random names so tests run in
//! parallel against one server. Compiled with the `testing` feature, for this
//! crate's tests and the end-to-end tests.
// Test support: a failure to set up a stand-in should stop the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use crate::{DynamoStore, SqsQueue};
use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

pub use vergence_testkit::{DYNAMODB_URL, SQS_URL, endpoint, unique_name};

/// Static credentials, us-east-1, and one attempt per call so a stand-in's
/// error fails the test at once instead of after retries.
pub async fn sdk_config(url: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("testing", "testing", None, None, "static"))
        .retry_config(RetryConfig::standard().with_max_attempts(1))
        .load()
        .await
}

pub async fn dynamodb_client(url: &str) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&sdk_config(url).await)
}

/// A store over a new, empty table.
pub async fn fresh_store(url: String) -> Arc<DynamoStore> {
    let client = dynamodb_client(&url).await;
    let table = unique_name("vergence-test");
    DynamoStore::create_table(&client, &table)
        .await
        .expect("create the test table");
    Arc::new(DynamoStore::new(client, table))
}

/// A queue over a new, empty SQS queue.
pub async fn fresh_queue(url: &str) -> SqsQueue {
    let client = aws_sdk_sqs::Client::new(&sdk_config(url).await);
    let created = client
        .create_queue()
        .queue_name(unique_name("vergence-test"))
        .send()
        .await
        .expect("create the test queue");
    let queue_url = created.queue_url().expect("a queue url").to_owned();
    SqsQueue::new(client, queue_url)
}

/// An S3 client for a stand-in (path-style addressing) and a new, empty
/// bucket in it.
pub async fn fresh_bucket(url: &str) -> (aws_sdk_s3::Client, String) {
    let config = aws_sdk_s3::config::Builder::from(&sdk_config(url).await)
        .force_path_style(true)
        .build();
    let client = aws_sdk_s3::Client::from_conf(config);
    let bucket = unique_name("vergence-test");
    client
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create the test bucket");
    (client, bucket)
}
