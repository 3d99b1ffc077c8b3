//! Revisions: the immutable snapshots of a service's template. A service
//! write whose template changed makes one, named
//! `{service}-{5-digit generation}-{3 random chars}` unless the template
//! names it; settling makes it ready (or failed) and routes traffic.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Code};
use crate::operations;
use crate::state::{Config, Location, OperationTarget, State, id_of};
use crate::wire;

/// Template fields that are not revision fields.
const TEMPLATE_ONLY: &[&str] = &["revision", "labels", "annotations", "healthCheckDisabled"];

/// A new revision of `service` from its template; records it as the
/// service's `latestCreatedRevision`.
pub(crate) fn create(
    service: &mut Value,
    spec: &Value,
    generation: i64,
) -> Result<Value, ApiError> {
    let service_name = wire::str_field(service, "name").to_owned();
    let service_id = id_of(&service_name);
    let template = &spec["template"];
    let id = match wire::str_field(template, "revision") {
        "" => format!("{service_id}-{generation:05}-{}", wire::random_suffix(3)),
        named if named.starts_with(&format!("{service_id}-")) => named.to_owned(),
        named => {
            return Err(ApiError::invalid(format!(
                "service.template.revision: '{named}' must start with '{service_id}-'."
            )));
        }
    };
    let name = format!("{service_name}/revisions/{id}");
    let mut revision = template.clone();
    if let Some(fields) = revision.as_object_mut() {
        fields.retain(|key, _| !TEMPLATE_ONLY.contains(&key.as_str()));
    }
    let now = wire::now();
    let location = Location::of(&service_name);
    let project = location
        .as_ref()
        .map(|l| l.project.as_str())
        .unwrap_or_default();
    let extra = json!({
        "name": name,
        "uid": wire::uuid4(),
        "generation": "1",
        "labels": wire::string_map(template, "labels"),
        "annotations": wire::string_map(template, "annotations"),
        "createTime": now,
        "updateTime": now,
        "launchStage": spec["launchStage"],
        "service": service_name,
        "reconciling": true,
        "conditions": [
            wire::condition("Ready", "CONDITION_RECONCILING", ""),
            wire::condition("ContainerReady", "CONDITION_RECONCILING", ""),
            wire::condition("ResourcesAvailable", "CONDITION_RECONCILING", ""),
        ],
        "logUri": format!(
            "https://console.cloud.google.com/logs/viewer?project={project}&resource=cloud_run_revision/service_name/{service_id}/revision_name/{id}"
        ),
        "etag": wire::etag(),
    });
    for (key, value) in extra.as_object().into_iter().flatten() {
        revision[key] = value.clone();
    }
    service["latestCreatedRevision"] = Value::from(name);
    Ok(revision)
}

/// The message of a revision whose image does not exist, if it is one.
pub(crate) fn missing_image(revision: &Value, config: &Config) -> Option<String> {
    revision["containers"]
        .as_array()?
        .iter()
        .map(|c| wire::str_field(c, "image"))
        .find(|image| image.starts_with(&config.missing_image_prefix))
        .map(|image| format!("Image '{image}' not found."))
}

/// Marks a revision ready, or failed with `failure`.
pub(crate) fn settle(revision: &mut Value, failure: Option<&str>) {
    revision["reconciling"] = Value::Bool(false);
    revision["observedGeneration"] = Value::from("1");
    revision["conditions"] = match failure {
        None => json!([
            wire::condition("Ready", "CONDITION_SUCCEEDED", ""),
            wire::condition("ContainerReady", "CONDITION_SUCCEEDED", ""),
            wire::condition("ResourcesAvailable", "CONDITION_SUCCEEDED", ""),
        ]),
        Some(message) => json!([
            wire::condition("Ready", "CONDITION_FAILED", message),
            wire::condition("ContainerReady", "CONDITION_FAILED", message),
            wire::condition("ResourcesAvailable", "CONDITION_SUCCEEDED", ""),
        ]),
    };
}

/// Fills the service's `trafficStatuses`, `uri` and `urls` from its
/// `traffic`: a `LATEST` target resolves to the latest ready revision.
pub(crate) fn route_traffic(service: &mut Value, config: &Config) {
    let name = wire::str_field(service, "name").to_owned();
    let location = Location::of(&name);
    let region = location
        .as_ref()
        .map(|l| l.location.as_str())
        .unwrap_or_default();
    let host = format!(
        "{}-{}.{region}.run.app",
        id_of(&name),
        config.project_number
    );
    let latest = id_of(wire::str_field(service, "latestReadyRevision")).to_owned();
    let statuses: Vec<Value> = service["traffic"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|target| {
            let mut status = target.clone();
            if target["type"] == "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST" {
                status["revision"] = Value::from(latest.as_str());
            }
            if let Some(tag) = target["tag"].as_str().filter(|t| !t.is_empty()) {
                status["uri"] = Value::from(format!("https://{tag}---{host}"));
            }
            status
        })
        .collect();
    service["trafficStatuses"] = Value::Array(statuses);
    service["uri"] = Value::from(format!("https://{host}"));
    service["urls"] = json!([format!("https://{host}")]);
}

/// `GET /v2/{name}` of a revision.
pub(crate) fn get(state: &State, name: &str) -> ApiResult {
    state
        .revisions
        .get(name)
        .cloned()
        .ok_or_else(|| ApiError::not_found("revision", name))
}

/// `GET /v2/{service}/revisions`, newest first as the API lists them.
pub(crate) fn list(state: &State, service: &str) -> Vec<Value> {
    let prefix = format!("{service}/revisions/");
    let mut revisions: Vec<Value> = state
        .revisions
        .iter()
        .filter(|(name, _)| name.starts_with(&prefix))
        .map(|(_, r)| r.clone())
        .collect();
    revisions.sort_by(|a, b| b["createTime"].as_str().cmp(&a["createTime"].as_str()));
    revisions
}

/// `DELETE /v2/{name}` of a revision; one that serves traffic cannot go.
pub(crate) fn delete(state: &mut State, config: &Config, name: &str) -> ApiResult {
    let revision = get(state, name)?;
    let service = wire::str_field(&revision, "service");
    let serving = state.services.get(service).is_some_and(|s| {
        s.resource["trafficStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["revision"] == id_of(name) && t["percent"].as_i64().unwrap_or(0) > 0)
    });
    if serving {
        return Err(ApiError::new(
            Code::FailedPrecondition,
            format!(
                "Revision '{}' is serving traffic and cannot be deleted.",
                id_of(name)
            ),
        ));
    }
    state.revisions.remove(name);
    let location = Location::of(name).ok_or_else(|| ApiError::not_found("revision", name))?;
    let target = OperationTarget::Applied {
        type_name: "Revision".to_owned(),
        resource: revision,
    };
    Ok(operations::start(state, config, &location, target))
}
