//! JSON patch (RFC 6902): add, remove, replace, move, copy and test over
//! JSON pointers (RFC 6901).

use serde_json::Value;

/// Why a JSON patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JsonPatchError {
    /// The patch document is not a list of operations.
    Malformed(String),
    /// An operation does not apply to the object (the server answers 422).
    NotApplicable(String),
}

/// Applies every operation in order; nothing is changed on error.
pub(crate) fn apply(target: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let ops = patch.as_array().ok_or_else(|| {
        JsonPatchError::Malformed("a JSON patch must be a list of operations".into())
    })?;
    let mut working = target.clone();
    for op in ops {
        apply_one(&mut working, op)?;
    }
    *target = working;
    Ok(())
}

fn field<'a>(op: &'a Value, name: &str) -> Result<&'a Value, JsonPatchError> {
    op.get(name)
        .ok_or_else(|| JsonPatchError::Malformed(format!("operation {op} is missing \"{name}\"")))
}

fn pointer_field(op: &Value, name: &str) -> Result<Vec<String>, JsonPatchError> {
    let text = field(op, name)?
        .as_str()
        .ok_or_else(|| JsonPatchError::Malformed(format!("\"{name}\" of {op} is not a string")))?;
    parse_pointer(text)
}

fn parse_pointer(text: &str) -> Result<Vec<String>, JsonPatchError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let rest = text.strip_prefix('/').ok_or_else(|| {
        JsonPatchError::Malformed(format!("JSON pointer {text:?} does not start with '/'"))
    })?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn apply_one(target: &mut Value, op: &Value) -> Result<(), JsonPatchError> {
    let name = field(op, "op")?.as_str().unwrap_or_default();
    let path = pointer_field(op, "path")?;
    match name {
        "add" => add(target, &path, field(op, "value")?.clone()),
        "remove" => remove(target, &path).map(drop),
        "replace" => {
            remove(target, &path)?;
            add(target, &path, field(op, "value")?.clone())
        }
        "move" => {
            let value = remove(target, &pointer_field(op, "from")?)?;
            add(target, &path, value)
        }
        "copy" => {
            let value = get(target, &pointer_field(op, "from")?)?.clone();
            add(target, &path, value)
        }
        "test" => {
            let expected = field(op, "value")?;
            let actual = get(target, &path)?;
            if actual == expected {
                Ok(())
            } else {
                Err(JsonPatchError::NotApplicable(format!(
                    "testing value /{} failed: {actual} is not {expected}",
                    path.join("/")
                )))
            }
        }
        other => Err(JsonPatchError::Malformed(format!(
            "unknown JSON patch operation {other:?}"
        ))),
    }
}

fn missing(path: &[String]) -> JsonPatchError {
    JsonPatchError::NotApplicable(format!("doc is missing path: \"/{}\"", path.join("/")))
}

fn get<'a>(target: &'a Value, path: &[String]) -> Result<&'a Value, JsonPatchError> {
    path.iter()
        .try_fold(target, |v, token| match v {
            Value::Object(map) => map.get(token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
        .ok_or_else(|| missing(path))
}

fn parent<'a>(
    target: &'a mut Value,
    path: &[String],
) -> Result<(&'a mut Value, String), JsonPatchError> {
    let (last, init) = path.split_last().ok_or_else(|| missing(path))?;
    let mut current = target;
    for token in init {
        current = match current {
            Value::Object(map) => map.get_mut(token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| missing(path))?;
    }
    Ok((current, last.clone()))
}

fn add(target: &mut Value, path: &[String], value: Value) -> Result<(), JsonPatchError> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (container, last) = parent(target, path)?;
    match container {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let index = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>().map_err(|_| missing(path))?
            };
            if index > items.len() {
                return Err(missing(path));
            }
            items.insert(index, value);
            Ok(())
        }
        _ => Err(missing(path)),
    }
}

fn remove(target: &mut Value, path: &[String]) -> Result<Value, JsonPatchError> {
    let (container, last) = parent(target, path)?;
    match container {
        Value::Object(map) => map.remove(&last).ok_or_else(|| missing(path)),
        Value::Array(items) => {
            let index = last.parse::<usize>().map_err(|_| missing(path))?;
            if index < items.len() {
                Ok(items.remove(index))
            } else {
                Err(missing(path))
            }
        }
        _ => Err(missing(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operations_apply_in_order() {
        let mut doc =
            json!({"spec": {"replicas": 1, "args": ["a"]}, "metadata": {"labels": {"a/b": "x"}}});
        let patch = json!([
            {"op": "test", "path": "/spec/replicas", "value": 1},
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "add", "path": "/spec/args/-", "value": "b"},
            {"op": "remove", "path": "/metadata/labels/a~1b"},
            {"op": "copy", "from": "/spec/replicas", "path": "/spec/copied"}
        ]);
        apply(&mut doc, &patch).unwrap();
        assert_eq!(
            doc,
            json!({"spec": {"replicas": 3, "args": ["a", "b"], "copied": 3}, "metadata": {"labels": {}}})
        );
    }

    #[test]
    fn a_failed_test_changes_nothing() {
        let mut doc = json!({"a": 1});
        let patch = json!([{"op": "replace", "path": "/a", "value": 2}, {"op": "test", "path": "/a", "value": 5}]);
        assert!(matches!(
            apply(&mut doc, &patch),
            Err(JsonPatchError::NotApplicable(_))
        ));
        assert_eq!(doc, json!({"a": 1}));
        assert!(matches!(
            apply(&mut doc, &json!({"op": "add"})),
            Err(JsonPatchError::Malformed(_))
        ));
    }
}
