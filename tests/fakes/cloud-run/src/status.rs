//! The status fields of executions and tasks as a run goes: start and
//! completion times, running/succeeded/failed/cancelled/retried counts,
//! each task's `lastAttemptResult`, and the `Completed` conditions with
//! the messages a caller shows when something went wrong.

use serde_json::{Value, json};

use crate::error::Code;
use crate::executor::{TaskOutcome, TaskRun};
use crate::state::{ExecutionRecord, Shared, id_of};
use crate::wire;

/// How a task (or one attempt of it) ended.
#[derive(Clone, Debug)]
pub(crate) struct TaskEnd {
    pub(crate) result: EndKind,
    /// The `google.rpc.Code` number of the attempt's status.
    pub(crate) code: i32,
    pub(crate) message: String,
    pub(crate) exit_code: Option<i32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndKind {
    Succeeded,
    Failed,
    Cancelled,
}

impl TaskEnd {
    pub(crate) fn from_outcome(outcome: &TaskOutcome, task: &TaskRun) -> Self {
        match outcome {
            TaskOutcome::Exited(0) => Self {
                result: EndKind::Succeeded,
                code: 0,
                message: String::new(),
                exit_code: Some(0),
            },
            TaskOutcome::Exited(code) => Self::failed(
                Code::Unknown,
                format!("Task exited with exit code {code}."),
                Some(*code),
            ),
            TaskOutcome::TimedOut => Self::failed(
                Code::DeadlineExceeded,
                format!(
                    "The task timed out: it ran longer than its timeout of {} and was stopped.",
                    wire::format_duration(task.timeout)
                ),
                None,
            ),
            TaskOutcome::Cancelled => Self::cancelled(),
            TaskOutcome::Failed(message) => Self::failed(Code::Unknown, message.clone(), None),
        }
    }

    pub(crate) fn failed(code: Code, message: String, exit_code: Option<i32>) -> Self {
        Self {
            result: EndKind::Failed,
            code: code.number(),
            message,
            exit_code,
        }
    }

    pub(crate) fn cancelled() -> Self {
        Self {
            result: EndKind::Cancelled,
            code: Code::Cancelled.number(),
            message: "The task was cancelled.".to_owned(),
            exit_code: None,
        }
    }

