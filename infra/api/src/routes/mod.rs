//! The route table and what every handler shares: reading the body within
//! the limit, parsing JSON with the failing field named, parsing names.
//!
//! Each handler checks in the same order — credentials, path, permission,
//! body, signature, content — and calls the control operation only when
//! everything passed, so a rejected request writes nothing.

mod agents;
mod alerts;
mod applications;
mod configs;
mod delivery;
mod instances;
mod reads;
mod tokens;
mod ui;

use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, MatchedPath, Request};
use axum::handler::Handler;
use axum::http::{Method, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{MethodFilter, MethodRouter, on};
use serde::de::DeserializeOwned;
use tracing::info;

use crate::{ApiError, ApiState};

pub use ui::{CONTENT_SECURITY_POLICY, UI_PATH};

/// The HTTP methods the API uses.
#[derive(Clone, Copy, Debug)]
enum Verb {
    Get,
    Post,
    Put,
    Delete,
}

impl Verb {
    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Put => MethodFilter::PUT,
            Verb::Delete => MethodFilter::DELETE,
        }
    }

    fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Delete => Method::DELETE,
        }
    }
}

struct Route {
    verb: Verb,
    path: &'static str,
    handler: MethodRouter<ApiState>,
}

impl Route {
    fn new<H, T>(verb: Verb, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, ApiState>,
        T: 'static,
    {
        Self {
            verb,
            path,
            handler: on(verb.filter(), handler),
        }
    }
}

/// Every route, in one table: the router is built from it and
/// [`endpoints`] lists it, so the OpenAPI test sees exactly what is served.
fn routes() -> Vec<Route> {
    use Verb::{Delete, Get, Post, Put};
    vec![
        Route::new(Get, "/v1/healthz", reads::healthz),
        Route::new(Get, "/v1/whoami", instances::whoami),
        Route::new(Post, "/v1/configs", configs::push),
        Route::new(Post, "/v1/configs/plan", configs::plan),
        Route::new(Get, "/v1/applications/{app}/configs", configs::versions),
        Route::new(
            Post,
            "/v1/applications/{app}/configs/rollback",
            configs::rollback,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/releases",
            delivery::push_release,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/approvals",
            delivery::approve,
        ),
        Route::new(
            Get,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}",
            instances::detail,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/pause",
            instances::pause,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/resume",
            instances::resume,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/rollback",
            instances::rollback,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/pin",
            instances::pin,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/unpin",
            instances::unpin,
        ),
        Route::new(
            Post,
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/override",
            instances::override_windows,
        ),
        Route::new(Post, "/v1/applications/{app}/pause", applications::pause),
        Route::new(Post, "/v1/applications/{app}/resume", applications::resume),
        Route::new(Post, "/v1/applications/{app}/checks", applications::checks),
        Route::new(Get, "/v1/alerts", instances::alerts),
        Route::new(Put, "/v1/alerts/{name}", alerts::set),
        Route::new(Post, "/v1/alerts/alertmanager", alerts::alertmanager),
        Route::new(Get, "/v1/applications/{app}/status", reads::status),
        Route::new(Get, "/v1/applications/{app}/events", reads::events),
        Route::new(Get, "/v1/applications/{app}/metrics", reads::metrics),
        Route::new(Get, "/v1/applications/{app}/rollout", reads::rollout),
        Route::new(Get, "/v1/applications/{app}/tokens", tokens::list),
        Route::new(Post, "/v1/applications/{app}/tokens", tokens::create),
        Route::new(Delete, "/v1/applications/{app}/tokens/{id}", tokens::revoke),
        Route::new(Get, "/v1/agents", reads::agents),
        Route::new(Post, "/v1/agents/{agent}/poll", agents::poll),
        Route::new(Post, "/v1/agents/{agent}/reports", agents::report),
    ]
}

/// The (method, path template) of every route the router serves.
pub fn endpoints() -> Vec<(Method, &'static str)> {
    routes()
        .into_iter()
        .map(|r| (r.verb.method(), r.path))
        .collect()
}

/// The API, and the status page (`/ui/`) over it. A plain tower service:
/// `vergence serve` runs it on a socket, the Lambda function hands it API
/// Gateway requests, tests call it with `oneshot`.
pub fn router(state: ApiState) -> Router {
    let limit = state.config.max_body_bytes;
    let mut router = Router::new();
    for route in routes() {
        router = router.route(route.path, route.handler);
    }
    router
        .merge(ui::routes())
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(log_request))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

/// One log line per request, with the route template rather than the
/// path so logs group by endpoint.
async fn log_request(route: Option<MatchedPath>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let started = Instant::now();
    let response = next.run(request).await;
    info!(
        %method,
        route = route.as_ref().map_or("unmatched", MatchedPath::as_str),
        status = response.status().as_u16(),
        millis = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

/// The whole body, or 413 when it is over the configured limit.
async fn read_body(state: &ApiState, request: Request) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::BodyTooLarge {
                    limit: state.config.max_body_bytes,
                }
            } else {
                ApiError::invalid("body", rejection.body_text())
            }
        })
}

/// Parses a JSON body; the error names the field at fault.
fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        // "." is the whole document, "?" a syntax error before any field.
        let path = e.path().to_string();
        let field = match path.as_str() {
            "." | "?" => "body".to_owned(),
            _ => path,
        };
        ApiError::invalid(field, e.into_inner().to_string())
    })?;
    deserializer
        .end()
        .map_err(|e| ApiError::invalid("body", e.to_string()))?;
    Ok(value)
}

/// A JSON body that may be left out: an empty (or blank) body is
/// `T::default()`, so `curl -X POST` without one takes the defaults.
async fn read_optional_json<T: DeserializeOwned + Default>(
    state: &ApiState,
    request: Request,
) -> Result<T, ApiError> {
    let body = read_body(state, request).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_json(&body)
    }
}

/// The instance a `/v1/applications/{app}/services/{service}/release-channels/{rc}…`
/// path names.
fn instance_key(
    path: Result<
        axum::extract::Path<(String, String, String)>,
        axum::extract::rejection::PathRejection,
    >,
) -> Result<vergence_model::InstanceKey, ApiError> {
    let axum::extract::Path((app, service, channel)) = path.map_err(path_error)?;
    Ok(vergence_model::InstanceKey::new(
        parse_name("application", &app)?,
        parse_name("service", &service)?,
        parse_name("releaseChannel", &channel)?,
    ))
}

/// Parses a name from the path or query, naming the input when invalid.
fn parse_name<T: std::str::FromStr<Err = String>>(field: &str, raw: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|e| ApiError::invalid(field, e))
}

/// Path parameters that cannot be decoded (bad percent-encoding).
fn path_error(rejection: axum::extract::rejection::PathRejection) -> ApiError {
    ApiError::invalid("path", rejection.body_text())
}

/// A query string that cannot be decoded.
fn query_error(rejection: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::invalid("query", rejection.body_text())
}
