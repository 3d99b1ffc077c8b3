//! List calls: selectors, `limit`/`continue` pagination over a consistent
//! snapshot, and the `resourceVersion`/`resourceVersionMatch` semantics
//! (most recent, any, not older than, exact) with their 410 and 504 answers.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::params::Params;
use super::path::ResourcePath;
use crate::meta;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::Store;

/// Label, field and namespace filters shared by list and watch.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub(crate) fn from_params(rp: &ResourcePath, params: &Params) -> Result<Self, ApiError> {
        Ok(Self {
            namespace: rp.namespace.clone(),
            labels: LabelSelector::parse(params.get("labelSelector").unwrap_or_default())?,
            fields: FieldSelector::parse(params.get("fieldSelector").unwrap_or_default(), rp.rt)?,
        })
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| ns == meta::namespace(obj))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    fn is_empty(&self) -> bool {
        self.labels == LabelSelector::default() && self.fields == FieldSelector::default()
    }
}

/// A continue token: the snapshot's resourceVersion and the last key served.
fn encode_continue(rv: u64, last: &Value) -> String {
    let start = format!("{}/{}", meta::namespace(last), meta::name(last));
    URL_SAFE_NO_PAD.encode(json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let invalid = || ApiError::bad_request(format!("continue key is not valid: {token}"));
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let rv = doc["rv"].as_u64().ok_or_else(invalid)?;
    let start = doc["start"].as_str().ok_or_else(invalid)?.to_owned();
    Ok((rv, start))
}

fn parse_rv(text: &str) -> Result<u64, ApiError> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {text:?}")))
}

/// The objects to list and the resourceVersion of that snapshot.
fn snapshot(
    store: &Store,
    rp: &ResourcePath,
    params: &Params,
) -> Result<(Vec<Value>, u64, Option<String>), ApiError> {
    let rt = rp.rt;
    let ns = rp.namespace.as_deref();
    if let Some(token) = params.get("continue").filter(|t| !t.is_empty()) {
        let (rv, start) = decode_continue(token)?;
        let objects = store.list_at(rt, ns, rv).map_err(|e| match e.code {
            410 => ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response to get a list result that is older than the too-old resource version.",
            ),
            _ => e,
        })?;
        return Ok((objects, rv, Some(start)));
    }
    let rv = params.get("resourceVersion").filter(|v| !v.is_empty());
    match (rv, params.get("resourceVersionMatch")) {
        (None, Some(_)) => Err(ApiError::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )),
        (Some(rv), Some("Exact")) => {
            let rv = parse_rv(rv)?;
            Ok((store.list_at(rt, ns, rv)?, rv, None))
        }
        (Some(rv), None | Some("NotOlderThan")) => {
            let wanted = parse_rv(rv)?;
            let (objects, current) = store.list(rt, ns);
            if wanted > current {
                return Err(ApiError::too_large_resource_version(wanted, current));
            }
            Ok((objects, current, None))
        }
        (Some(_), Some(other)) => Err(ApiError::bad_request(format!(
            "unknown resourceVersionMatch {other:?}"
        ))),
        (None, None) => {
            let (objects, current) = store.list(rt, ns);
            Ok((objects, current, None))
        }
    }
}

/// The list answer for a collection GET.
pub(crate) fn list(store: &Store, rp: &ResourcePath, params: &Params) -> Result<Value, ApiError> {
    let filter = Filter::from_params(rp, params)?;
    let (objects, rv, start) = snapshot(store, rp, params)?;
    let key = |obj: &Value| format!("{}/{}", meta::namespace(obj), meta::name(obj));
    let mut matching: Vec<Value> = objects
        .into_iter()
        .filter(|obj| start.as_ref().is_none_or(|s| key(obj) > *s))
        .filter(|obj| filter.matches(obj))
        .collect();
    let limit = params.u64("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(limit) = limit
        && matching.len() > limit
    {
        let remaining = matching.len() - limit;
        matching.truncate(limit);
        if let Some(last) = matching.last() {
            metadata["continue"] = encode_continue(rv, last).into();
        }
        // The real server only knows the count when nothing is filtered.
        if filter.is_empty() {
            metadata["remainingItemCount"] = remaining.into();
        }
    }
    // List items carry no kind/apiVersion on the wire, as from the real server.
    for item in &mut matching {
        if let Some(map) = item.as_object_mut() {
            map.remove("kind");
            map.remove("apiVersion");
        }
    }
    Ok(json!({
        "kind": format!("{}List", rp.rt.kind),
        "apiVersion": rp.rt.api_version(),
        "metadata": metadata,
        "items": matching,
    }))
}
