//! How a task ended, read from what DescribeTasks says of it: the job
//! container's exit code when it has one, and otherwise why ECS stopped
//! the task (an image that cannot be pulled, a secret that cannot be read,
//! capacity taken back) or that Vergence stopped it.

use aws_sdk_ecs::primitives::DateTime;
use aws_sdk_ecs::types::{Task, TaskStopCode};
use jiff::Timestamp;
use vergence_container::Ended;

use crate::task_definition::CONTAINER;

/// What `stop` puts in front of its reason, so a stop by Vergence reads as
/// one in the console and in `stoppedReason`.
pub const STOP_REASON_PREFIX: &str = "Stopped by Vergence: ";

/// ECS keeps at most this many characters of a stop reason.
const MAX_STOP_REASON: usize = 255;

/// The `stoppedReason` StopTask is given for `reason`.
pub fn stop_reason(reason: &str) -> String {
    let full = format!("{STOP_REASON_PREFIX}{reason}");
    match full.char_indices().nth(MAX_STOP_REASON) {
        Some((cut, _)) => full[..cut].to_owned(),
        None => full,
    }
}

/// The task id: the last part of its ARN (both ARN formats end with it).
pub fn task_id(arn: &str) -> &str {
    arn.rsplit('/').next().unwrap_or(arn)
}

/// How the task ended; `None` while it has not stopped.
pub fn ended(task: &Task) -> Option<Ended> {
    if task.last_status() != Some("STOPPED") {
        return None;
    }
    let reason = task.stopped_reason().unwrap_or_default();
    if let Some(ours) = reason.strip_prefix(STOP_REASON_PREFIX) {
        return Some(Ended::Stopped(ours.to_owned()));
    }
    if task.stop_code() == Some(&TaskStopCode::UserInitiated) {
        let why = if reason.is_empty() {
            "stopped on ECS by a user"
        } else {
            reason
        };
        return Some(Ended::Stopped(why.to_owned()));
    }
    let container = task
        .containers()
        .iter()
        .find(|c| c.name() == Some(CONTAINER));
    if let Some(code) = container.and_then(|c| c.exit_code()) {
        return Some(Ended::Exited(code));
    }
    Some(Ended::PlatformFailed(platform_reason(
        task,
        container.and_then(|c| c.reason()),
    )))
}

/// Why ECS stopped a task without an exit code, in one line: the stop
/// code, the task's stopped reason and the container's reason, e.g.
/// `TaskFailedToStart: Task failed to start; container job:
/// CannotPullContainerError: pull image manifest has been retried…`.
fn platform_reason(task: &Task, container_reason: Option<&str>) -> String {
    let mut parts = Vec::new();
    let head = match (task.stop_code(), task.stopped_reason()) {
        (Some(code), Some(reason)) if !reason.is_empty() => format!("{}: {reason}", code.as_str()),
        (Some(code), _) => code.as_str().to_owned(),
        (None, Some(reason)) if !reason.is_empty() => reason.to_owned(),
        (None, _) => "the task stopped without an exit code".to_owned(),
    };
    parts.push(head);
    if let Some(reason) = container_reason.filter(|r| !r.is_empty()) {
        parts.push(format!("container {CONTAINER}: {reason}"));
    }
    parts.join("; ")
}

/// When the task's container started, if it did.
pub fn started_at(task: &Task) -> Option<Timestamp> {
    task.started_at().and_then(timestamp)
}

/// When the task stopped, if ECS says.
pub fn stopped_at(task: &Task) -> Option<Timestamp> {
    task.stopped_at().and_then(timestamp)
}

fn timestamp(at: &DateTime) -> Option<Timestamp> {
    Timestamp::new(at.secs(), i32::try_from(at.subsec_nanos()).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use aws_sdk_ecs::types::Container;

    use super::*;

    fn stopped(container: Container) -> aws_sdk_ecs::types::builders::TaskBuilder {
        Task::builder()
            .task_arn("arn:aws:ecs:eu-west-1:1:task/jobs/0f3c")
            .last_status("STOPPED")
            .containers(container)
    }

    fn job() -> aws_sdk_ecs::types::builders::ContainerBuilder {
        Container::builder().name(CONTAINER)
    }

    #[test]
    fn a_running_task_has_not_ended() {
        let task = Task::builder()
            .last_status("DEPROVISIONING")
            .containers(job().exit_code(0).build())
            .build();
        assert_eq!(ended(&task), None);
    }

    #[test]
    fn the_job_containers_exit_code_is_how_it_ended() {
        let sidecar = Container::builder().name("proxy").exit_code(9).build();
        let task = stopped(job().exit_code(2).build())
            .containers(sidecar)
            .stop_code(TaskStopCode::EssentialContainerExited)
            .stopped_reason("Essential container in task exited")
            .build();
        assert_eq!(ended(&task), Some(Ended::Exited(2)));
    }

    #[test]
    fn without_an_exit_code_the_platform_says_why() {
        let task = stopped(
            job()
                .reason("CannotPullContainerError: pull access denied for nope")
                .build(),
        )
        .stop_code(TaskStopCode::TaskFailedToStart)
        .stopped_reason("Task failed to start")
        .build();
        assert_eq!(
            ended(&task),
            Some(Ended::PlatformFailed(
                "TaskFailedToStart: Task failed to start; container job: CannotPullContainerError: pull access denied for nope".into()
            ))
        );
        let bare = stopped(job().build()).build();
        assert_eq!(
            ended(&bare),
            Some(Ended::PlatformFailed(
                "the task stopped without an exit code".into()
            ))
        );
    }

    #[test]
    fn a_stop_by_vergence_or_a_person_is_a_stop_even_with_an_exit_code() {
        let ours = stopped(job().exit_code(143).build())
            .stop_code(TaskStopCode::UserInitiated)
            .stopped_reason(stop_reason("superseded by v2"))
            .build();
        assert_eq!(
            ended(&ours),
            Some(Ended::Stopped("superseded by v2".into()))
        );
        let person = stopped(job().exit_code(137).build())
            .stop_code(TaskStopCode::UserInitiated)
            .stopped_reason("cleaning up")
            .build();
        assert_eq!(ended(&person), Some(Ended::Stopped("cleaning up".into())));
    }

    #[test]
    fn stop_reasons_fit_ecs_and_task_ids_end_the_arn() {
        let long = stop_reason(&"x".repeat(400));
        assert_eq!(long.chars().count(), 255);
        assert!(long.starts_with(STOP_REASON_PREFIX));
        assert_eq!(task_id("arn:aws:ecs:eu-west-1:1:task/jobs/0f3c"), "0f3c");
        assert_eq!(task_id("arn:aws:ecs:eu-west-1:1:task/0f3c"), "0f3c");
    }
}
