//! What services and jobs share: resource ids, the split between the spec a
//! caller writes and the fields only the server writes, update masks,
//! etags, and the checks that turn a bad body into `INVALID_ARGUMENT`.

use serde_json::{Map, Value};

use crate::error::{ApiError, Code};
use crate::wire::{self, EnumEncoding};

/// Fields every top-level resource has that callers cannot write.
pub(crate) const OUTPUT_ONLY: &[&str] = &[
    "name",
    "uid",
    "generation",
    "createTime",
    "updateTime",
    "deleteTime",
    "expireTime",
    "creator",
    "lastModifier",
    "observedGeneration",
    "terminalCondition",
    "conditions",
    "reconciling",
    "satisfiesPzs",
    "etag",
];

/// Checks a resource id the way the API does: lowercase letters, digits
/// and hyphens, starting with a letter, not ending with a hyphen.
pub(crate) fn check_id(id: &str, field: &str) -> Result<(), ApiError> {
    let well_formed = id.len() <= 63
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && !id.ends_with('-')
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if well_formed {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{field} '{id}' is invalid: it must start with a lowercase letter, hold only lowercase letters, digits and hyphens, not end with a hyphen, and be at most 63 characters long."
        )))
    }
}

/// The caller-written part of a request body: the body minus output-only
/// fields (`extra_output_only` are the resource's own), enums by name.
pub(crate) fn spec_of(body: Option<Value>, extra_output_only: &[&str]) -> Result<Value, ApiError> {
    let Some(Value::Object(mut fields)) = body else {
        return Err(ApiError::invalid(
            "Invalid JSON payload received: the request body must be a JSON object.",
        ));
    };
    for key in OUTPUT_ONLY.iter().chain(extra_output_only) {
        fields.remove(*key);
    }
    let mut spec = Value::Object(fields);
    wire::encode_enums(&mut spec, EnumEncoding::Names);
    Ok(spec)
}

/// Checks that `containers` (at `path` in the body) lists at least one
/// container and that each names an image.
pub(crate) fn check_containers(containers: &Value, path: &str) -> Result<(), ApiError> {
    let containers = containers.as_array().map(Vec::as_slice).unwrap_or_default();
    if containers.is_empty() {
        return Err(ApiError::invalid(format!(
            "{path}: at least one container is required."
        )));
    }
    for (index, container) in containers.iter().enumerate() {
        if wire::str_field(container, "image").is_empty() {
            return Err(ApiError::invalid(format!(
                "{path}[{index}].image: Required."
            )));
        }
    }
    Ok(())
}

/// The spec after an update: with a mask, only the masked top-level fields
/// come from `new` (a path like `template.containers` replaces all of
/// `template`); without one, `new` replaces the whole spec.
pub(crate) fn apply_mask(old: &Value, new: Value, mask: Option<&str>) -> Value {
    let Some(mask) = mask.filter(|m| !m.is_empty()) else {
        return new;
    };
    let mut merged = old.as_object().cloned().unwrap_or_default();
    for path in mask.split(',') {
        let field = path.trim().split('.').next().unwrap_or_default();
        match new.get(field) {
            Some(value) => merged.insert(field.to_owned(), value.clone()),
            None => merged.remove(field),
        };
    }
    Value::Object(merged)
}

/// The spec part of a stored resource.
pub(crate) fn spec_part(resource: &Value, extra_output_only: &[&str]) -> Value {
    let mut fields: Map<String, Value> = resource.as_object().cloned().unwrap_or_default();
    for key in OUTPUT_ONLY.iter().chain(extra_output_only) {
        fields.remove(*key);
    }
    Value::Object(fields)
}

/// Replaces the spec part of `resource` with `spec`, keeping its
/// output-only fields.
pub(crate) fn with_spec(resource: &Value, spec: &Value, extra_output_only: &[&str]) -> Value {
    let mut fields = spec.as_object().cloned().unwrap_or_default();
    for key in OUTPUT_ONLY.iter().chain(extra_output_only) {
        if let Some(value) = resource.get(*key) {
            fields.insert((*key).to_owned(), value.clone());
        }
    }
    Value::Object(fields)
}

/// An etag a caller sent must match the resource's: the API's optimistic
/// concurrency check.
pub(crate) fn check_etag(resource: &Value, given: Option<&str>) -> Result<(), ApiError> {
    match given.filter(|e| !e.is_empty()) {
        Some(given) if given != wire::str_field(resource, "etag") => Err(ApiError::new(
            Code::Aborted,
            format!(
                "The etag '{given}' does not match the current etag of '{}'.",
                wire::str_field(resource, "name")
            ),
        )),
        _ => Ok(()),
    }
}

/// The `generation` (an int64, so a JSON string) of a resource.
pub(crate) fn generation(resource: &Value) -> i64 {
    resource["generation"]
        .as_str()
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}

/// `ALREADY_EXISTS` for a resource about to be created twice.
pub(crate) fn already_exists(name: &str) -> ApiError {
    ApiError::new(
        Code::AlreadyExists,
        format!("Resource '{name}' already exists."),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_mask_replaces_only_the_fields_it_names() {
        let old = json!({"labels": {"a": "1"}, "template": {"x": 1}, "description": "old"});
        let new = json!({"labels": {"b": "2"}, "template": {"x": 2}});
        let merged = apply_mask(&old, new.clone(), Some("labels,description"));
        assert_eq!(merged, json!({"labels": {"b": "2"}, "template": {"x": 1}}));
        assert_eq!(apply_mask(&old, new.clone(), None), new);
    }

    #[test]
    fn ids_follow_the_api_rules() {
        assert!(check_id("web-1", "serviceId").is_ok());
        assert!(check_id("Web", "serviceId").is_err());
        assert!(check_id("1web", "serviceId").is_err());
        assert!(check_id("web-", "serviceId").is_err());
    }
}
