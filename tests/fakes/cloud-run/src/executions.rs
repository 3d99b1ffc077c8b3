//! Running a job (`POST /v2/{job}:run`) and reading what it made:
//! executions (get, list, cancel, delete) and their tasks (get, list).
//! Running resolves the job's task template with the run's overrides into
//! an [`ExecutionPlan`], stores the execution and its tasks, answers with
//! an operation, and leaves the plan to [`crate::runner`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::error::{ApiError, ApiResult, Code};
use crate::state::{ExecutionRecord, Location, OperationTarget, Shared, State, id_of};
use crate::{operations, resource, runner, wire};

/// The timeout of a task whose template sets none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What an execution runs, resolved when it starts.
#[derive(Clone, Debug)]
pub(crate) struct ExecutionPlan {
    pub(crate) name: String,
    pub(crate) location: Location,
    pub(crate) job: String,
    pub(crate) parallelism: usize,
    pub(crate) max_retries: u32,
    pub(crate) timeout: Duration,
    /// The first container, after overrides: the one the executor runs.
    pub(crate) container: Value,
    pub(crate) task_count: u32,
    /// Set when the image does not exist: the execution fails at once.
    pub(crate) missing_image: Option<String>,
}

/// `POST /v2/{job}:run`: starts an execution.
pub(crate) fn run(shared: &Arc<Shared>, job_name: &str, body: Option<Value>) -> ApiResult {
    let mut state = shared.lock();
    let job = state
        .jobs
        .get(job_name)
        .map(|r| r.resource.clone())
        .ok_or_else(|| ApiError::not_found("job", job_name))?;
    let body = body.unwrap_or_default();
    resource::check_etag(&job, body["etag"].as_str())?;
    let location = Location::of(job_name).ok_or_else(|| ApiError::not_found("job", job_name))?;
    let job_id = id_of(job_name);
    let name = format!("{job_name}/executions/{job_id}-{}", wire::random_suffix(5));
    let (template, plan) = resolve(&job, &body["overrides"], &name, location.clone())?;
    let plan = ExecutionPlan {
        missing_image: missing_image(&plan.container, &shared.config.missing_image_prefix),
        ..plan
    };
    let execution = new_execution(&job, &template, &plan);
    let tasks = (0..plan.task_count)
        .map(|index| new_task(&execution, &template, index))
        .collect();
    let (cancel, cancelled) = watch::channel(false);
    state.executions.insert(
        name.clone(),
        ExecutionRecord {
            resource: execution,
            tasks,
            cancel,
        },
    );
    note_latest_execution(&mut state, job_name, &name);
    let target = OperationTarget::Run {
        execution: name.clone(),
    };
    let operation = operations::start(&mut state, &shared.config, &location, target);
    drop(state);
    tokio::spawn(runner::run(Arc::clone(shared), plan, cancelled));
    Ok(operation)
}

