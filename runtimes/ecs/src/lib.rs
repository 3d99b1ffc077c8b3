//! The ECS runner: custom-runtime jobs (fetch, apply, getInfo, protection
//! checks) as Fargate tasks in the user's ECS cluster.
//!
//! - Each runtime image and runner settings get a task definition of their
//!   own, registered once and reused ([`TaskDefinitionSpec`]); secrets are
//!   part of it as `valueFrom` references.
//! - Each job is one task (RunTask with the job's command and plain
//!   environment as overrides, the job id as `startedBy` and `clientToken`),
//!   and its task ARN is the job's handle.
//! - Results come back when the task stops: the worker learns of it from
//!   the "ECS Task State Change" event ([`task_state_change`]) and, as the
//!   safety net, from later polls; either way [`EcsRunner`]'s `poll` reads
//!   the exit code (or ECS's reason), the output (the wrapper's exact
//!   streams, else the awslogs stream) and the declared output files.
//!
//! docs/runners/ecs.md says what the runner needs in the user's account.
//!
//! The crate also carries out the first-class ECS runtime
//! ([`EcsServices`]): task definitions and ECS services registered and
//! updated with the ECS API by whoever runs the engine, no task needed
//! (docs/runtimes/ecs.md).

mod clients;
mod error;
mod event;
mod logs;
mod registry;
mod run_task;
mod runner;
mod service;
mod task;
mod task_definition;
#[cfg(feature = "testing")]
pub mod testing;

pub use clients::EcsClients;
pub use error::EcsError;
pub use event::{TaskStateChange, task_state_change};
pub use logs::stream_name;
pub use run_task::{INSTANCE_TAG, JOB_TAG, MAX_OVERRIDES};
pub use runner::{EcsRunner, EcsSettings};
pub use service::EcsServices;
pub use task::STOP_REASON_PREFIX;
pub use task_definition::{CONTAINER, STREAM_PREFIX, TaskDefinitionSpec};
