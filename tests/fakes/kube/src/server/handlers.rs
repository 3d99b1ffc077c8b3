//! The verbs on resource paths: get, list, watch, create, replace, patch
//! (all four patch types), delete and deletecollection, mapped from method
//! and path as the real server maps them, answering with its status codes.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::list::{Filter, list};
use super::logs::logs;
use super::params::Params;
use super::path::ResourcePath;
use super::watch::watch;
use crate::gc::{self, DeleteOptions, Propagation};
use crate::meta;
use crate::objects::{self, Target};
use crate::patch::fieldset::Scope;
use crate::patch::{PatchKind, parse_body};
use crate::shared::Shared;
use crate::status::ApiError;

/// The manager of non-apply writes that name none: the real server derives
/// it from the User-Agent, which `kube` does not send.
const UNNAMED_MANAGER: &str = "unknown";

/// One request on a resource path.
pub(crate) struct ResourceRequest<'a> {
    pub method: &'a Method,
    pub rp: ResourcePath,
    pub params: Params,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
}

pub(crate) fn handle(shared: &Arc<Shared>, req: ResourceRequest<'_>) -> Result<Response, ApiError> {
    let rp = &req.rp;
    match (req.method, rp.name.as_deref(), rp.subresource.as_deref()) {
        (&Method::GET, None, _) if req.params.flag("watch") => watch(shared, rp, &req.params),
        (&Method::GET, None, _) => Ok(Json(list(&shared.store, rp, &req.params)?).into_response()),
        (&Method::POST, None, _) => create(shared, &req),
        (&Method::DELETE, None, _) => delete_collection(shared, &req),
        (&Method::GET, Some(_), Some("log")) => logs(shared, rp, &req.params),
        (&Method::GET, Some(name), _) => get(shared, rp, name),
        (&Method::PUT, Some(name), _) => replace(shared, &req, name),
        (&Method::PATCH, Some(name), _) => patch(shared, &req, name),
        (&Method::DELETE, Some(name), None) => delete(shared, &req, name),
        _ => Err(ApiError::method_not_allowed(
            req.method.as_str(),
            &format!("{rp:?}"),
        )),
    }
}

fn namespace(rp: &ResourcePath) -> Result<&str, ApiError> {
    match (&rp.namespace, rp.rt.namespaced) {
        (Some(ns), true) => Ok(ns),
        (None, false) => Ok(""),
        _ => Err(ApiError::bad_request(
            "a namespace is required for this resource",
        )),
    }
}

fn scope(rp: &ResourcePath) -> Scope {
    if rp.subresource.as_deref() == Some("status") {
        Scope::Status
    } else {
        Scope::Main
    }
}

fn target<'a>(req: &'a ResourceRequest<'_>) -> Result<Target<'a>, ApiError> {
    Ok(Target {
        rt: req.rp.rt,
        namespace: namespace(&req.rp)?,
        manager: req
            .params
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .unwrap_or(UNNAMED_MANAGER),
        scope: scope(&req.rp),
        dry_run: req.params.dry_run()?,
    })
}

fn json_body(req: &ResourceRequest<'_>) -> Result<Value, ApiError> {
    let content_type = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if !content_type.starts_with("application/json") {
        return Err(ApiError::unsupported_media_type(content_type));
    }
    serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding the request body: {e}")))
}

fn get(shared: &Arc<Shared>, rp: &ResourcePath, name: &str) -> Result<Response, ApiError> {
    let obj = shared
        .store
        .get(rp.rt, namespace(rp)?, name)
        .ok_or_else(|| ApiError::not_found(rp.rt, name))?;
    Ok(Json(obj).into_response())
}

fn create(shared: &Arc<Shared>, req: &ResourceRequest<'_>) -> Result<Response, ApiError> {
    let created = objects::create(&shared.store, &target(req)?, json_body(req)?)?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

fn replace(
    shared: &Arc<Shared>,
    req: &ResourceRequest<'_>,
    name: &str,
) -> Result<Response, ApiError> {
    let replaced = objects::replace(&shared.store, &target(req)?, name, json_body(req)?)?;
    Ok(Json(replaced).into_response())
}

fn patch(
    shared: &Arc<Shared>,
    req: &ResourceRequest<'_>,
    name: &str,
) -> Result<Response, ApiError> {
    let content_type = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let kind = PatchKind::from_content_type(content_type)?;
    let document = parse_body(kind, &req.body)?;
    let target = target(req)?;
    if kind != PatchKind::Apply {
        let patched = objects::patch(&shared.store, &target, name, kind, document)?;
        return Ok(Json(patched).into_response());
    }
    let existed = shared
        .store
        .get(target.rt, target.namespace, name)
        .is_some();
    let manager = req.params.get("fieldManager").unwrap_or_default();
    let target = Target { manager, ..target };
    let applied = objects::apply(
        &shared.store,
        &target,
        name,
        document,
        req.params.flag("force"),
    )?;
    let code = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((code, Json(applied)).into_response())
}

/// Options from the query and the DeleteOptions body (body wins).
fn delete_options(req: &ResourceRequest<'_>) -> Result<DeleteOptions, ApiError> {
    let body: Value = if req.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let policy = body["propagationPolicy"]
        .as_str()
        .or_else(|| req.params.get("propagationPolicy"));
    let dry_run = req.params.dry_run()?
        || body["dryRun"]
            .as_array()
            .is_some_and(|d| d.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        propagation: policy.map(Propagation::parse).transpose()?,
        uid: body["preconditions"]["uid"].as_str().map(str::to_owned),
        resource_version: body["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
        dry_run,
    })
}

fn delete(
    shared: &Arc<Shared>,
    req: &ResourceRequest<'_>,
    name: &str,
) -> Result<Response, ApiError> {
    let options = delete_options(req)?;
    let answer = gc::delete(
        &shared.store,
        req.rp.rt,
        namespace(&req.rp)?,
        name,
        &options,
    )?;
    // Foreground deletion answers the owner as marked for deletion: 202.
    let code = if answer["kind"] != "Status" && options.propagation == Some(Propagation::Foreground)
    {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((code, Json(answer)).into_response())
}

fn delete_collection(
    shared: &Arc<Shared>,
    req: &ResourceRequest<'_>,
) -> Result<Response, ApiError> {
    let rp = &req.rp;
    if rp.rt.kind == "Namespace" {
        return Err(ApiError::method_not_allowed("DELETE", "/api/v1/namespaces"));
    }
    let options = delete_options(req)?;
    let filter = Filter::from_params(rp, &req.params)?;
    let (objects, rv) = shared.store.list(rp.rt, rp.namespace.as_deref());
    let mut deleted = Vec::new();
    for obj in objects.into_iter().filter(|o| filter.matches(o)) {
        let ns = meta::namespace(&obj).to_owned();
        if gc::delete(&shared.store, rp.rt, &ns, meta::name(&obj), &options).is_ok() {
            deleted.push(obj);
        }
    }
    Ok(Json(json!({
        "kind": format!("{}List", rp.rt.kind),
        "apiVersion": rp.rt.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": deleted,
    }))
    .into_response())
}
