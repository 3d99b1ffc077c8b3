//! The web status page: a few static files embedded in the binary and
//! served by the same router as the API, so `vergence serve` and the api
//! Lambda function serve it under the same paths with nothing to build or
//! deploy besides. The page holds no data: it asks for a token and reads
//! and acts through the `/v1` routes like any other client, so it can do
//! exactly what the token's scopes allow.

use axum::Router;
use axum::extract::Path;
use axum::extract::rejection::PathRejection;
use axum::http::{HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::{ApiError, ApiState};

/// Where the page lives; `/` sends people here.
pub const UI_PATH: &str = "/ui/";

const INDEX_HTML: &str = include_str!("../../assets/index.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const STYLE_CSS: &str = include_str!("../../assets/style.css");

/// Only the page's own script, styles and API calls: no inline script, no
/// third-party origin, no framing. Data from the API is put into the page
/// as text, never as markup, and this is the second line behind that.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The page's routes, merged into the API router. They are not API
/// operations, so they are not in `docs/openapi.json` nor in
/// [`super::endpoints`].
pub(super) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/", get(to_page))
        .route("/ui", get(to_page))
        .route(UI_PATH, get(shell))
        // A real path, so a link to one instance (a notification's) opens
        // the page on it.
        .route("/ui/instances/{app}/{rc}/{service}", get(instance_shell))
        .route("/ui/app.js", get(script))
        .route("/ui/style.css", get(style))
}

async fn to_page() -> Redirect {
    Redirect::to(UI_PATH)
}

async fn shell() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// The same shell; the script reads the instance from the path. Names that
/// cannot be an application, service or channel get the API's 404, so a
/// mistyped link says so instead of opening an empty page.
async fn instance_shell(
    method: Method,
    uri: Uri,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let no_route = || ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().to_owned(),
    };
    let Path((app, channel, service)) = path.map_err(|_| no_route())?;
    for name in [&app, &channel, &service] {
        vergence_model::check_name(name).map_err(|_| no_route())?;
    }
    Ok(shell().await)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // The files change with the binary; revalidating costs little.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
