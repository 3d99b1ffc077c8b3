//! A service's ECS files for one instance: the task definition and the
//! service settings, each rendered as a template, read as JSON (or YAML)
//! and checked against the ECS API requests they are sent as, so a typo
//! is an error naming the file and key instead of a field ECS ignores.

use serde_json::{Map, Value};

use crate::config::yaml;
use crate::model::{EcsFiles, EcsRuntime};
use crate::template::Reference;
use vergence_model::diagnostics::suggest;
use vergence_model::ecs::tags;
use vergence_model::{EcsService, InstanceIds};

/// The members of ECS's RegisterTaskDefinition request.
const TASK_DEFINITION_KEYS: &[&str] = &[
    "family",
    "taskRoleArn",
    "executionRoleArn",
    "networkMode",
    "containerDefinitions",
    "volumes",
    "placementConstraints",
    "requiresCompatibilities",
    "cpu",
    "memory",
    "tags",
    "pidMode",
    "ipcMode",
    "proxyConfiguration",
    "inferenceAccelerators",
    "ephemeralStorage",
    "runtimePlatform",
    "enableFaultInjection",
];

/// The members of ECS's CreateService request a service file may set.
const SERVICE_KEYS: &[&str] = &[
    "serviceName",
    "loadBalancers",
    "serviceRegistries",
    "desiredCount",
    "launchType",
    "capacityProviderStrategy",
    "platformVersion",
    "role",
    "deploymentConfiguration",
    "placementConstraints",
    "placementStrategy",
    "networkConfiguration",
    "healthCheckGracePeriodSeconds",
    "schedulingStrategy",
    "deploymentController",
    "tags",
    "enableECSManagedTags",
    "propagateTags",
    "enableExecuteCommand",
    "serviceConnectConfiguration",
    "volumeConfigurations",
    "vpcLatticeConfigurations",
    "availabilityZoneRebalancing",
];

/// CreateService members Vergence sets itself, and why.
const SERVICE_KEYS_SET_BY_VERGENCE: &[(&str, &str)] = &[
    ("cluster", "the runtime's `ecs.cluster` is used"),
    (
        "taskDefinition",
        "Vergence registers the task definition file and uses its new revision",
    ),
    ("clientToken", "Vergence makes each apply idempotent itself"),
];

/// Renders the ECS files of one instance; the error says which file and
/// key is wrong.
pub(crate) fn render(
    files: &EcsFiles,
    runtime: &EcsRuntime,
    ids: &InstanceIds,
    resolve: impl Fn(&Reference) -> Option<String>,
) -> Result<EcsService, String> {
    let (task_file, task_template) = &files.task_definition;
    let task_definition = parse(task_file, &task_template.render(&resolve)?)
        .map_err(|(line, message)| located(task_file, line, &message))?;
    check_task_definition(&task_definition).map_err(|m| located(task_file, None, &m))?;
    let (service_file, service_template) = &files.service;
    let settings = parse(service_file, &service_template.render(&resolve)?)
        .map_err(|(line, message)| located(service_file, line, &message))?;
    let service_name = check_service(&settings).map_err(|m| located(service_file, None, &m))?;
    Ok(EcsService {
        cluster: runtime.cluster.clone(),
        region: runtime.region.clone(),
        service_name,
        task_definition: Value::Object(task_definition).to_string(),
        settings: Value::Object(settings).to_string(),
        service_id: ids.service_id.clone(),
        version: String::new(),
        task_definition_file: task_file.clone(),
        service_file: service_file.clone(),
        adopt: runtime.adopt,
    })
}

fn located(file: &str, line: Option<usize>, message: &str) -> String {
    match line {
        Some(line) => format!("{file}:{line}: {message}"),
        None => format!("{file}: {message}"),
    }
}

/// A file's one JSON object: JSON for `*.json`, else YAML. The error has
/// the line when the text does not parse.
pub(crate) fn parse(file: &str, text: &str) -> Result<Map<String, Value>, (Option<usize>, String)> {
    let value = if file.ends_with(".json") {
        serde_json::from_str(text).map_err(|e| (Some(e.line()), format!("invalid JSON: {e}")))?
    } else {
        let mut documents = yaml::parse_json_documents(text)
            .map_err(|(line, message)| (Some(line), format!("invalid YAML: {message}")))?;
        if documents.len() != 1 {
            return Err((
                None,
                format!("holds {} documents; write exactly one", documents.len()),
            ));
        }
        documents.remove(0)
    };
    match value {
        Value::Object(map) => Ok(map),
        _ => Err((
            None,
            "must be one object (a mapping of the request's fields)".to_owned(),
        )),
    }
}

