//! The write verbs over the store (create, replace, patch, apply, status
//! writes), with the metadata bookkeeping the real server does on each:
//! uid, creationTimestamp, generateName, namespace defaulting, status
//! reset, defaults, validation and managedFields. HTTP handlers and the
//! in-process controllers both write through here.

use serde_json::{Value, json};

mod apply;
mod controller;

pub(crate) use apply::apply;
pub(crate) use controller::{create_as, update_status, update_status_with};

use crate::defaults;
use crate::meta;
use crate::patch::fieldset::Scope;
use crate::patch::managed::{Actor, record_update};
use crate::patch::{PatchKind, patched};
use crate::resources::{ResourceType, by_kind};
use crate::status::ApiError;
use crate::store::Store;
use crate::validation::validate;

/// Where a write lands and who makes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub rt: &'static ResourceType,
    /// "" for cluster-scoped resources.
    pub namespace: &'a str,
    pub manager: &'a str,
    pub scope: Scope,
    pub dry_run: bool,
}

fn actor<'a>(target: &Target<'a>, api_version: &'a str) -> Actor<'a> {
    Actor {
        manager: target.manager,
        scope: target.scope,
        api_version,
    }
}

/// POST: creates a new object from the request body.
pub(crate) fn create(store: &Store, target: &Target<'_>, body: Value) -> Result<Value, ApiError> {
    let mut obj = checked_body(target, body)?;
    let metadata = meta::metadata_mut(&mut obj);
    if metadata
        .get("resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|rv| !rv.is_empty())
    {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if metadata
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && let Some(prefix) = metadata.get("generateName").and_then(Value::as_str)
    {
        let name = format!("{prefix}{}", meta::name_suffix());
        metadata.insert("name".into(), name.into());
    }
    let name = meta::name(&obj).to_owned();
    require_namespace(store, target)?;
    let api_version = target.rt.api_version();
    let actor = actor(target, &api_version);
    let rt = target.rt;
    store.write(
        rt,
        target.namespace,
        &name,
        target.dry_run,
        Box::new(|current| {
            if current.is_some() {
                return Err(ApiError::already_exists(rt, &name));
            }
            let mut obj = new_object(rt, obj);
            defaults::apply(rt, &mut obj);
            validate(rt, &obj, None)?;
            record_update(None, &mut obj, &actor);
            Ok(obj)
        }),
    )
}

/// PUT: replaces the object (or, for `/status`, its status), guarded by
/// the body's resourceVersion when it has one.
pub(crate) fn replace(
    store: &Store,
    target: &Target<'_>,
    name: &str,
    body: Value,
) -> Result<Value, ApiError> {
    let body = checked_body(target, body)?;
    if meta::name(&body) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta::name(&body)
        )));
    }
    let api_version = target.rt.api_version();
    let actor = actor(target, &api_version);
    let (rt, scope) = (target.rt, target.scope);
    store.write(
        rt,
        target.namespace,
        name,
        target.dry_run,
        Box::new(move |current| {
            let current = current.ok_or_else(|| ApiError::not_found(rt, name))?;
            check_resource_version(rt, name, current, &body)?;
            let next = merged_write(rt, scope, current, body);
            finish(rt, current, next, &actor)
        }),
    )
}

/// PATCH with a merge, strategic-merge or JSON patch document.
pub(crate) fn patch(
    store: &Store,
    target: &Target<'_>,
    name: &str,
    kind: PatchKind,
    patch: Value,
) -> Result<Value, ApiError> {
    let api_version = target.rt.api_version();
    let actor = actor(target, &api_version);
    let (rt, scope) = (target.rt, target.scope);
    store.write(
        rt,
        target.namespace,
        name,
        target.dry_run,
        Box::new(move |current| {
            let current = current.ok_or_else(|| ApiError::not_found(rt, name))?;
            let next = patched(kind, current, &patch)?;
            check_resource_version(rt, name, current, &next)?;
            if meta::name(&next) != name || meta::uid(&next) != meta::uid(current) {
                return Err(ApiError::bad_request(
                    "a patch may not change metadata.name or metadata.uid",
                ));
            }
            let next = merged_write(rt, scope, current, next);
            finish(rt, current, next, &actor)
        }),
    )
}