/// The task template after the run's overrides, and the plan it makes.
fn resolve(
    job: &Value,
    overrides: &Value,
    name: &str,
    location: Location,
) -> Result<(Value, ExecutionPlan), ApiError> {
    let mut template = job["template"]["template"].clone();
    template["containers"] = Value::Array(override_containers(&template, overrides)?);
    if let Some(timeout) = overrides["timeout"].as_str() {
        template["timeout"] = Value::from(timeout);
    }
    let timeout = match template["timeout"].as_str() {
        None => DEFAULT_TIMEOUT,
        Some(text) => wire::parse_duration(text)
            .ok_or_else(|| ApiError::invalid(format!("timeout: '{text}' is not a duration.")))?,
    };
    let task_count = match overrides["taskCount"].as_u64() {
        Some(n) if n > 0 => n,
        _ => job["template"]["taskCount"].as_u64().unwrap_or(1),
    };
    let task_count = u32::try_from(task_count)
        .map_err(|_| ApiError::invalid(format!("taskCount: {task_count} is too large.")))?;
    let parallelism = match job["template"]["parallelism"].as_u64().unwrap_or(0) {
        0 => task_count,
        n => u32::try_from(n).unwrap_or(task_count).min(task_count),
    };
    let plan = ExecutionPlan {
        name: name.to_owned(),
        location,
        job: id_of(wire::str_field(job, "name")).to_owned(),
        parallelism: usize::try_from(parallelism.max(1)).unwrap_or(1),
        max_retries: template["maxRetries"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(3),
        timeout,
        container: template["containers"][0].clone(),
        task_count,
        missing_image: None,
    };
    Ok((template, plan))
}

/// The template's containers with `overrides.containerOverrides` applied:
/// args replaced (or cleared), env entries replaced by name or added.
fn override_containers(template: &Value, overrides: &Value) -> Result<Vec<Value>, ApiError> {
    let mut containers = template["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for change in overrides["containerOverrides"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = wire::str_field(change, "name");
        let index = match name {
            "" => 0,
            name => containers
                .iter()
                .position(|c| c["name"] == name)
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "overrides.containerOverrides: the job has no container named '{name}'."
                    ))
                })?,
        };
        let Some(container) = containers.get_mut(index) else {
            return Err(ApiError::invalid(
                "overrides.containerOverrides: the job has no container.",
            ));
        };
        if change["clearArgs"] == true {
            container["args"] = json!([]);
        } else if let Some(args) = change["args"].as_array().filter(|a| !a.is_empty()) {
            container["args"] = Value::Array(args.clone());
        }
        for var in change["env"].as_array().into_iter().flatten() {
            set_env(container, var);
        }
    }
    Ok(containers)
}

/// Sets an env entry of a container, replacing one of the same name.
fn set_env(container: &mut Value, var: &Value) {
    if !container["env"].is_array() {
        container["env"] = json!([]);
    }
    if let Some(env) = container["env"].as_array_mut() {
        match env.iter_mut().find(|e| e["name"] == var["name"]) {
            Some(existing) => *existing = var.clone(),
            None => env.push(var.clone()),
        }
    }
}

fn missing_image(container: &Value, prefix: &str) -> Option<String> {
    let image = wire::str_field(container, "image");
    image
        .starts_with(prefix)
        .then(|| format!("Image '{image}' not found."))
}

/// A new execution of `job`; labels and annotations come from the job's
/// execution template, as on the platform.
fn new_execution(job: &Value, template: &Value, plan: &ExecutionPlan) -> Value {
    let now = wire::now();
    json!({
        "name": plan.name,
        "uid": wire::uuid4(),
        "creator": "fake@vergence.test",
        "generation": "1",
        "labels": wire::string_map(&job["template"], "labels"),
        "annotations": wire::string_map(&job["template"], "annotations"),
        "createTime": now,
        "updateTime": now,
        "launchStage": job["launchStage"],
        "job": plan.job,
        "parallelism": plan.parallelism,
        "taskCount": plan.task_count,
        "template": template,
        "reconciling": true,
        "conditions": [
            wire::condition("Completed", "CONDITION_PENDING", ""),
            wire::condition("ResourcesAvailable", "CONDITION_PENDING", ""),
            wire::condition("Started", "CONDITION_PENDING", ""),
        ],
        "observedGeneration": "1",
        "runningCount": 0,
        "succeededCount": 0,
        "failedCount": 0,
        "cancelledCount": 0,
        "retriedCount": 0,
        "logUri": log_uri(&plan.location.project, id_of(&plan.name)),
        "etag": wire::etag(),
    })
}

/// Task `index` of an execution, not started yet.
fn new_task(execution: &Value, template: &Value, index: u32) -> Value {
    let execution_name = wire::str_field(execution, "name");
    let execution_id = id_of(execution_name);
    let mut task = template.clone();
    let fields = json!({
        "name": format!("{execution_name}/tasks/{execution_id}-task{index}"),
        "uid": wire::uuid4(),
        "generation": "1",
        "labels": execution["labels"],
        "annotations": execution["annotations"],
        "createTime": execution["createTime"],
        "job": execution["job"],
        "execution": execution_id,
        "reconciling": true,
        "conditions": [wire::condition("Completed", "CONDITION_PENDING", "")],
        "observedGeneration": "1",
        "index": index,
        "retried": 0,
        "logUri": execution["logUri"],
        "etag": wire::etag(),
    });
    for (key, value) in fields.as_object().into_iter().flatten() {
        task[key] = value.clone();
    }
    task
}

