//! API errors and the `Status` bodies the real server answers them with, so
//! `kube::Error::Api` parses code, reason, message and details as it would
//! against a real cluster.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::resources::ResourceType;

/// A failed API call: becomes a `Status` body with the HTTP code.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code, also the Status `code`.
    pub code: u16,
    /// Status `reason` (`NotFound`, `AlreadyExists`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message, worded as the real server words it.
    pub message: String,
    /// Status `details`, when the real server sends them.
    pub details: Option<Value>,
}

/// One field problem of a 422 Invalid answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, ...
    pub reason: &'static str,
    /// The dotted field path (`spec.template.spec.restartPolicy`).
    pub field: String,
    /// What is wrong, without the field name.
    pub message: String,
}

impl Cause {
    pub(crate) fn required(field: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        Self {
            reason: "FieldValueRequired",
            field: field.to_owned(),
            message,
        }
    }

    pub(crate) fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.to_owned(),
            message: format!("Invalid value: {value}: {detail}"),
        }
    }

    pub(crate) fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.to_owned(),
            message: format!("Forbidden: {detail}"),
        }
    }
}

fn resource_details(rt: &ResourceType, name: &str) -> Value {
    json!({"name": name, "group": rt.group, "kind": rt.plural})
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String, details: Option<Value>) -> Self {
        Self {
            code,
            reason,
            message,
            details,
        }
    }

    pub(crate) fn not_found(rt: &ResourceType, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", rt.group_resource());
        Self::new(404, "NotFound", message, Some(resource_details(rt, name)))
    }

    pub(crate) fn already_exists(rt: &ResourceType, name: &str) -> Self {
        let message = format!("{} \"{name}\" already exists", rt.group_resource());
        Self::new(
            409,
            "AlreadyExists",
            message,
            Some(resource_details(rt, name)),
        )
    }

    /// Optimistic-concurrency failure of an update or a precondition.
    pub(crate) fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            rt.group_resource()
        );
        Self::new(409, "Conflict", message, Some(resource_details(rt, name)))
    }

    /// The stale-resourceVersion conflict of a PUT.
    pub(crate) fn modified(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// Server-side apply conflicts: one cause per field, naming its manager.
    pub(crate) fn apply_conflicts(conflicts: &[(String, String)], api_version: &str) -> Self {
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(manager, field)| {
                json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with \"{manager}\" using {api_version}"),
                    "field": field,
                })
            })
            .collect();
        let listed: Vec<String> = conflicts
            .iter()
            .map(|(manager, field)| {
                format!("conflict with \"{manager}\" using {api_version}: {field}")
            })
            .collect();
        let noun = if conflicts.len() == 1 {
            "conflict"
        } else {
            "conflicts"
        };
        let message = format!(
            "Apply failed with {} {noun}: {}",
            conflicts.len(),
            listed.join("\n")
        );
        Self::new(409, "Conflict", message, Some(json!({"causes": causes})))
    }

    pub(crate) fn invalid(rt: &ResourceType, name: &str, causes: &[Cause]) -> Self {
        let listed: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if listed.len() == 1 {
            listed.join("")
        } else {
            format!("[{}]", listed.join(", "))
        };
        let message = format!("{} \"{name}\" is invalid: {summary}", rt.group_kind());
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let details = json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes});
        Self::new(422, "Invalid", message, Some(details))
    }

    /// An apply without `fieldManager`.
    pub(crate) fn field_manager_required() -> Self {
        let details = json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{
            "reason": "FieldValueRequired",
            "message": "Required value: is required for apply patch",
            "field": "fieldManager",
        }]});
        Self::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
            Some(details),
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), None)
    }

    /// A watch or list from a resourceVersion older than the kept history.
    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into(), None)
    }

    pub(crate) fn too_old_resource_version(requested: u64, oldest: u64) -> Self {
        Self::expired(format!("too old resource version: {requested} ({oldest})"))
    }

    pub(crate) fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json; got {content_type:?}"
            ),
            None,
        )
    }

    pub(crate) fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource: {method} {path}"
            ),
            None,
        )
    }

    pub(crate) fn path_not_found(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
            None,
        )
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".to_owned(), None)
    }

    pub(crate) fn too_large_resource_version(requested: u64, current: u64) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
            Some(
                json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]}),
            ),
        )
    }

    /// The `Status` object itself (also the `object` of a watch ERROR event).
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, axum::Json(self.to_status())).into_response()
    }
}

/// The `Status` a successful delete answers with, as the real server does
/// for kinds that do not return the deleted object.
pub(crate) fn deleted(rt: &ResourceType, name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": uid},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_kind;

    #[test]
    fn already_exists_reads_like_the_real_server() {
        let jobs = by_kind("Job").unwrap();
        let status = ApiError::already_exists(jobs, "x").to_status();
        assert_eq!(
            status,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"jobs.batch \"x\" already exists","reason":"AlreadyExists",
                   "details":{"name":"x","group":"batch","kind":"jobs"},"code":409})
        );
    }

    #[test]
    fn invalid_names_kind_and_every_cause() {
        let jobs = by_kind("Job").unwrap();
        let err = ApiError::invalid(
            jobs,
            "x",
            &[Cause::required("spec.template.spec.restartPolicy", "")],
        );
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "Job.batch \"x\" is invalid: spec.template.spec.restartPolicy: Required value"
        );
        assert_eq!(
            err.details.unwrap()["causes"][0]["field"],
            "spec.template.spec.restartPolicy"
        );
    }
}
