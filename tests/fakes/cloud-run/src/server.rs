//! The HTTP side: one axum router that records every request, parses the
//! path the way the REST transcoding lays it out
//! (`/v2/projects/{p}/locations/{l}/{collection}/{id}[:{verb}]`), calls the
//! resource's module under the state lock, and writes the JSON back with
//! enums encoded as the caller asked.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Code};
use crate::jobs::JobWrite;
use crate::requests::RecordedRequest;
use crate::services::ServiceWrite;
use crate::state::Shared;
use crate::wire::{self, EnumEncoding};
use crate::{executions, jobs, operations, revisions, services};

/// The page size of list calls that leave it out.
const DEFAULT_PAGE_SIZE: usize = 100;

/// The fake's router.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(Arc::clone(&shared), record))
        .with_state(shared)
}

/// Keeps a copy of the request for [`crate::FakeCloudRun::requests`].
async fn record(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::invalid("The request body could not be read.").into_response();
    };
    let query = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let body = (!bytes.is_empty()).then(|| {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()))
    });
    shared.lock().requests.push(RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query,
        body,
    });
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// One API call, parsed.
#[derive(Debug)]
struct Call {
    method: Method,
    /// The resource name: the path after `/v2/`, without a `:verb`.
    name: String,
    verb: Option<String>,
    query: Vec<(String, String)>,
    body: Option<Value>,
}

impl Call {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        self.param(name) == Some("true")
    }

    fn segments(&self) -> Vec<&str> {
        self.name.split('/').collect()
    }
}

async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: axum::http::Uri,
    body: Bytes,
) -> Response {
    let query = Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let encoding = EnumEncoding::from_alt(
        query
            .iter()
            .find(|(n, _)| n == "$alt")
            .map(|(_, v)| v.as_str()),
    );
    let result =
        parse_call(method, uri.path(), query, &body).and_then(|call| route(&shared, &call));
    match result {
        Ok(mut value) => {
            wire::encode_enums(&mut value, encoding);
            Json(value).into_response()
        }
        Err(error) => error.into_response(),
    }
}

fn parse_call(
    method: Method,
    path: &str,
    query: Vec<(String, String)>,
    body: &Bytes,
) -> Result<Call, ApiError> {
    let Some(rest) = path.strip_prefix("/v2/") else {
        return Err(unknown_route(&method, path));
    };
    let (name, verb) = match rest.rsplit_once('/') {
        Some((head, last)) => match last.split_once(':') {
            Some((id, verb)) => (format!("{head}/{id}"), Some(verb.to_owned())),
            None => (rest.to_owned(), None),
        },
        None => match rest.split_once(':') {
            Some((id, verb)) => (id.to_owned(), Some(verb.to_owned())),
            None => (rest.to_owned(), None),
        },
    };
    let body = if body.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice(body)
                .map_err(|e| ApiError::invalid(format!("Invalid JSON payload received. {e}")))?,
        )
    };
    Ok(Call {
        method,
        name,
        verb,
        query,
        body,
    })
}

fn route(shared: &Arc<Shared>, call: &Call) -> ApiResult {
    let segments = call.segments();
    if segments == ["entries"]
        && call.verb.as_deref() == Some("list")
        && call.method == Method::POST
    {
        return shared
            .lock()
            .logs
            .list(call.body.as_ref().unwrap_or(&Value::Null));
    }
    let ["projects", _, "locations", _, rest @ ..] = segments.as_slice() else {
        return Err(unknown_route(&call.method, &call.name));
    };
    let parent = segments[..4].join("/");
    match rest.first() {
        Some(&"operations") => route_operations(shared, call, rest, &parent),
        Some(&"services") => route_services(shared, call, rest, &parent),
        Some(&"jobs") => route_jobs(shared, call, rest, &parent),
        _ => Err(unknown_route(&call.method, &call.name)),
    }
}

fn route_operations(shared: &Arc<Shared>, call: &Call, rest: &[&str], parent: &str) -> ApiResult {
    let config = &shared.config;
    let mut state = shared.lock();
    match (&call.method, rest.len(), call.verb.as_deref()) {
        (&Method::GET, 1, None) => {
            page(operations::list(&state, config, parent), call, "operations")
        }
        (&Method::GET, 2, None) | (&Method::POST, 2, Some("wait")) => {
            operations::poll(&mut state, config, &call.name)
        }
        (&Method::DELETE, 2, None) => operations::delete(&mut state, &call.name),
        _ => Err(unknown_route(&call.method, &call.name)),
    }
}

