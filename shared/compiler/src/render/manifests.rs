//! A service's Kubernetes manifests for one instance: each file rendered
//! as a template, read as YAML, checked to be Kubernetes objects, and
//! marked with the labels that tie it to the instance (what the agent
//! prunes and reports drift by). The version annotation is the agent's to
//! write, since the version is only known once the jobs are hashed.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::config::yaml;
use crate::model::Manifests;
use crate::template::Reference;
use vergence_model::adoption::Adopt;
use vergence_model::agent::protocol::labels;
use vergence_model::manifests::object_labels;
use vergence_model::{InstanceIds, InstanceKey, KubernetesObjects};

/// Renders the manifests of one instance; the error says which file and
/// line is wrong.
pub(crate) fn render(
    manifests: &Manifests,
    namespace: Option<&str>,
    adopt: Adopt,
    key: &InstanceKey,
    ids: &InstanceIds,
    resolve: impl Fn(&Reference) -> Option<String>,
) -> Result<KubernetesObjects, String> {
    let mut objects = Vec::new();
    for (file, template) in &manifests.files {
        let text = template.render(&resolve)?;
        let parsed = yaml::parse_json_documents(&text).map_err(|(line, message)| {
            format!("manifest {file}:{line}: invalid YAML: {message}")
        })?;
        check_objects(file, &parsed)?;
        objects.extend(parsed);
    }
    check_unique(&objects)?;
    let selector = selector(key);
    let objects = objects
        .into_iter()
        .map(|mut object| {
            mark(&mut object, &selector, ids);
            object.to_string()
        })
        .collect();
    Ok(KubernetesObjects {
        objects,
        namespace: namespace.map(str::to_owned),
        selector,
        version: String::new(),
        source: manifests.dir.clone(),
        adopt,
    })
}

/// The labels every object of the instance carries.
fn selector(key: &InstanceKey) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            object_labels::MANAGED_BY.to_owned(),
            object_labels::MANAGED_BY_VALUE.to_owned(),
        ),
        (labels::APPLICATION.to_owned(), key.application.to_string()),
        (labels::SERVICE.to_owned(), key.service.to_string()),
        (
            labels::RELEASE_CHANNEL.to_owned(),
            key.release_channel.to_string(),
        ),
    ])
}

/// Adds the instance's labels and its service id annotation; the user's
/// own labels and annotations stay.
fn mark(object: &mut Value, selector: &BTreeMap<String, String>, ids: &InstanceIds) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let service_id = [(object_labels::SERVICE_ID.to_owned(), ids.service_id.clone())];
    for (key, entries) in [
        ("labels", selector.clone().into_iter().collect::<Vec<_>>()),
        ("annotations", service_id.to_vec()),
    ] {
        let slot = metadata
            .entry(key.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        // `labels: null` (or not a mapping) is replaced, as the API would.
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        if let Value::Object(map) = slot {
            for (k, v) in entries {
                map.insert(k, Value::String(v));
            }
        }
    }
}

/// Each document must be one Kubernetes object: `apiVersion`, `kind` and
/// `metadata.name` as strings.
pub(crate) fn check_objects(file: &str, objects: &[Value]) -> Result<(), String> {
    for (i, object) in objects.iter().enumerate() {
        let at = format!("manifest {file}, document {}", i + 1);
        let Some(map) = object.as_object() else {
            return Err(format!(
                "{at}: not a Kubernetes object (a mapping with apiVersion, kind and metadata)"
            ));
        };
        for field in ["apiVersion", "kind"] {
            if map
                .get(field)
                .is_none_or(|v| v.as_str().is_none_or(str::is_empty))
            {
                return Err(format!("{at}: '{field}' is required, as a string"));
            }
        }
        if map["kind"]
            .as_str()
            .is_some_and(|kind| kind.ends_with("List"))
        {
            return Err(format!(
                "{at}: write one object per document instead of a {}",
                map["kind"].as_str().unwrap_or_default()
            ));
        }
        let name = map
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str);
        if name.is_none_or(str::is_empty) {
            return Err(format!("{at}: 'metadata.name' is required"));
        }
        if map
            .get("metadata")
            .and_then(|m| m.get("generateName"))
            .is_some()
        {
            return Err(format!(
                "{at}: 'metadata.generateName' cannot be applied repeatedly; give a fixed metadata.name"
            ));
        }
    }
    Ok(())
}

/// The same object twice would be applied twice, the second silently winning.
fn check_unique(objects: &[Value]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for object in objects {
        let field = |path: &[&str]| {
            path.iter()
                .try_fold(object, |v, k| v.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let group = field(&["apiVersion"])
            .rsplit_once('/')
            .map(|(g, _)| g.to_owned())
            .unwrap_or_default();
        let id = (
            group,
            field(&["kind"]),
            field(&["metadata", "namespace"]),
            field(&["metadata", "name"]),
        );
        if !seen.insert(id.clone()) {
            let (_, kind, namespace, name) = id;
            let shown = if namespace.is_empty() {
                name
            } else {
                format!("{namespace}/{name}")
            };
            return Err(format!("the manifests define {kind} {shown} twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_need_their_identity_and_come_one_per_document() {
        assert!(
            check_objects(
                "a.yaml",
                &[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})]
            )
            .is_ok()
        );
        let missing = check_objects(
            "a.yaml",
            &[json!({"kind": "ConfigMap", "metadata": {"name": "x"}})],
        );
        assert!(
            missing
                .unwrap_err()
                .contains("manifest a.yaml, document 1: 'apiVersion' is required")
        );
        let list = check_objects(
            "a.yaml",
            &[json!({"apiVersion": "v1", "kind": "List", "metadata": {"name": "x"}})],
        );
        assert!(list.unwrap_err().contains("one object per document"));
        let twice =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        assert!(
            check_unique(&[twice.clone(), twice])
                .unwrap_err()
                .contains("Deployment web twice")
        );
    }
}
