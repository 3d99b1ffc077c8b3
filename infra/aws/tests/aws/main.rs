//! The DynamoDB store and the SQS queue against DynamoDB Local and moto: the
//! conformance suite, the store's own behaviour, and the queue. One test
//! binary, a module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod dynamo_conformance;
mod dynamo_store;
mod s3_artifacts;
mod sqs_queue;