/// A RegisterTaskDefinition request: a family and containers, and only
/// keys ECS knows (ECS ignores the others, which would hide a typo).
pub(crate) fn check_task_definition(map: &Map<String, Value>) -> Result<(), String> {
    known_keys(map, TASK_DEFINITION_KEYS, "RegisterTaskDefinition")?;
    if map
        .get("family")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(
            "'family' is required, as a string (the task definition family Vergence registers revisions of)"
                .to_owned(),
        );
    }
    if map
        .get("containerDefinitions")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err(
            "'containerDefinitions' is required, as a list of at least one container".to_owned(),
        );
    }
    own_tags(map)
}

/// A CreateService request without what Vergence sets; returns its
/// `serviceName`.
pub(crate) fn check_service(map: &Map<String, Value>) -> Result<String, String> {
    for (key, why) in SERVICE_KEYS_SET_BY_VERGENCE {
        if map.contains_key(*key) {
            return Err(format!("'{key}' is set by Vergence ({why}); remove it"));
        }
    }
    known_keys(map, SERVICE_KEYS, "CreateService")?;
    let name = map
        .get("serviceName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("'serviceName' is required, as a string")?;
    if let Some(count) = map.get("desiredCount")
        && count.as_u64().is_none()
    {
        return Err(format!(
            "'desiredCount' must be a whole number of tasks, not {count}"
        ));
    }
    own_tags(map)?;
    Ok(name.to_owned())
}

fn known_keys(map: &Map<String, Value>, known: &[&str], request: &str) -> Result<(), String> {
    for key in map.keys() {
        if !known.contains(&key.as_str()) {
            let hint = suggest(key, known.iter().copied())
                .map(|s| format!("; did you mean '{s}'?"))
                .unwrap_or_default();
            return Err(format!(
                "unknown key '{key}': ECS's {request} request has no such member{hint}"
            ));
        }
    }
    Ok(())
}

/// The `vergence:` tags are how a fetch recognises what Vergence
/// registered; a file setting them would forge that.
fn own_tags(map: &Map<String, Value>) -> Result<(), String> {
    let Some(list) = map.get("tags") else {
        return Ok(());
    };
    let Some(list) = list.as_array() else {
        return Err("'tags' must be a list of {key, value}".to_owned());
    };
    for tag in list {
        match tag.get("key").and_then(Value::as_str) {
            None => return Err("each of 'tags' needs a 'key' and a 'value'".to_owned()),
            Some(key) if key.starts_with("vergence:") => {
                return Err(format!(
                    "tag '{key}' is Vergence's own (it sets {} and {}); use another prefix",
                    tags::SERVICE_ID,
                    tags::VERSION
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn a_task_definition_needs_a_family_and_containers_and_known_keys_only() {
        let good =
            json!({"family": "web", "containerDefinitions": [{"name": "web", "image": "x"}]});
        assert!(check_task_definition(&object(good)).is_ok());
        let typo =
            json!({"family": "web", "containerDefinitons": [], "containerDefinitions": [{}]});
        let message = check_task_definition(&object(typo)).unwrap_err();
        assert!(
            message.contains("unknown key 'containerDefinitons'")
                && message.contains("did you mean 'containerDefinitions'"),
            "{message}"
        );
        let empty = json!({"family": "web", "containerDefinitions": []});
        assert!(
            check_task_definition(&object(empty))
                .unwrap_err()
                .contains("'containerDefinitions' is required")
        );
        let forged = json!({"family": "web", "containerDefinitions": [{}], "tags": [{"key": "vergence:version", "value": "v9"}]});
        assert!(
            check_task_definition(&object(forged))
                .unwrap_err()
                .contains("tag 'vergence:version' is Vergence's own")
        );
    }

    #[test]
    fn a_service_file_names_its_service_and_leaves_cluster_and_task_definition_to_vergence() {
        let good = json!({"serviceName": "web", "desiredCount": 2, "launchType": "FARGATE"});
        assert_eq!(check_service(&object(good)).unwrap(), "web");
        let cluster = json!({"serviceName": "web", "cluster": "c"});
        assert!(
            check_service(&object(cluster))
                .unwrap_err()
                .contains("'cluster' is set by Vergence")
        );
        let count = json!({"serviceName": "web", "desiredCount": "two"});
        assert!(
            check_service(&object(count))
                .unwrap_err()
                .contains("'desiredCount' must be a whole number")
        );
        assert!(
            check_service(&object(json!({"desiredCount": 1})))
                .unwrap_err()
                .contains("'serviceName' is required")
        );
    }

    #[test]
    fn files_are_json_or_yaml_objects() {
        assert_eq!(
            parse("t.yaml", "family: web\n").unwrap(),
            object(json!({"family": "web"}))
        );
        let (line, bad) = parse("t.json", "{\n  \"family\": web\n}").unwrap_err();
        assert_eq!(line, Some(2));
        assert!(bad.starts_with("invalid JSON"), "{bad}");
        assert!(
            parse("t.json", "[1]")
                .unwrap_err()
                .1
                .contains("must be one object")
        );
    }
}
