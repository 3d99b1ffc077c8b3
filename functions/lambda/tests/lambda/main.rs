//! The Lambda handlers against DynamoDB Local and moto (`scripts/services.sh
//! start && . .tools/services.env`; skipped without them): the scheduler's
//! notifier reading its secrets from SSM and Secrets Manager, and the
//! worker's bound on local jobs. One test binary, a module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod local_jobs;
mod notification_secrets;
