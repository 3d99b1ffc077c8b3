//! Deletion with garbage collection: dependents (objects whose
//! ownerReferences name the deleted object) are deleted in the background
//! or foreground, or orphaned, and deleting a namespace deletes its
//! contents. Jobs orphan their pods unless told otherwise, as the real
//! batch/v1 default does.

use serde_json::{Value, json};

use crate::meta;
use crate::patch::fieldset::Scope;
use crate::patch::managed::{Actor, record_update};
use crate::resources::{RESOURCES, ResourceType};
use crate::status::{self, ApiError};
use crate::store::Store;

const GC_MANAGER: &str = "kube-controller-manager";

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    Orphan,
    Background,
    Foreground,
}

impl Propagation {
    pub(crate) fn parse(text: &str) -> Result<Self, ApiError> {
        match text {
            "Orphan" => Ok(Self::Orphan),
            "Background" => Ok(Self::Background),
            "Foreground" => Ok(Self::Foreground),
            other => Err(ApiError::bad_request(format!(
                "unknown propagationPolicy {other:?}"
            ))),
        }
    }
}

/// The options of a delete (query parameters and DeleteOptions body).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

/// Deletes one object; answers the response body the real server sends.
pub(crate) fn delete(
    store: &Store,
    rt: &'static ResourceType,
    namespace: &str,
    name: &str,
    options: &DeleteOptions,
) -> Result<Value, ApiError> {
    let current = store
        .get(rt, namespace, name)
        .ok_or_else(|| ApiError::not_found(rt, name))?;
    check_preconditions(rt, name, &current, options)?;
    if options.dry_run {
        return Ok(status::deleted(rt, name, meta::uid(&current)));
    }
    // batch/v1 Jobs keep the legacy default of orphaning their pods.
    let default = if rt.is("batch", "Job") {
        Propagation::Orphan
    } else {
        Propagation::Background
    };
    let propagation = options.propagation.unwrap_or(default);
    let uid = meta::uid(&current).to_owned();
    let response = match propagation {
        Propagation::Foreground => {
            let marked = mark_deleting(store, rt, namespace, name)?;
            delete_dependents(store, namespace, &uid);
            store.delete(rt, namespace, name, &|_| Ok(()))?;
            marked
        }
        Propagation::Background | Propagation::Orphan => {
            let gone = store.delete(rt, namespace, name, &|obj| {
                check_preconditions(rt, name, obj, options)
            })?;
            if propagation == Propagation::Orphan {
                orphan_dependents(store, namespace, &uid);
            } else {
                delete_dependents(store, namespace, &uid);
            }
            // Pods answer with the object, like their graceful deletion does.
            if rt.kind == "Pod" {
                gone
            } else {
                status::deleted(rt, name, &uid)
            }
        }
    };
    if rt.kind == "Namespace" {
        delete_namespace_contents(store, name);
    }
    Ok(response)
}

fn check_preconditions(
    rt: &ResourceType,
    name: &str,
    current: &Value,
    options: &DeleteOptions,
) -> Result<(), ApiError> {
    if let Some(uid) = &options.uid
        && uid != meta::uid(current)
    {
        let why = format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            meta::uid(current)
        );
        return Err(ApiError::conflict(rt, name, &why));
    }
    let rv = meta::str_at(current, &["metadata", "resourceVersion"]).unwrap_or_default();
    if let Some(wanted) = &options.resource_version
        && wanted != rv
    {
        let why = format!(
            "Precondition failed: ResourceVersion in precondition: {wanted}, ResourceVersion in object meta: {rv}"
        );
        return Err(ApiError::conflict(rt, name, &why));
    }
    Ok(())
}

/// Foreground deletion first marks the owner as being deleted.
fn mark_deleting(
    store: &Store,
    rt: &'static ResourceType,
    namespace: &str,
    name: &str,
) -> Result<Value, ApiError> {
    store.write(
        rt,
        namespace,
        name,
        false,
        Box::new(|current| {
            let mut next = current
                .cloned()
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            let metadata = meta::metadata_mut(&mut next);
            metadata.insert("deletionTimestamp".into(), meta::now().into());
            metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
            metadata.insert("finalizers".into(), json!(["foregroundDeletion"]));
            Ok(next)
        }),
    )
}

/// Objects in `namespace` owned by `owner_uid`.
fn dependents(
    store: &Store,
    namespace: &str,
    owner_uid: &str,
) -> Vec<(&'static ResourceType, Value)> {
    let owned_by = |obj: &Value| {
        meta::at(obj, &["metadata", "ownerReferences"])
            .and_then(Value::as_array)
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner_uid))
    };
    RESOURCES
        .iter()
        .filter(|rt| rt.namespaced)
        .flat_map(|rt| {
            store
                .list(rt, Some(namespace))
                .0
                .into_iter()
                .map(move |obj| (rt, obj))
        })
        .filter(|(_, obj)| owned_by(obj))
        .collect()
}

fn delete_dependents(store: &Store, namespace: &str, owner_uid: &str) {
    for (rt, obj) in dependents(store, namespace, owner_uid) {
        let name = meta::name(&obj);
        // Already gone is fine: something else deleted it first.
        if store.delete(rt, namespace, name, &|_| Ok(())).is_ok() {
            delete_dependents(store, namespace, meta::uid(&obj));
        }
    }
}

fn orphan_dependents(store: &Store, namespace: &str, owner_uid: &str) {
    for (rt, obj) in dependents(store, namespace, owner_uid) {
        let api_version = rt.api_version();
        let actor = Actor {
            manager: GC_MANAGER,
            scope: Scope::Main,
            api_version: &api_version,
        };
        let orphaned = store.write(
            rt,
            namespace,
            meta::name(&obj),
            false,
            Box::new(|current| {
                let current = current.ok_or_else(|| ApiError::not_found(rt, meta::name(&obj)))?;
                let mut next = current.clone();
                let metadata = meta::metadata_mut(&mut next);
                if let Some(Value::Array(refs)) = metadata.get_mut("ownerReferences") {
                    refs.retain(|r| r["uid"] != owner_uid);
                    if refs.is_empty() {
                        metadata.remove("ownerReferences");
                    }
                }
                record_update(Some(current), &mut next, &actor);
                Ok(next)
            }),
        );
        if let Err(err) = orphaned {
            tracing::debug!(%err, "orphaning a dependent that just went away");
        }
    }
}

fn delete_namespace_contents(store: &Store, namespace: &str) {
    for rt in RESOURCES.iter().filter(|rt| rt.namespaced) {
        for obj in store.list(rt, Some(namespace)).0 {
            let _gone = store.delete(rt, namespace, meta::name(&obj), &|_| Ok(()));
        }
    }
}