    fn attempt_result(&self) -> Value {
        let mut result = json!({"status": {"code": self.code, "message": self.message}});
        if let Some(exit_code) = self.exit_code {
            result["exitCode"] = Value::from(exit_code);
        }
        result
    }
}

/// The execution has got its resources and started.
pub(crate) fn start(record: &mut ExecutionRecord) {
    let execution = &mut record.resource;
    execution["startTime"] = Value::from(wire::now());
    execution["updateTime"] = Value::from(wire::now());
    execution["conditions"] = json!([
        wire::condition("Completed", "CONDITION_RECONCILING", ""),
        wire::condition("ResourcesAvailable", "CONDITION_SUCCEEDED", ""),
        wire::condition("Started", "CONDITION_SUCCEEDED", ""),
    ]);
}

/// Attempt `attempt` of task `index` has started.
pub(crate) fn start_attempt(record: &mut ExecutionRecord, index: u32, attempt: u32) {
    add(&mut record.resource, "runningCount", 1);
    if attempt > 0 {
        add(&mut record.resource, "retriedCount", 1);
    }
    if let Some(task) = task_mut(record, index) {
        if task.get("startTime").is_none() {
            task["startTime"] = Value::from(wire::now());
        }
        task["retried"] = Value::from(attempt);
        task["conditions"] = json!([wire::condition("Completed", "CONDITION_RECONCILING", "")]);
    }
}

/// An attempt of task `index` has ended; `last` when no retry follows.
pub(crate) fn end_attempt(record: &mut ExecutionRecord, index: u32, end: &TaskEnd, last: bool) {
    add(&mut record.resource, "runningCount", -1);
    if let Some(task) = task_mut(record, index) {
        task["lastAttemptResult"] = end.attempt_result();
    }
    if last {
        end_task(record, index, end);
    }
}

/// Task `index` has ended for good (perhaps without ever starting).
pub(crate) fn end_task(record: &mut ExecutionRecord, index: u32, end: &TaskEnd) {
    let (counter, state) = match end.result {
        EndKind::Succeeded => ("succeededCount", "CONDITION_SUCCEEDED"),
        EndKind::Failed => ("failedCount", "CONDITION_FAILED"),
        EndKind::Cancelled => ("cancelledCount", "CONDITION_FAILED"),
    };
    add(&mut record.resource, counter, 1);
    let Some(task) = task_mut(record, index) else {
        return;
    };
    let mut completed = wire::condition("Completed", state, &end.message);
    match (end.result, end.exit_code) {
        (EndKind::Cancelled, _) => completed["executionReason"] = Value::from("CANCELLED"),
        (EndKind::Failed, Some(_)) => {
            completed["executionReason"] = Value::from("NON_ZERO_EXIT_CODE")
        }
        _ => {}
    }
    task["conditions"] = json!([completed]);
    task["completionTime"] = Value::from(wire::now());
    task["reconciling"] = Value::Bool(false);
    if end.result != EndKind::Cancelled || task.get("lastAttemptResult").is_some() {
        task["lastAttemptResult"] = end.attempt_result();
    }
}

/// Every task has ended: the execution completes. `platform_failure` is a
/// failure before any task ran (a missing image).
pub(crate) fn finish(record: &mut ExecutionRecord, platform_failure: Option<&str>) {
    let completed = completed_condition(record, platform_failure);
    let execution = &mut record.resource;
    let now = wire::now();
    execution["completionTime"] = Value::from(now.as_str());
    execution["updateTime"] = Value::from(now);
    execution["reconciling"] = Value::Bool(false);
    execution["runningCount"] = Value::from(0);
    if let Some(conditions) = execution["conditions"].as_array_mut() {
        conditions.retain(|c| c["type"] != "Completed");
        conditions.insert(0, completed);
    }
}

fn completed_condition(record: &ExecutionRecord, platform_failure: Option<&str>) -> Value {
    let execution = &record.resource;
    let failed_task = record.tasks.iter().find(|t| {
        t["conditions"][0]["state"] == "CONDITION_FAILED"
            && t["conditions"][0]["executionReason"] != "CANCELLED"
    });
    if let Some(message) = platform_failure {
        return wire::condition("Completed", "CONDITION_FAILED", message);
    }
    if execution["cancelledCount"].as_i64().unwrap_or(0) > 0 {
        let mut condition = wire::condition(
            "Completed",
            "CONDITION_FAILED",
            "The execution was cancelled.",
        );
        condition["executionReason"] = Value::from("CANCELLED");
        return condition;
    }
    if let Some(task) = failed_task {
        let failed = execution["failedCount"].as_i64().unwrap_or(0);
        let message = format!(
            "Task {} failed: {} {failed} of {} tasks failed.",
            id_of(wire::str_field(task, "name")),
            wire::str_field(&task["conditions"][0], "message"),
            execution["taskCount"],
        );
        let mut condition = wire::condition("Completed", "CONDITION_FAILED", &message);
        if task["lastAttemptResult"].get("exitCode").is_some() {
            condition["executionReason"] = Value::from("NON_ZERO_EXIT_CODE");
        }
        return condition;
    }
    let message = match start_of(execution) {
        Some(start) => format!(
            "Execution completed successfully in {:.2}s.",
            jiff::Timestamp::now().duration_since(start).as_secs_f64()
        ),
        None => "Execution completed successfully.".to_owned(),
    };
    wire::condition("Completed", "CONDITION_SUCCEEDED", &message)
}

fn start_of(execution: &Value) -> Option<jiff::Timestamp> {
    wire::str_field(execution, "startTime").parse().ok()
}

/// Records how the execution ended on its job, if it is the job's latest.
pub(crate) fn note_on_job(shared: &Shared, execution: &str) {
    let mut state = shared.lock();
    let Some(record) = state.executions.get(execution) else {
        return;
    };
    let resource = &record.resource;
    let status = match (
        resource["cancelledCount"].as_i64().unwrap_or(0),
        resource["failedCount"].as_i64().unwrap_or(0),
        resource["conditions"][0]["state"].as_str(),
    ) {
        (cancelled, ..) if cancelled > 0 => "EXECUTION_CANCELLED",
        (_, _, Some("CONDITION_SUCCEEDED")) => "EXECUTION_SUCCEEDED",
        _ => "EXECUTION_FAILED",
    };
    let completion_time = resource["completionTime"].clone();
    let job_name = execution
        .rsplit_once("/executions/")
        .map(|(j, _)| j)
        .unwrap_or_default();
    let Some(job) = state.jobs.get_mut(job_name).map(|r| &mut r.resource) else {
        return;
    };
    let latest = &mut job["latestCreatedExecution"];
    if latest["name"] == execution {
        latest["completionTime"] = completion_time;
        latest["completionStatus"] = Value::from(status);
    }
}

fn task_mut(record: &mut ExecutionRecord, index: u32) -> Option<&mut Value> {
    record.tasks.get_mut(usize::try_from(index).ok()?)
}

fn add(resource: &mut Value, counter: &str, delta: i64) {
    let value = resource[counter].as_i64().unwrap_or(0) + delta;
    resource[counter] = Value::from(value.max(0));
}
