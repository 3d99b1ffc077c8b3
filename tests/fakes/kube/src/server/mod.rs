//! The HTTP side of the fake: one axum router whose fallback routes the
//! Kubernetes URL space, behind a layer that records every request and
//! checks the bearer token when one is required.

mod discovery;
mod handlers;
mod list;
mod logs;
mod params;
pub(crate) mod path;
mod watch;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};

use crate::requests::RecordedRequest;
use crate::shared::Shared;
use crate::status::ApiError;
use handlers::ResourceRequest;
use params::Params;
use path::Route;

/// The router of one fake cluster.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(
            shared.clone(),
            record_and_authenticate,
        ))
        .with_state(shared)
}

async fn record_and_authenticate(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let query = request.uri().query().unwrap_or_default().to_owned();
    let recorded = RecordedRequest {
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
        watch: query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1"),
        query,
        content_type: request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    shared.requests.record(recorded);
    if let Some(token) = &shared.settings.required_token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token.as_str()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    route(&shared, &method, &uri, &headers, body).unwrap_or_else(IntoResponse::into_response)
}

fn route(
    shared: &Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let route = path::parse(uri.path())?;
    if let Route::Resource(rp) = route {
        let params = Params::from_uri(uri)?;
        return handlers::handle(
            shared,
            ResourceRequest {
                method,
                rp,
                params,
                headers,
                body,
            },
        );
    }
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(method.as_str(), uri.path()));
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let aggregated = discovery::wants_aggregated(accept);
    let document = match route {
        Route::Version => discovery::version(),
        Route::CoreVersions if aggregated => return Ok(aggregated_response(true)),
        Route::Groups if aggregated => return Ok(aggregated_response(false)),
        Route::CoreVersions => {
            let host = headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("127.0.0.1");
            discovery::core_versions(host)
        }
        Route::CoreResources => discovery::resource_list("", "v1"),
        Route::Groups => discovery::groups(),
        Route::Group(group) => discovery::group(&group),
        Route::GroupResources(group, version) => discovery::resource_list(&group, &version),
        Route::Resource(_) => return Err(ApiError::path_not_found(uri.path())),
    };
    Ok(Json(document).into_response())
}

fn aggregated_response(core: bool) -> Response {
    (
        [(header::CONTENT_TYPE, discovery::AGGREGATED_CONTENT_TYPE)],
        discovery::aggregated(core).to_string(),
    )
        .into_response()
}
