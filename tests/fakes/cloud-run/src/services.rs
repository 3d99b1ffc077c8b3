//! Services: create, get, list, update, delete. A write stores the new spec
//! at once (bumping `generation`, and making a revision when the template
//! changed) and leaves the service reconciling; the change settles after
//! the configured number of reads of its operation or of the service,
//! unless a test injected a fault.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resource::{self, already_exists};
use crate::revisions;
use crate::state::{
    Config, Location, OperationTarget, Record, RevisionFault, Rollout, State, id_of,
};
use crate::{operations, wire};

/// Service fields only the server writes, besides the common ones.
pub(crate) const OUTPUT_ONLY: &[&str] = &[
    "latestReadyRevision",
    "latestCreatedRevision",
    "trafficStatuses",
    "uri",
    "urls",
];

/// A write to a service, as the request asked for it.
#[derive(Debug)]
pub(crate) struct ServiceWrite<'a> {
    pub(crate) name: &'a str,
    pub(crate) body: Option<Value>,
    pub(crate) update_mask: Option<&'a str>,
    pub(crate) validate_only: bool,
}

/// `POST /v2/{parent}/services?serviceId=`.
pub(crate) fn create(state: &mut State, config: &Config, write: ServiceWrite<'_>) -> ApiResult {
    let location = Location::of(write.name)
        .ok_or_else(|| ApiError::invalid(format!("Invalid service name '{}'.", write.name)))?;
    resource::check_id(id_of(write.name), "serviceId")?;
    if state.services.contains_key(write.name) {
        return Err(already_exists(write.name));
    }
    let spec = checked_spec(write.body)?;
    let fresh = json!({
        "name": write.name,
        "uid": wire::uuid4(),
        "generation": "0",
        "createTime": wire::now(),
        "creator": "fake@vergence.test",
    });
    apply(state, config, &location, &fresh, spec, write.validate_only)
}

/// `PATCH /v2/{service.name}?updateMask=&allowMissing=&validateOnly=`.
pub(crate) fn update(
    state: &mut State,
    config: &Config,
    write: ServiceWrite<'_>,
    allow_missing: bool,
) -> ApiResult {
    let Some(current) = state.services.get(write.name).map(|r| r.resource.clone()) else {
        if allow_missing {
            return create(state, config, write);
        }
        return Err(ApiError::not_found("service", write.name));
    };
    let location =
        Location::of(write.name).ok_or_else(|| ApiError::not_found("service", write.name))?;
    let etag = write
        .body
        .as_ref()
        .and_then(|b| b["etag"].as_str())
        .map(str::to_owned);
    resource::check_etag(&current, etag.as_deref())?;
    let old_spec = resource::spec_part(&current, OUTPUT_ONLY);
    let spec = resource::apply_mask(&old_spec, checked_spec(write.body)?, write.update_mask);
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
        .services
        .get(name)
        .map(|r| r.resource.clone())
        .ok_or_else(|| ApiError::not_found("service", name))
}

/// `GET /v2/{parent}/services`.
pub(crate) fn list(state: &State, parent: &str) -> Vec<Value> {
    let prefix = format!("{parent}/services/");
    state
        .services
        .iter()
        .filter(|(name, _)| name.starts_with(&prefix))
        .map(|(_, r)| r.resource.clone())
        .collect()
}

/// `DELETE /v2/{name}?etag=&validateOnly=`: removes the service and its
/// revisions at once; the operation still takes the configured reads.
pub(crate) fn delete(
    state: &mut State,
    config: &Config,
    name: &str,
    etag: Option<&str>,
    validate_only: bool,
) -> ApiResult {
    let current = state
        .services
        .get(name)
        .map(|r| r.resource.clone())
        .ok_or_else(|| ApiError::not_found("service", name))?;
    resource::check_etag(&current, etag)?;
    let location = Location::of(name).ok_or_else(|| ApiError::not_found("service", name))?;
    let mut deleted = current;
    deleted["deleteTime"] = Value::from(wire::now());
    if !validate_only {
        state.services.remove(name);
        let prefix = format!("{name}/revisions/");
        state
            .revisions
            .retain(|revision, _| !revision.starts_with(&prefix));
    }
    let target = OperationTarget::Applied {
        type_name: "Service".to_owned(),
        resource: deleted,
    };
    Ok(operations::start(state, config, &location, target))
}

