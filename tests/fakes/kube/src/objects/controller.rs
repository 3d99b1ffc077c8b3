//! Writes made by the in-process controllers: status updates computed from
//! the stored object, and objects they create (a Job's pods).

use serde_json::{Map, Value};

use super::{Target, create};
use crate::meta;
use crate::patch::fieldset::Scope;
use crate::patch::managed::{Actor, record_update};
use crate::resources::{ResourceType, by_kind};
use crate::status::ApiError;
use crate::store::Store;

/// Changes an object's status in place, as a controller does.
pub(crate) fn update_status(
    store: &Store,
    rt: &'static ResourceType,
    namespace: &str,
    name: &str,
    manager: &str,
    change: impl FnOnce(&mut Map<String, Value>),
) -> Result<Value, ApiError> {
    update_status_with(store, rt, namespace, name, manager, |_, status| {
        change(status)
    })
}

/// Like [`update_status`], with the current object at hand to compute
/// the status from.
pub(crate) fn update_status_with(
    store: &Store,
    rt: &'static ResourceType,
    namespace: &str,
    name: &str,
    manager: &str,
    change: impl FnOnce(&Value, &mut Map<String, Value>),
) -> Result<Value, ApiError> {
    let api_version = rt.api_version();
    let actor = Actor {
        manager,
        scope: Scope::Status,
        api_version: &api_version,
    };
    store.write(
        rt,
        namespace,
        name,
        false,
        Box::new(move |current| {
            let current = current.ok_or_else(|| ApiError::not_found(rt, name))?;
            let mut next = current.clone();
            change(current, meta::object_at(&mut next, &["status"]));
            record_update(Some(current), &mut next, &actor);
            Ok(next)
        }),
    )
}

/// Creates an object on behalf of a controller (same path as a POST).
pub(crate) fn create_as(
    store: &Store,
    kind: &str,
    namespace: &str,
    manager: &str,
    obj: Value,
) -> Result<Value, ApiError> {
    let rt = by_kind(kind).ok_or_else(|| ApiError::bad_request(format!("unknown kind {kind}")))?;
    let target = Target {
        rt,
        namespace,
        manager,
        scope: Scope::Main,
        dry_run: false,
    };
    create(store, &target, obj)
}
