//! How a completed execution ended, in the container protocol's terms:
//! the task's exit code when its program exited, the platform's reason
//! when it never ran or was stopped (an image that does not exist, a
//! quota, a signal), a timeout, or a cancellation.

use google_cloud_gax::error::rpc::Code;
use google_cloud_run_v2::model::condition::ExecutionReason;
use google_cloud_run_v2::model::{Condition, Execution, Task};
use vergence_container::Ended;

/// Whether reading how `execution` ended needs its task: a failed one
/// says its exit code (or its reason) only there.
pub(crate) fn needs_task(execution: &Execution) -> bool {
    !succeeded(execution) && !cancelled(execution)
}

/// How a completed execution ended; `task` is its task when
/// [`needs_task`] says so.
pub(crate) fn ended(execution: &Execution, task: Option<&Task>) -> Ended {
    if succeeded(execution) {
        return Ended::Exited(0);
    }
    let message = completed(execution)
        .map(|c| c.message.clone())
        .filter(|m| !m.is_empty());
    if cancelled(execution) {
        return Ended::Stopped(match message {
            Some(message) => format!("cancelled on Cloud Run: {message}"),
            None => "cancelled on Cloud Run".to_owned(),
        });
    }
    let attempt = task.and_then(|t| t.last_attempt_result.as_ref());
    if let Some(attempt) = attempt {
        // At most one of exit code and signal is set; a failed attempt
        // that exited did so with a code other than 0.
        if attempt.exit_code != 0 {
            return Ended::Exited(attempt.exit_code);
        }
        let status = attempt.status.as_ref();
        if status.is_some_and(|s| s.code == Code::DeadlineExceeded as i32) {
            return Ended::TimedOut;
        }
        let detail = status
            .map(|s| s.message.clone())
            .filter(|m| !m.is_empty())
            .or(message.clone());
        if attempt.term_signal != 0 {
            return Ended::PlatformFailed(format!(
                "the container was terminated by signal {}{}",
                attempt.term_signal,
                detail.map(|d| format!(": {d}")).unwrap_or_default()
            ));
        }
    }
    Ended::PlatformFailed(
        message
            .or_else(|| task_message(task))
            .unwrap_or_else(|| "the execution failed and Cloud Run gave no reason".to_owned()),
    )
}

fn succeeded(execution: &Execution) -> bool {
    execution.succeeded_count > 0 && execution.failed_count == 0 && execution.cancelled_count == 0
}

fn cancelled(execution: &Execution) -> bool {
    execution.cancelled_count > 0
        || completed(execution)
            .and_then(Condition::execution_reason)
            .is_some_and(|r| *r == ExecutionReason::Cancelled)
}

fn completed(execution: &Execution) -> Option<&Condition> {
    execution
        .conditions
        .iter()
        .find(|c| c.r#type == "Completed")
}

fn task_message(task: Option<&Task>) -> Option<String> {
    task?
        .conditions
        .iter()
        .find(|c| c.r#type == "Completed")
        .map(|c| c.message.clone())
        .filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    /// An execution whose one task failed, as the API writes it.
    fn failed(message: &str) -> Execution {
        serde_json::from_value(json!({
            "failedCount": 1,
            "conditions": [{"type": "Completed", "state": "CONDITION_FAILED", "message": message}],
        }))
        .unwrap()
    }

    fn task(last_attempt_result: serde_json::Value) -> Task {
        serde_json::from_value(json!({"lastAttemptResult": last_attempt_result})).unwrap()
    }

    #[test]
    fn a_signal_from_the_platform_is_a_platform_failure_that_names_it() {
        let killed = task(json!({
            "termSignal": 9,
            "status": {"code": 2, "message": "Memory limit exceeded."},
        }));
        assert_eq!(
            ended(&failed("Task failed."), Some(&killed)),
            Ended::PlatformFailed(
                "the container was terminated by signal 9: Memory limit exceeded.".into()
            )
        );
    }

    #[test]
    fn a_failure_without_a_task_result_quotes_the_execution() {
        assert_eq!(
            ended(&failed("Quota exceeded for jobs."), None),
            Ended::PlatformFailed("Quota exceeded for jobs.".into())
        );
        let silent: Execution = serde_json::from_value(json!({"failedCount": 1})).unwrap();
        assert_eq!(
            ended(&silent, None),
            Ended::PlatformFailed("the execution failed and Cloud Run gave no reason".into())
        );
    }

    #[test]
    fn a_deadline_exceeded_attempt_timed_out_and_an_exit_code_wins() {
        let timed_out = task(json!({"status": {"code": 4, "message": "timed out"}}));
        assert_eq!(ended(&failed("x"), Some(&timed_out)), Ended::TimedOut);
        let exited = task(json!({"exitCode": 3, "status": {"code": 2}}));
        assert_eq!(ended(&failed("x"), Some(&exited)), Ended::Exited(3));
    }
}
