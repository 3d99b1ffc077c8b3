//! Every way an object can be patched: server-side apply with field
//! ownership, JSON merge patch, strategic merge patch and JSON patch,
//! chosen by the request's `Content-Type` as the real server does.

pub(crate) mod apply;
pub(crate) mod fieldset;
pub(crate) mod json_patch;
pub(crate) mod managed;
pub(crate) mod merge;

use serde_json::Value;

use crate::status::ApiError;

/// The patch types the real server accepts, by content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Apply,
    Merge,
    Strategic,
    Json,
}

impl PatchKind {
    /// The kind for a `Content-Type`, or 415 with the accepted types.
    pub(crate) fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        match essence {
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/json-patch+json" => Ok(Self::Json),
            _ => Err(ApiError::unsupported_media_type(content_type)),
        }
    }
}

/// Parses a patch body. Apply bodies are YAML; JSON is YAML, and JSON is
/// all the fake reads, so other YAML is answered 415 rather than misread.
pub(crate) fn parse_body(kind: PatchKind, body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| match kind {
        PatchKind::Apply => ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the fake API server reads apply configurations written as JSON only: {e}"
            ),
            details: None,
        },
        _ => ApiError::bad_request(format!("error decoding patch: {e}")),
    })
}

/// Applies a merge, strategic-merge or JSON patch to a copy of `current`.
pub(crate) fn patched(kind: PatchKind, current: &Value, patch: &Value) -> Result<Value, ApiError> {
    let mut next = current.clone();
    match kind {
        PatchKind::Merge => merge::merge_patch(&mut next, patch),
        PatchKind::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "a strategic merge patch must be a JSON object",
                ));
            }
            merge::strategic_merge(&mut next, patch);
        }
        PatchKind::Json => json_patch::apply(&mut next, patch).map_err(|e| match e {
            json_patch::JsonPatchError::Malformed(m) => ApiError::bad_request(m),
            json_patch::JsonPatchError::NotApplicable(m) => ApiError {
                code: 422,
                reason: "Invalid",
                message: format!(
                    "the server rejected our request due to an error in our request: {m}"
                ),
                details: None,
            },
        })?,
        PatchKind::Apply => {
            return Err(ApiError::bad_request(
                "server-side apply is not a patch document",
            ));
        }
    }
    Ok(next)
}