/// The body must be an object of this resource's kind and namespace.
fn checked_body(target: &Target<'_>, mut body: Value) -> Result<Value, ApiError> {
    let rt = target.rt;
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    if let Some(version) = body.get("apiVersion").and_then(Value::as_str)
        && version != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    let metadata = meta::metadata_mut(&mut body);
    match metadata.get("namespace").and_then(Value::as_str) {
        Some(ns) if rt.namespaced && !ns.is_empty() && ns != target.namespace => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        _ if rt.namespaced => {
            metadata.insert("namespace".into(), target.namespace.into());
        }
        _ => {
            metadata.remove("namespace");
        }
    }
    Ok(body)
}

/// Creating into a namespace needs the namespace to exist.
fn require_namespace(store: &Store, target: &Target<'_>) -> Result<(), ApiError> {
    let Some(namespaces) = by_kind("Namespace") else {
        return Ok(());
    };
    if target.rt.namespaced && store.get(namespaces, "", target.namespace).is_none() {
        return Err(ApiError::not_found(namespaces, target.namespace));
    }
    Ok(())
}

/// Server-set metadata and initial status of a new object.
fn new_object(rt: &ResourceType, mut obj: Value) -> Value {
    let metadata = meta::metadata_mut(&mut obj);
    for server_field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        metadata.remove(server_field);
    }
    metadata.insert("uid".into(), meta::new_uid().into());
    metadata.insert("creationTimestamp".into(), meta::now().into());
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), rt.api_version().into());
        map.insert("kind".into(), rt.kind.into());
        if rt.has_status() {
            map.remove("status");
        }
    }
    if rt.kind == "Pod" {
        obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
    }
    obj
}

/// A PUT or PATCH over `current`: the main resource keeps its status and
/// server metadata; a `/status` write changes the status only.
fn merged_write(rt: &ResourceType, scope: Scope, current: &Value, written: Value) -> Value {
    match scope {
        Scope::Status => {
            let mut next = current.clone();
            if let Some(fields) = written.get("metadata").and_then(|m| m.get("managedFields")) {
                meta::metadata_mut(&mut next).insert("managedFields".into(), fields.clone());
            }
            match written.get("status") {
                Some(status) => next["status"] = status.clone(),
                None => {
                    if let Some(map) = next.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            next
        }
        Scope::Main => {
            let mut next = written;
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "resourceVersion",
            ] {
                match current.get("metadata").and_then(|m| m.get(field)) {
                    Some(value) => {
                        meta::metadata_mut(&mut next).insert(field.into(), value.clone())
                    }
                    None => meta::metadata_mut(&mut next).remove(field),
                };
            }
            if let Some(map) = next.as_object_mut() {
                map.insert("apiVersion".into(), rt.api_version().into());
                map.insert("kind".into(), rt.kind.into());
                if rt.has_status() {
                    match current.get("status") {
                        Some(status) => map.insert("status".into(), status.clone()),
                        None => map.remove("status"),
                    };
                }
            }
            next
        }
    }
}

fn finish(
    rt: &ResourceType,
    current: &Value,
    mut next: Value,
    actor: &Actor<'_>,
) -> Result<Value, ApiError> {
    // managedFields are the server's record; a client echoing them back
    // (GET, change, PUT) must not rewrite them.
    if let Some(fields) = current.get("metadata").and_then(|m| m.get("managedFields")) {
        meta::metadata_mut(&mut next).insert("managedFields".into(), fields.clone());
    }
    let mut next = finish_without_tracking(rt, current, next)?;
    record_update(Some(current), &mut next, actor);
    Ok(next)
}

fn finish_without_tracking(
    rt: &ResourceType,
    current: &Value,
    mut next: Value,
) -> Result<Value, ApiError> {
    defaults::apply(rt, &mut next);
    validate(rt, &next, Some(current))?;
    Ok(next)
}

fn check_resource_version(
    rt: &ResourceType,
    name: &str,
    current: &Value,
    written: &Value,
) -> Result<(), ApiError> {
    let wanted = meta::str_at(written, &["metadata", "resourceVersion"]).unwrap_or_default();
    let actual = meta::str_at(current, &["metadata", "resourceVersion"]).unwrap_or_default();
    if !wanted.is_empty() && wanted != actual {
        return Err(ApiError::modified(rt, name));
    }
    Ok(())
}
