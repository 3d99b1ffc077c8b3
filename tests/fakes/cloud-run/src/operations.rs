//! Long-running operations (`google.longrunning.Operation`). Every
//! mutation answers with one; the client polls `GET /v2/{operation}` until
//! `done`. While running, `metadata` holds the resource as it is; once done,
//! `response` holds it (both as `Any`: the resource's fields plus `@type`),
//! or `error` holds a `google.rpc.Status`. A done operation is frozen.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Code};
use crate::state::{Config, Location, OperationRecord, OperationTarget, State};
use crate::{jobs, services, wire};

/// `@type` prefix of `Any` values.
const TYPE_PREFIX: &str = "type.googleapis.com/google.cloud.run.v2.";

/// How far the target of an operation has got.
enum Progress {
    Running(Value),
    Done(Result<Value, ApiError>),
}

/// Starts an operation in `location` and returns it as first answered.
pub(crate) fn start(
    state: &mut State,
    config: &Config,
    location: &Location,
    target: OperationTarget,
) -> Value {
    let name = format!("{}/operations/{}", location.parent(), wire::uuid4());
    state.operations.insert(
        name.clone(),
        OperationRecord {
            target,
            reads: 0,
            finished: None,
        },
    );
    advance(state, config, &name).unwrap_or_else(|e| json!({"name": name, "error": e.to_status()}))
}

/// `GET /v2/{operation}`: one poll. It counts as a read of the resource
/// the operation changes, so polling is what moves a rollout forward.
pub(crate) fn poll(state: &mut State, config: &Config, name: &str) -> ApiResult {
    let record = state
        .operations
        .get_mut(name)
        .ok_or_else(|| ApiError::not_found("operation", name))?;
    if let Some(finished) = &record.finished {
        return Ok(finished.clone());
    }
    record.reads += 1;
    match record.target.clone() {
        OperationTarget::Service { name, .. } => services::observe(state, config, &name),
        OperationTarget::Job { name, .. } => jobs::observe(state, config, &name),
        _ => {}
    }
    advance(state, config, name)
}

/// `GET /v2/{parent}/operations`: the operations of a location, as they
/// stand (listing does not count as a poll).
pub(crate) fn list(state: &State, config: &Config, parent: &str) -> Vec<Value> {
    let prefix = format!("{parent}/operations/");
    state
        .operations
        .keys()
        .filter(|name| name.starts_with(&prefix))
        .filter_map(|name| render(state, config, name).ok())
        .collect()
}

/// `DELETE /v2/{operation}`: forgets it.
pub(crate) fn delete(state: &mut State, name: &str) -> ApiResult {
    state
        .operations
        .remove(name)
        .map(|_| json!({}))
        .ok_or_else(|| ApiError::not_found("operation", name))
}

/// The operation's JSON now, frozen once it is done.
fn advance(state: &mut State, config: &Config, name: &str) -> ApiResult {
    let operation = render(state, config, name)?;
    if operation["done"] == true
        && let Some(record) = state.operations.get_mut(name)
    {
        record.finished = Some(operation.clone());
    }
    Ok(operation)
}

/// The operation's JSON now.
fn render(state: &State, config: &Config, name: &str) -> ApiResult {
    let record = state
        .operations
        .get(name)
        .ok_or_else(|| ApiError::not_found("operation", name))?;
    if let Some(finished) = &record.finished {
        return Ok(finished.clone());
    }
    let type_url = format!("{TYPE_PREFIX}{}", type_name(&record.target));
    let mut operation = json!({"name": name, "done": false});
    let progress = progress(state, config, record);
    match progress {
        Progress::Running(resource) => {
            operation["metadata"] = as_any(resource, &type_url);
        }
        Progress::Done(result) => {
            operation["done"] = Value::Bool(true);
            match result {
                Ok(resource) => {
                    operation["metadata"] = as_any(resource.clone(), &type_url);
                    operation["response"] = as_any(resource, &type_url);
                }
                Err(error) => operation["error"] = error.to_status(),
            }
        }
    }
    Ok(operation)
}

fn type_name(target: &OperationTarget) -> &str {
    match target {
        OperationTarget::Service { .. } => "Service",
        OperationTarget::Job { .. } => "Job",
        OperationTarget::Run { .. } | OperationTarget::Cancel { .. } => "Execution",
        OperationTarget::Applied { type_name, .. } => type_name,
    }
}

fn progress(state: &State, config: &Config, record: &OperationRecord) -> Progress {
    match &record.target {
        OperationTarget::Service { name, generation } => state
            .services
            .get(name)
            .map(|r| settled(&r.resource, *generation))
            .unwrap_or_else(|| Progress::Done(Err(ApiError::not_found("service", name)))),
        OperationTarget::Job { name, generation } => state
            .jobs
            .get(name)
            .map(|r| settled(&r.resource, *generation))
            .unwrap_or_else(|| Progress::Done(Err(ApiError::not_found("job", name)))),
        OperationTarget::Run { execution } => execution_progress(state, execution, true),
        OperationTarget::Cancel { execution } => execution_progress(state, execution, false),
        OperationTarget::Applied { resource, .. } if record.reads >= config.polls_to_settle => {
            Progress::Done(Ok(resource.clone()))
        }
        OperationTarget::Applied { resource, .. } => Progress::Running(resource.clone()),
    }
}

/// A service or job change is done once the resource has observed its
/// generation; it failed if the resource's terminal condition says so.
fn settled(resource: &Value, generation: i64) -> Progress {
    let observed = resource["observedGeneration"]
        .as_str()
        .and_then(|g| g.parse::<i64>().ok())
        .unwrap_or(0);
    if observed < generation {
        return Progress::Running(resource.clone());
    }
    let terminal = &resource["terminalCondition"];
    if terminal["state"] == "CONDITION_FAILED" {
        let message = wire::str_field(terminal, "message");
        return Progress::Done(Err(ApiError::new(Code::FailedPrecondition, message)));
    }
    Progress::Done(Ok(resource.clone()))
}

/// A run is done when its execution has finished, failed if the execution
/// did not succeed; a cancellation is done when the execution has stopped.
fn execution_progress(state: &State, name: &str, is_run: bool) -> Progress {
    let Some(record) = state.executions.get(name) else {
        return Progress::Done(Err(ApiError::not_found("execution", name)));
    };
    let execution = &record.resource;
    if execution.get("completionTime").is_none() {
        return Progress::Running(execution.clone());
    }
    let completed = execution["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Completed"))
        .cloned()
        .unwrap_or_default();
    let message = wire::str_field(&completed, "message").to_owned();
    match (
        is_run,
        completed["state"].as_str(),
        completed["executionReason"].as_str(),
    ) {
        (false, ..) | (true, Some("CONDITION_SUCCEEDED"), _) => {
            Progress::Done(Ok(execution.clone()))
        }
        (true, _, Some("CANCELLED")) => {
            Progress::Done(Err(ApiError::new(Code::Cancelled, message)))
        }
        (true, ..) => Progress::Done(Err(ApiError::new(Code::FailedPrecondition, message))),
    }
}

/// A resource as a `google.protobuf.Any`.
fn as_any(mut resource: Value, type_url: &str) -> Value {
    if let Some(fields) = resource.as_object_mut() {
        fields.insert("@type".to_owned(), Value::from(type_url));
    }
    resource
}