/// The Logs Explorer link for an execution's entries.
fn log_uri(project: &str, execution: &str) -> String {
    format!(
        "https://console.cloud.google.com/logs/viewer?project={project}&advancedFilter=resource.type%3D%22cloud_run_job%22%0Alabels.%22run.googleapis.com%2Fexecution_name%22%3D%22{execution}%22"
    )
}

/// Counts the run on its job.
fn note_latest_execution(state: &mut State, job_name: &str, execution: &str) {
    let Some(job) = state.jobs.get_mut(job_name).map(|r| &mut r.resource) else {
        return;
    };
    let count = job["executionCount"].as_i64().unwrap_or(0) + 1;
    job["executionCount"] = Value::from(count);
    job["latestCreatedExecution"] = json!({
        "name": execution,
        "createTime": wire::now(),
        "completionStatus": "EXECUTION_RUNNING",
    });
}

/// `GET /v2/{name}` of an execution.
pub(crate) fn get(state: &State, name: &str) -> ApiResult {
    state
        .executions
        .get(name)
        .map(|r| r.resource.clone())
        .ok_or_else(|| ApiError::not_found("execution", name))
}

/// `GET /v2/{job}/executions`, newest first.
pub(crate) fn list(state: &State, job: &str) -> Vec<Value> {
    let prefix = format!("{job}/executions/");
    let mut executions: Vec<Value> = state
        .executions
        .iter()
        .filter(|(name, _)| name.starts_with(&prefix))
        .map(|(_, r)| r.resource.clone())
        .collect();
    executions.sort_by(|a, b| b["createTime"].as_str().cmp(&a["createTime"].as_str()));
    executions
}

/// `POST /v2/{name}:cancel`: asks the runner to stop; the operation is done
/// once every task has stopped.
pub(crate) fn cancel(state: &mut State, config: &crate::state::Config, name: &str) -> ApiResult {
    let record = state
        .executions
        .get_mut(name)
        .ok_or_else(|| ApiError::not_found("execution", name))?;
    if record.resource.get("completionTime").is_some() {
        return Err(ApiError::new(
            Code::FailedPrecondition,
            format!("Execution '{}' has already completed.", id_of(name)),
        ));
    }
    record.cancel.send_replace(true);
    let location = Location::of(name).ok_or_else(|| ApiError::not_found("execution", name))?;
    let target = OperationTarget::Cancel {
        execution: name.to_owned(),
    };
    Ok(operations::start(state, config, &location, target))
}

/// `DELETE /v2/{name}` of an execution; a running one is cancelled first.
pub(crate) fn delete(state: &mut State, config: &crate::state::Config, name: &str) -> ApiResult {
    let record = state
        .executions
        .remove(name)
        .ok_or_else(|| ApiError::not_found("execution", name))?;
    record.cancel.send_replace(true);
    let location = Location::of(name).ok_or_else(|| ApiError::not_found("execution", name))?;
    let mut deleted = record.resource;
    deleted["deleteTime"] = Value::from(wire::now());
    let target = OperationTarget::Applied {
        type_name: "Execution".to_owned(),
        resource: deleted,
    };
    Ok(operations::start(state, config, &location, target))
}

/// `GET /v2/{name}` of a task.
pub(crate) fn get_task(state: &State, name: &str) -> ApiResult {
    let execution = name
        .rsplit_once("/tasks/")
        .map(|(e, _)| e)
        .unwrap_or_default();
    state
        .executions
        .get(execution)
        .and_then(|r| r.tasks.iter().find(|t| t["name"] == name))
        .cloned()
        .ok_or_else(|| ApiError::not_found("task", name))
}

/// `GET /v2/{execution}/tasks`, by index.
pub(crate) fn list_tasks(state: &State, execution: &str) -> Result<Vec<Value>, ApiError> {
    state
        .executions
        .get(execution)
        .map(|r| r.tasks.clone())
        .ok_or_else(|| ApiError::not_found("execution", execution))
}
