//! Runs an execution in the background: every task, at most `parallelism`
//! at a time, each attempt handed to the executor under the task's timeout
//! and the execution's cancellation, retried up to `maxRetries` times. The
//! execution's and tasks' status fields follow as it goes.

use std::sync::Arc;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::error::Code;
use crate::executions::ExecutionPlan;
use crate::executor::{TaskOutcome, TaskOutput, TaskRun};
use crate::state::{ExecutionRecord, Shared, id_of};
use crate::status::{self, TaskEnd};
use crate::wire;

/// Runs the plan to its end.
pub(crate) async fn run(
    shared: Arc<Shared>,
    plan: ExecutionPlan,
    cancelled: watch::Receiver<bool>,
) {
    with_execution(&shared, &plan.name, status::start);
    if let Some(message) = &plan.missing_image {
        let end = TaskEnd::failed(Code::NotFound, message.clone(), None);
        with_execution(&shared, &plan.name, |record| {
            for index in 0..plan.task_count {
                status::end_task(record, index, &end);
            }
        });
        with_execution(&shared, &plan.name, |record| {
            status::finish(record, Some(message))
        });
        status::note_on_job(&shared, &plan.name);
        return;
    }
    let slots = Arc::new(Semaphore::new(plan.parallelism));
    let plan = Arc::new(plan);
    let mut tasks = JoinSet::new();
    for index in 0..plan.task_count {
        let task = run_task(
            Arc::clone(&shared),
            Arc::clone(&plan),
            index,
            Arc::clone(&slots),
            cancelled.clone(),
        );
        tasks.spawn(task);
    }
    while tasks.join_next().await.is_some() {}
    with_execution(&shared, &plan.name, |record| status::finish(record, None));
    status::note_on_job(&shared, &plan.name);
}

/// Runs one task: waits for a slot, then attempts it until it succeeds,
/// runs out of retries, or the execution is cancelled.
async fn run_task(
    shared: Arc<Shared>,
    plan: Arc<ExecutionPlan>,
    index: u32,
    slots: Arc<Semaphore>,
    cancelled: watch::Receiver<bool>,
) {
    let mut cancel = cancelled.clone();
    let slot = tokio::select! {
        slot = slots.acquire_owned() => slot.ok(),
        _gone = cancel.wait_for(|c| *c) => None,
    };
    let Some(_slot) = slot else {
        with_execution(&shared, &plan.name, |r| {
            status::end_task(r, index, &TaskEnd::cancelled())
        });
        return;
    };
    for attempt in 0..=plan.max_retries {
        let task = task_run(&shared, &plan, index, attempt, cancelled.clone());
        with_execution(&shared, &plan.name, |r| {
            status::start_attempt(r, index, attempt)
        });
        shared.lock().task_runs.push(task.clone());
        let outcome = attempt_once(&shared, &task).await;
        let end = TaskEnd::from_outcome(&outcome, &task);
        let last = attempt == plan.max_retries
            || matches!(outcome, TaskOutcome::Exited(0) | TaskOutcome::Cancelled)
            || task.is_cancelled();
        with_execution(&shared, &plan.name, |r| {
            status::end_attempt(r, index, &end, last)
        });
        if last {
            return;
        }
    }
}

/// One attempt under the task's timeout and the execution's cancellation;
/// when either wins, the executor's future is dropped (which stops a
/// process executor's process group).
async fn attempt_once(shared: &Shared, task: &TaskRun) -> TaskOutcome {
    tokio::select! {
        biased;
        () = task.cancelled() => TaskOutcome::Cancelled,
        outcome = shared.executor.run(task) => outcome,
        () = tokio::time::sleep(task.timeout) => TaskOutcome::TimedOut,
    }
}

/// What the executor is told about attempt `attempt` of task `index`.
fn task_run(
    shared: &Arc<Shared>,
    plan: &ExecutionPlan,
    index: u32,
    attempt: u32,
    cancel: watch::Receiver<bool>,
) -> TaskRun {
    let container = &plan.container;
    let strings = |key: &str| -> Vec<String> {
        container[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let execution = id_of(&plan.name).to_owned();
    let mut env: Vec<(String, String)> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                wire::str_field(e, "value").to_owned(),
            ))
        })
        .collect();
    env.extend([
        ("CLOUD_RUN_JOB".to_owned(), plan.job.clone()),
        ("CLOUD_RUN_EXECUTION".to_owned(), execution.clone()),
        ("CLOUD_RUN_TASK_INDEX".to_owned(), index.to_string()),
        ("CLOUD_RUN_TASK_ATTEMPT".to_owned(), attempt.to_string()),
        (
            "CLOUD_RUN_TASK_COUNT".to_owned(),
            plan.task_count.to_string(),
        ),
    ]);
    TaskRun {
        project: plan.location.project.clone(),
        location: plan.location.location.clone(),
        job: plan.job.clone(),
        execution,
        task_index: index,
        task_attempt: attempt,
        task_count: plan.task_count,
        image: wire::str_field(container, "image").to_owned(),
        command: strings("command"),
        args: strings("args"),
        env,
        working_dir: Some(wire::str_field(container, "workingDir"))
            .filter(|d| !d.is_empty())
            .map(str::to_owned),
        timeout: plan.timeout,
        cancel,
        output: TaskOutput {
            shared: Arc::downgrade(shared),
        },
    }
}

/// Applies `change` to the execution, if it still exists (it may have been
/// deleted while running).
fn with_execution(shared: &Shared, name: &str, change: impl FnOnce(&mut ExecutionRecord)) {
    if let Some(record) = shared.lock().executions.get_mut(name) {
        change(record);
    }
}
