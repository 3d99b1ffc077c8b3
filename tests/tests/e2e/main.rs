//! End-to-end tests across Vergence's crates: the serverless worker, scheduler
//! and API against DynamoDB Local and moto (with faults injected), the ECS
//! and Cloud Run runners and runtimes and the Lambda runner through the
//! worker, notifications, the Lambda binaries under a Lambda runtime API,
//! the CLI's tokens in a deployment's table, the layering of the
//! crates, and (ignored, on request) scale. One test binary, a module per
//! area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_poll_cost;
mod cli_tokens_dynamodb;
mod lambda_build;
mod lambda_logs;
mod lambda_smoke;
mod layering;
mod scale;
mod serverless;
mod serverless_cloud_run;
mod serverless_cloud_run_runtime;
mod serverless_ecs;
mod serverless_ecs_runtime;
mod serverless_faults;
mod serverless_lambda;
mod serverless_notifications;
mod stack;
