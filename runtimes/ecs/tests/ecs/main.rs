//! The ECS runner and the first-class ECS runtime against moto with the real
//! AWS SDK: dispatching tasks, reading their results, the task-state-change
//! event, and ECS services. One test binary, a module per area.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod dispatch;
mod results;
mod service;
mod task_state_change;
