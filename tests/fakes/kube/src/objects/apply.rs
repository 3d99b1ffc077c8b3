//! Server-side apply as a write: checks the applied configuration, then
//! applies it with field ownership over the stored object, creating the
//! object (with its ownership recorded) when it does not exist yet.

use serde_json::Value;

use super::{
    Target, actor, checked_body, finish_without_tracking, merged_write, new_object,
    require_namespace,
};
use crate::defaults;
use crate::meta;
use crate::patch::apply::server_side_apply;
use crate::status::ApiError;
use crate::store::Store;
use crate::validation::validate;

/// PATCH with `application/apply-patch+yaml`: server-side apply, creating
/// the object when it does not exist.
pub(crate) fn apply(
    store: &Store,
    target: &Target<'_>,
    name: &str,
    config: Value,
    force: bool,
) -> Result<Value, ApiError> {
    if target.manager.is_empty() {
        return Err(ApiError::field_manager_required());
    }
    let config = checked_body(target, config)?;
    if config.get("kind").is_none() || config.get("apiVersion").is_none() {
        return Err(ApiError::bad_request(
            "invalid object type: apiVersion and kind are required for apply",
        ));
    }
    if !meta::name(&config).is_empty() && meta::name(&config) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta::name(&config)
        )));
    }
    if store.get(target.rt, target.namespace, name).is_none() {
        require_namespace(store, target)?;
    }
    let api_version = target.rt.api_version();
    let actor = actor(target, &api_version);
    let (rt, namespace) = (target.rt, target.namespace.to_owned());
    store.write(
        rt,
        target.namespace,
        name,
        target.dry_run,
        Box::new(move |current| {
            let mut next = server_side_apply(current, &config, &actor, force)
                .map_err(|conflicts| ApiError::apply_conflicts(&conflicts, actor.api_version))?;
            match current {
                Some(current) => {
                    let next = merged_write(rt, actor.scope, current, next);
                    finish_without_tracking(rt, current, next)
                }
                None => {
                    let metadata = meta::metadata_mut(&mut next);
                    metadata.insert("name".into(), name.into());
                    if rt.namespaced {
                        metadata.insert("namespace".into(), namespace.into());
                    }
                    // The apply recorded its ownership; a new object keeps it.
                    let managed = meta::metadata_mut(&mut next).remove("managedFields");
                    let mut obj = new_object(rt, next);
                    if let Some(managed) = managed {
                        meta::metadata_mut(&mut obj).insert("managedFields".into(), managed);
                    }
                    defaults::apply(rt, &mut obj);
                    validate(rt, &obj, None)?;
                    Ok(obj)
                }
            }
        }),
    )
}