fn route_services(shared: &Arc<Shared>, call: &Call, rest: &[&str], parent: &str) -> ApiResult {
    let config = &shared.config;
    let mut state = shared.lock();
    let write = |name| ServiceWrite {
        name,
        body: call.body.clone(),
        update_mask: call.param("updateMask"),
        validate_only: call.flag("validateOnly"),
    };
    match (&call.method, rest.len(), call.verb.as_deref()) {
        (&Method::GET, 1, None) => page(services::list(&state, parent), call, "services"),
        (&Method::POST, 1, None) => {
            let name = format!(
                "{parent}/services/{}",
                call.param("serviceId").unwrap_or_default()
            );
            services::create(&mut state, config, write(&name))
        }
        (&Method::GET, 2, None) => services::get(&mut state, config, &call.name),
        (&Method::PATCH, 2, None) => services::update(
            &mut state,
            config,
            write(&call.name),
            call.flag("allowMissing"),
        ),
        (&Method::DELETE, 2, None) => services::delete(
            &mut state,
            config,
            &call.name,
            call.param("etag"),
            call.flag("validateOnly"),
        ),
        (&Method::GET, 3, None) if rest[2] == "revisions" => {
            let service = call.name.trim_end_matches("/revisions");
            page(revisions::list(&state, service), call, "revisions")
        }
        (&Method::GET, 4, None) if rest[2] == "revisions" => revisions::get(&state, &call.name),
        (&Method::DELETE, 4, None) if rest[2] == "revisions" => {
            revisions::delete(&mut state, config, &call.name)
        }
        _ => Err(unknown_route(&call.method, &call.name)),
    }
}

fn route_jobs(shared: &Arc<Shared>, call: &Call, rest: &[&str], parent: &str) -> ApiResult {
    let config = &shared.config;
    if call.method == Method::POST && rest.len() == 2 && call.verb.as_deref() == Some("run") {
        return executions::run(shared, &call.name, call.body.clone());
    }
    let mut state = shared.lock();
    let write = |name| JobWrite {
        name,
        body: call.body.clone(),
        validate_only: call.flag("validateOnly"),
    };
    let in_executions = rest.get(2) == Some(&"executions");
    let in_tasks = in_executions && rest.get(4) == Some(&"tasks");
    let collection = |suffix: &str| call.name.trim_end_matches(suffix).to_owned();
    match (&call.method, rest.len(), call.verb.as_deref()) {
        (&Method::GET, 1, None) => page(jobs::list(&state, parent), call, "jobs"),
        (&Method::POST, 1, None) => {
            let name = format!("{parent}/jobs/{}", call.param("jobId").unwrap_or_default());
            jobs::create(&mut state, config, write(&name))
        }
        (&Method::GET, 2, None) => jobs::get(&mut state, config, &call.name),
        (&Method::PATCH, 2, None) => jobs::update(
            &mut state,
            config,
            write(&call.name),
            call.flag("allowMissing"),
        ),
        (&Method::DELETE, 2, None) => jobs::delete(
            &mut state,
            config,
            &call.name,
            call.param("etag"),
            call.flag("validateOnly"),
        ),
        (&Method::GET, 3, None) if in_executions => page(
            executions::list(&state, &collection("/executions")),
            call,
            "executions",
        ),
        (&Method::GET, 4, None) if in_executions => executions::get(&state, &call.name),
        (&Method::POST, 4, Some("cancel")) if in_executions => {
            executions::cancel(&mut state, config, &call.name)
        }
        (&Method::DELETE, 4, None) if in_executions => {
            executions::delete(&mut state, config, &call.name)
        }
        (&Method::GET, 5, None) if in_tasks => page(
            executions::list_tasks(&state, &collection("/tasks"))?,
            call,
            "tasks",
        ),
        (&Method::GET, 6, None) if in_tasks => executions::get_task(&state, &call.name),
        _ => Err(unknown_route(&call.method, &call.name)),
    }
}

/// A page of a list answer, under `key`, with `nextPageToken` when more
/// follow. Tokens are offsets, which is all a caller may not rely on.
fn page(items: Vec<Value>, call: &Call, key: &str) -> ApiResult {
    let size = match call.param("pageSize").and_then(|s| s.parse::<usize>().ok()) {
        None | Some(0) => DEFAULT_PAGE_SIZE,
        Some(n) => n,
    };
    let offset = match call.param("pageToken").unwrap_or_default() {
        "" => 0,
        token => token
            .parse::<usize>()
            .map_err(|_| ApiError::invalid(format!("Invalid page token '{token}'.")))?,
    };
    let page: Vec<Value> = items.iter().skip(offset).take(size).cloned().collect();
    let mut answer = json!({ key: page });
    if offset + size < items.len() {
        answer["nextPageToken"] = Value::from((offset + size).to_string());
    }
    Ok(answer)
}

fn unknown_route(method: &Method, path: &str) -> ApiError {
    ApiError::new(
        Code::NotFound,
        format!("The fake Cloud Run API does not serve {method} {path}."),
    )
}
