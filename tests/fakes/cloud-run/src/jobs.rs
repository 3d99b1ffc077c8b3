//! Jobs: create, get, list, update, delete. Like services, a write is
//! stored at once and settles (terminal condition `Ready` succeeded) after
//! the configured number of reads; running a job lives in `executions`.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resource::{self, already_exists};
use crate::state::{Config, Location, OperationTarget, Record, Rollout, State, id_of};
use crate::{operations, wire};

/// Job fields only the server writes, besides the common ones.
pub(crate) const OUTPUT_ONLY: &[&str] = &["executionCount", "latestCreatedExecution"];

/// A write to a job, as the request asked for it.
#[derive(Debug)]
pub(crate) struct JobWrite<'a> {
    pub(crate) name: &'a str,
    pub(crate) body: Option<Value>,
    pub(crate) validate_only: bool,
}

/// `POST /v2/{parent}/jobs?jobId=`.
pub(crate) fn create(state: &mut State, config: &Config, write: JobWrite<'_>) -> ApiResult {
    let location = Location::of(write.name)
        .ok_or_else(|| ApiError::invalid(format!("Invalid job name '{}'.", write.name)))?;
    resource::check_id(id_of(write.name), "jobId")?;
    if state.jobs.contains_key(write.name) {
        return Err(already_exists(write.name));
    }
    let spec = checked_spec(write.body)?;
    let fresh = json!({
        "name": write.name,
        "uid": wire::uuid4(),
        "generation": "0",
        "createTime": wire::now(),
        "creator": "fake@vergence.test",
        "executionCount": 0,
    });
    apply(state, config, &location, &fresh, spec, write.validate_only)
}

/// `PATCH /v2/{job.name}?allowMissing=&validateOnly=`: replaces the spec.
pub(crate) fn update(
    state: &mut State,
    config: &Config,
    write: JobWrite<'_>,
    allow_missing: bool,
) -> ApiResult {
    let Some(current) = state.jobs.get(write.name).map(|r| r.resource.clone()) else {
        if allow_missing {
            return create(state, config, write);
        }
        return Err(ApiError::not_found("job", write.name));
    };
    let location =
        Location::of(write.name).ok_or_else(|| ApiError::not_found("job", write.name))?;
    let etag = write
        .body
        .as_ref()
        .and_then(|b| b["etag"].as_str())
        .map(str::to_owned);
    resource::check_etag(&current, etag.as_deref())?;
    let spec = checked_spec(write.body)?;
    apply(
        state,
        config,
        &location,
        &current,
        spec,
        write.validate_only,
    )
}

/// `GET /v2/{name}`: counts as a read of an unsettled change.
pub(crate) fn get(state: &mut State, config: &Config, name: &str) -> ApiResult {
    observe(state, config, name);
    state
        .jobs
        .get(name)
        .map(|r| r.resource.clone())
        .ok_or_else(|| ApiError::not_found("job", name))
}

/// `GET /v2/{parent}/jobs`.
pub(crate) fn list(state: &State, parent: &str) -> Vec<Value> {
    let prefix = format!("{parent}/jobs/");
    state
        .jobs
        .iter()
        .filter(|(name, _)| name.starts_with(&prefix))
        .map(|(_, r)| r.resource.clone())
        .collect()
}

/// `DELETE /v2/{name}?etag=&validateOnly=`: removes the job and its
/// executions (cancelling those still running).
pub(crate) fn delete(
    state: &mut State,
    config: &Config,
    name: &str,
    etag: Option<&str>,
    validate_only: bool,
) -> ApiResult {
    let current = state
        .jobs
        .get(name)
        .map(|r| r.resource.clone())
        .ok_or_else(|| ApiError::not_found("job", name))?;
    resource::check_etag(&current, etag)?;
    let location = Location::of(name).ok_or_else(|| ApiError::not_found("job", name))?;
    let mut deleted = current;
    deleted["deleteTime"] = Value::from(wire::now());
    if !validate_only {
        state.jobs.remove(name);
        let prefix = format!("{name}/executions/");
        state.executions.retain(|execution, record| {
            let keep = !execution.starts_with(&prefix);
            if !keep {
                record.cancel.send_replace(true);
            }
            keep
        });
    }
    let target = OperationTarget::Applied {
        type_name: "Job".to_owned(),
        resource: deleted,
    };
    Ok(operations::start(state, config, &location, target))
}

/// Counts a read of the job; settles its change after enough reads.
pub(crate) fn observe(state: &mut State, config: &Config, name: &str) {
    let Some(record) = state.jobs.get_mut(name) else {
        return;
    };
    let Some(rollout) = record.rollout.as_mut() else {
        return;
    };
    rollout.reads += 1;
    if rollout.reads < config.polls_to_settle {
        return;
    }
    let generation = rollout.generation;
    record.rollout = None;
    let job = &mut record.resource;
    job["observedGeneration"] = Value::from(generation.to_string());
    job["reconciling"] = Value::Bool(false);
    job["terminalCondition"] = wire::condition("Ready", "CONDITION_SUCCEEDED", "");
}

/// The spec from a request body, checked.
fn checked_spec(body: Option<Value>) -> Result<Value, ApiError> {
    let spec = resource::spec_of(body, OUTPUT_ONLY)?;
    resource::check_containers(
        &spec["template"]["template"]["containers"],
        "job.template.template.containers",
    )?;
    Ok(spec)
}

/// Stores `spec` on the job `current` (fresh for a create) and starts the
/// operation that reports when the change has settled.
fn apply(
    state: &mut State,
    config: &Config,
    location: &Location,
    current: &Value,
    mut spec: Value,
    validate_only: bool,
) -> ApiResult {
    fill_defaults(&mut spec);
    let name = wire::str_field(current, "name").to_owned();
    let changed = current["generation"] == "0" || resource::spec_part(current, OUTPUT_ONLY) != spec;
    let generation = resource::generation(current) + i64::from(changed);
    let mut job = resource::with_spec(current, &spec, OUTPUT_ONLY);
    if changed {
        job["generation"] = Value::from(generation.to_string());
        job["updateTime"] = Value::from(wire::now());
        job["lastModifier"] = Value::from("fake@vergence.test");
        job["etag"] = Value::from(wire::etag());
        job["reconciling"] = Value::Bool(true);
        job["terminalCondition"] = wire::condition("Ready", "CONDITION_RECONCILING", "");
    }
    if validate_only {
        let target = OperationTarget::Applied {
            type_name: "Job".to_owned(),
            resource: job,
        };
        return Ok(operations::start(state, config, location, target));
    }
    let rollout = changed.then_some(Rollout {
        generation,
        reads: 0,
        revision: None,
        fault: None,
    });
    state.jobs.insert(
        name.clone(),
        Record {
            resource: job,
            rollout,
        },
    );
    if config.polls_to_settle == 0 {
        observe(state, config, &name);
    }
    let target = OperationTarget::Job { name, generation };
    Ok(operations::start(state, config, location, target))
}

/// What the API fills in when the caller leaves it out: one task, three
/// retries, ten minutes per attempt.
fn fill_defaults(spec: &mut Value) {
    let template = &mut spec["template"];
    if template.get("taskCount").is_none() {
        template["taskCount"] = Value::from(1);
    }
    let task = &mut template["template"];
    if task.get("maxRetries").is_none() {
        task["maxRetries"] = Value::from(3);
    }
    if task.get("timeout").is_none() {
        task["timeout"] = Value::from("600s");
    }
    if spec.get("launchStage").is_none() {
        spec["launchStage"] = Value::from("GA");
    }
}