/// Counts a read of the service; settles its change when enough reads have
/// been counted and no fault holds it back.
pub(crate) fn observe(state: &mut State, config: &Config, name: &str) {
    let Some(record) = state.services.get_mut(name) else {
        return;
    };
    let Some(rollout) = record.rollout.as_mut() else {
        return;
    };
    rollout.reads += 1;
    if rollout.reads < config.polls_to_settle || rollout.fault == Some(RevisionFault::NeverReady) {
        return;
    }
    if let Some(rollout) = record.rollout.take() {
        settle(state, config, name, &rollout);
    }
}

/// Injects `fault` into the service's unsettled change, or, if it has none,
/// keeps it for the service's next revision.
pub(crate) fn inject_fault(state: &mut State, service: &str, fault: RevisionFault) {
    let pending = state
        .services
        .iter_mut()
        .find(|(name, r)| names_service(name, service) && r.rollout.is_some())
        .and_then(|(_, r)| r.rollout.as_mut());
    match pending {
        Some(rollout) if rollout.revision.is_some() => rollout.fault = Some(fault),
        _ => {
            state.revision_faults.insert(service.to_owned(), fault);
        }
    }
}

/// Applies `edit` to the spec of `service` (full name or id) as a write
/// would, and settles the change at once.
pub(crate) fn edit_out_of_band(
    state: &mut State,
    config: &Config,
    service: &str,
    edit: impl FnOnce(&mut Value),
) -> Result<(), ApiError> {
    let (name, current) = state
        .services
        .iter()
        .find(|(name, _)| names_service(name, service))
        .map(|(name, r)| (name.clone(), r.resource.clone()))
        .ok_or_else(|| ApiError::not_found("service", service))?;
    let location = Location::of(&name).ok_or_else(|| ApiError::not_found("service", &name))?;
    let mut spec = resource::spec_part(&current, OUTPUT_ONLY);
    edit(&mut spec);
    apply(state, config, &location, &current, spec, false)?;
    if let Some(rollout) = state.services.get_mut(&name).and_then(|r| r.rollout.take()) {
        settle(state, config, &name, &rollout);
    }
    Ok(())
}

/// Whether `key` (a full name or a bare id) names the service `name`.
pub(crate) fn names_service(name: &str, key: &str) -> bool {
    name == key || id_of(name) == key
}

/// The spec from a request body, checked.
fn checked_spec(body: Option<Value>) -> Result<Value, ApiError> {
    let spec = resource::spec_of(body, OUTPUT_ONLY)?;
    resource::check_containers(
        &spec["template"]["containers"],
        "service.template.containers",
    )?;
    Ok(spec)
}

/// Stores `spec` on the service `current` (fresh for a create) and starts
/// the operation that reports when the change has settled.
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
    let old_spec = resource::spec_part(current, OUTPUT_ONLY);
    let changed = current["generation"] == "0" || old_spec != spec;
    let template_changed = current["generation"] == "0" || old_spec["template"] != spec["template"];
    let generation = resource::generation(current) + i64::from(changed);
    let mut service = resource::with_spec(current, &spec, OUTPUT_ONLY);
    if changed {
        service["generation"] = Value::from(generation.to_string());
        service["updateTime"] = Value::from(wire::now());
        service["lastModifier"] = Value::from("fake@vergence.test");
        service["etag"] = Value::from(wire::etag());
        mark_reconciling(&mut service);
    }
    let revision = template_changed
        .then(|| revisions::create(&mut service, &spec, generation))
        .transpose()?;
    if validate_only {
        let target = OperationTarget::Applied {
            type_name: "Service".to_owned(),
            resource: service,
        };
        return Ok(operations::start(state, config, location, target));
    }
    let rollout = changed.then(|| Rollout {
        generation,
        reads: 0,
        fault: revision
            .as_ref()
            .and_then(|r| first_fault(state, &name, r, config)),
        revision: revision
            .as_ref()
            .map(|r| wire::str_field(r, "name").to_owned()),
    });
    if let Some(revision) = revision {
        state
            .revisions
            .insert(wire::str_field(&revision, "name").to_owned(), revision);
    }
    state.services.insert(
        name.clone(),
        Record {
            resource: service,
            rollout,
        },
    );
    if config.polls_to_settle == 0 {
        observe(state, config, &name);
    }
    let target = OperationTarget::Service { name, generation };
    Ok(operations::start(state, config, location, target))
}

