//! JSON merge patch (RFC 7386) and an approximation of strategic merge
//! patch: merge patch plus merge-by-key for the lists the real schema
//! declares associative, and `$patch: delete` / `$patch: replace`.

use serde_json::{Map, Value};

/// The merge key of an associative list field, when every item has it;
/// `None` makes the list atomic (replaced as a whole).
///
/// Keys follow the real schema's `x-kubernetes-list-map-keys` where they
/// differ from `name`: volume mounts are keyed by `mountPath`, ports by
/// `containerPort` (containers) or `port` (services).
pub(crate) fn list_key<'a>(
    field: &str,
    items: impl IntoIterator<Item = &'a Value> + Clone,
) -> Option<&'static str> {
    let candidates: &[&'static str] = match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => &["name"],
        "volumeMounts" => &["mountPath"],
        "ports" => &["containerPort", "port"],
        "conditions" => &["type"],
        "hostAliases" => &["ip"],
        _ => &[],
    };
    candidates.iter().copied().find(|key| {
        items
            .clone()
            .into_iter()
            .all(|item| item.get(*key).is_some())
    })
}

/// RFC 7386: objects merge recursively, `null` removes, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else { return };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// Strategic merge patch, approximately as the real server applies it to
/// built-in kinds.
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = without_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else { return };
    for (key, value) in patch_map.iter().filter(|(k, _)| !k.starts_with('$')) {
        if value.is_null() {
            map.remove(key);
            continue;
        }
        match (map.get_mut(key), value) {
            (Some(Value::Array(existing)), Value::Array(items)) => {
                match list_key(key, existing.iter().chain(items.iter())) {
                    Some(merge_key) => merge_by_key(existing, items, merge_key),
                    None => *existing = items.iter().map(without_directives).collect(),
                }
            }
            (Some(current @ Value::Object(_)), Value::Object(_)) => strategic_merge(current, value),
            _ => {
                map.insert(key.clone(), without_directives(value));
            }
        }
    }
}

fn merge_by_key(existing: &mut Vec<Value>, items: &[Value], key: &str) {
    for item in items {
        let id = item.get(key);
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            existing.retain(|e| e.get(key) != id);
        } else if let Some(current) = existing.iter_mut().find(|e| e.get(key) == id) {
            strategic_merge(current, item);
        } else {
            existing.push(without_directives(item));
        }
    }
}

/// A patch value as stored: `$`-directives and deleted list items removed.
fn without_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                .map(without_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "list": [1, 2]});
        merge_patch(
            &mut target,
            &json!({"a": "z", "c": {"f": null}, "list": [3]}),
        );
        assert_eq!(target, json!({"a": "z", "c": {"d": "e"}, "list": [3]}));
    }

    #[test]
    fn strategic_merge_merges_containers_by_name_and_replaces_args() {
        let mut target = json!({"spec": {"containers": [
            {"name": "main", "image": "a:1", "args": ["x"]},
            {"name": "side", "image": "s:1"}
        ]}});
        strategic_merge(
            &mut target,
            &json!({"spec": {"containers": [
                {"name": "main", "image": "a:2", "args": ["y"]},
                {"name": "side", "$patch": "delete"},
                {"name": "new", "image": "n:1"}
            ]}}),
        );
        assert_eq!(
            target,
            json!({"spec": {"containers": [
                {"name": "main", "image": "a:2", "args": ["y"]},
                {"name": "new", "image": "n:1"}
            ]}})
        );
    }

    #[test]
    fn volume_mounts_are_keyed_by_mount_path() {
        let items = [
            json!({"name": "v", "mountPath": "/a"}),
            json!({"name": "v", "mountPath": "/b"}),
        ];
        assert_eq!(list_key("volumeMounts", items.iter()), Some("mountPath"));
        assert_eq!(
            list_key("ports", [json!({"port": 80})].iter()),
            Some("port")
        );
        assert_eq!(list_key("args", [json!("x")].iter()), None);
    }
}