/// The fault a new revision meets: one a test injected for the service, or
/// an image that does not exist.
fn first_fault(
    state: &mut State,
    service: &str,
    revision: &Value,
    config: &Config,
) -> Option<RevisionFault> {
    let injected = state
        .revision_faults
        .keys()
        .find(|key| names_service(service, key))
        .cloned()
        .and_then(|key| state.revision_faults.remove(&key));
    injected.or_else(|| revisions::missing_image(revision, config).map(RevisionFault::Fail))
}

/// What the API fills in when the caller leaves it out.
fn fill_defaults(spec: &mut Value) {
    let traffic_empty = spec["traffic"].as_array().is_none_or(Vec::is_empty);
    if traffic_empty {
        spec["traffic"] =
            json!([{"type": "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST", "percent": 100}]);
    }
    if spec.get("ingress").is_none() {
        spec["ingress"] = Value::from("INGRESS_TRAFFIC_ALL");
    }
    if spec.get("launchStage").is_none() {
        spec["launchStage"] = Value::from("GA");
    }
}

/// A service whose latest change has not settled.
fn mark_reconciling(service: &mut Value) {
    service["reconciling"] = Value::Bool(true);
    service["terminalCondition"] = wire::condition("Ready", "CONDITION_RECONCILING", "");
    service["conditions"] = json!([
        wire::condition("RoutesReady", "CONDITION_RECONCILING", ""),
        wire::condition("ConfigurationsReady", "CONDITION_RECONCILING", ""),
    ]);
}

/// Ends a change: the revision it made is ready (or failed) and the service
/// reports it.
fn settle(state: &mut State, config: &Config, name: &str, rollout: &Rollout) {
    let failure = match &rollout.fault {
        Some(RevisionFault::Fail(message)) => Some(message.clone()),
        _ => None,
    };
    if let Some(revision) = rollout
        .revision
        .as_ref()
        .and_then(|r| state.revisions.get_mut(r))
    {
        revisions::settle(revision, failure.as_deref());
    }
    let Some(record) = state.services.get_mut(name) else {
        return;
    };
    let service = &mut record.resource;
    service["observedGeneration"] = Value::from(rollout.generation.to_string());
    service["reconciling"] = Value::Bool(false);
    match (failure, &rollout.revision) {
        (Some(message), Some(revision)) => {
            let message = format!(
                "Revision '{}' is not ready and cannot serve traffic. {message}",
                id_of(revision)
            );
            service["terminalCondition"] = wire::condition("Ready", "CONDITION_FAILED", &message);
            service["conditions"] = json!([
                wire::condition("RoutesReady", "CONDITION_FAILED", &message),
                wire::condition("ConfigurationsReady", "CONDITION_FAILED", &message),
            ]);
        }
        _ => {
            if let Some(revision) = &rollout.revision {
                service["latestReadyRevision"] = Value::from(revision.as_str());
            }
            service["terminalCondition"] = wire::condition("Ready", "CONDITION_SUCCEEDED", "");
            service["conditions"] = json!([
                wire::condition("RoutesReady", "CONDITION_SUCCEEDED", ""),
                wire::condition("ConfigurationsReady", "CONDITION_SUCCEEDED", ""),
            ]);
            revisions::route_traffic(service, config);
        }
    }
}
