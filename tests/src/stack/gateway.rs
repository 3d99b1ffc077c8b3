//! The two fronts of the api function, as the template configures them:
//! API Gateway's HTTP API (its routes, `ANY /{proxy+}` and `GET /`, and
//! the integration's 30-second limit), where the CLI and CI reach the
//! deployment; and the function's own URL (every path, the function's
//! timeout), where vergence-agent polls. Both hand requests to the
//! function as payload format 2.0 events and turn its answer back into
//! an HTTP response.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Map, Value, json};

use super::super::lambda::{LambdaFunction, Outcome};

/// API Gateway's payload limit for HTTP APIs.
const MAX_BODY: usize = 10 * 1024 * 1024;
/// A function URL's request payload limit.
const MAX_URL_BODY: usize = 6 * 1024 * 1024;
/// How long API Gateway waits for an integration.
const INTEGRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The routes of the template's HTTP API, as `(method or ANY, path)`.
#[derive(Debug, Clone)]
pub struct Route {
    pub method: String,
    pub path: String,
}

impl Route {
    fn key(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// The route's path parameters for `path`, if it matches.
    fn matches(&self, method: &str, path: &str) -> Option<Map<String, Value>> {
        if self.method != "ANY" && !self.method.eq_ignore_ascii_case(method) {
            return None;
        }
        if let Some(prefix) = self.path.strip_suffix("/{proxy+}") {
            let rest = path.strip_prefix(prefix)?.strip_prefix('/')?;
            if rest.is_empty() {
                return None;
            }
            let mut parameters = Map::new();
            parameters.insert("proxy".to_owned(), Value::String(rest.to_owned()));
            return Some(parameters);
        }
        (self.path == path).then(Map::new)
    }
}

/// Which front a request came through: what its event says and what
/// limits apply.
enum Front {
    HttpApi {
        routes: Vec<Route>,
        account: String,
    },
    /// The function URL, with the function's timeout.
    FunctionUrl {
        timeout: Duration,
    },
}

struct Shared {
    api: Arc<LambdaFunction>,
    front: Front,
    /// The HTTP API's id, or the function URL's host prefix.
    id: String,
}

/// A front on 127.0.0.1; stops when dropped.
#[derive(Debug)]
pub struct Gateway {
    pub url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// The HTTP API with the template's `routes`.
    pub async fn start(api: Arc<LambdaFunction>, routes: Vec<Route>, account: &str) -> Self {
        let front = Front::HttpApi {
            routes,
            account: account.to_owned(),
        };
        Self::serve(api, front, "vergence0", "").await
    }

    /// The function URL of the template's `AWS::Lambda::Url`, whose
    /// address (`https://<id>.lambda-url.<region>.on.aws/`) names the id
    /// its events carry. Its URL ends with a slash, as AWS's does.
    pub async fn function_url(
        api: Arc<LambdaFunction>,
        deployed_url: &str,
        timeout: Duration,
    ) -> Self {
        let id = deployed_url
            .trim_start_matches("https://")
            .split('.')
            .next()
            .unwrap_or_default()
            .to_owned();
        Self::serve(api, Front::FunctionUrl { timeout }, &id, "/").await
    }

    async fn serve(api: Arc<LambdaFunction>, front: Front, id: &str, suffix: &str) -> Self {
        let shared = Arc::new(Shared {
            api,
            front,
            id: id.to_owned(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{suffix}", listener.local_addr().unwrap());
        let app = Router::new().fallback(forward).with_state(shared);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, server }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn message(status: StatusCode, text: &str) -> Response {
    (status, axum::Json(json!({ "message": text }))).into_response()
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let method = parts.method.as_str().to_owned();
    let (route_key, path_parameters, max_body, timeout) = match &shared.front {
        Front::HttpApi { routes, .. } => {
            let Some((route, parameters)) = routes
                .iter()
                .find_map(|r| r.matches(&method, &path).map(|p| (r, p)))
            else {
                return message(StatusCode::NOT_FOUND, "Not Found");
            };
            (route.key(), parameters, MAX_BODY, INTEGRATION_TIMEOUT)
        }
        Front::FunctionUrl { timeout } => {
            ("$default".to_owned(), Map::new(), MAX_URL_BODY, *timeout)
        }
    };
    let Ok(body) = to_bytes(body, max_body).await else {
        return message(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large");
    };
    let mut headers = Map::new();
    let mut cookies = Vec::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if name == "cookie" {
            cookies.extend(value.split("; ").map(|c| Value::String(c.to_owned())));
            continue;
        }
        // Repeated headers are joined with commas in payload format 2.0.
        match headers.get_mut(name.as_str()) {
            Some(Value::String(joined)) => {
                joined.push(',');
                joined.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    let raw_query = parts.uri.query().unwrap_or_default().to_owned();
    let mut query = Map::new();
    for (name, value) in url_pairs(&raw_query) {
        match query.get_mut(&name) {
            Some(Value::String(joined)) => {
                joined.push(',');
                joined.push_str(&value);
            }
            _ => {
                query.insert(name, Value::String(value));
            }
        }
    }
    let (text, encoded) = match std::str::from_utf8(&body) {
        Ok(text) => (text.to_owned(), false),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(&body),
            true,
        ),
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let user_agent = headers
        .get("user-agent")
        .cloned()
        .unwrap_or(Value::String(String::new()));
    // A function URL's caller is anonymous: there is no account in front.
    let (account, domain) = match &shared.front {
        Front::HttpApi { account, .. } => (
            account.as_str(),
            format!("{}.execute-api.us-east-1.amazonaws.com", shared.id),
        ),
        Front::FunctionUrl { .. } => (
            "anonymous",
            format!("{}.lambda-url.us-east-1.on.aws", shared.id),
        ),
    };
    let mut event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": raw_query,
        "headers": headers,
        "requestContext": {
            "accountId": account,
            "apiId": shared.id,
            "domainName": domain,
            "domainPrefix": shared.id,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": user_agent,
            },
            "requestId": format!("{:016x}", fastrand::u64(..)),
            "routeKey": route_key,
            "stage": "$default",
            "time": "27/Nov/2026:12:00:00 +0000",
            "timeEpoch": now.as_millis() as u64,
        },
        "isBase64Encoded": encoded,
    });
    if !text.is_empty() {
        event["body"] = Value::String(text);
    }
    if !query.is_empty() {
        event["queryStringParameters"] = Value::Object(query);
    }
    if !path_parameters.is_empty() {
        event["pathParameters"] = Value::Object(path_parameters);
    }
    if !cookies.is_empty() {
        event["cookies"] = Value::Array(cookies);
    }
    let outcome = tokio::time::timeout(timeout, shared.api.invoke(&event)).await;
    match outcome {
        Ok(Outcome::Response(body)) => respond(&body),
        Ok(Outcome::Error(_)) => {
            message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
        }
        Err(_) => message(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable"),
    }
}

/// The function's payload 2.0 answer as an HTTP response.
fn respond(body: &[u8]) -> Response {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    };
    let status = answer["statusCode"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(u16::try_from(s).ok()?).ok())
        .unwrap_or(StatusCode::OK);
    let text = answer["body"].as_str().unwrap_or_default();
    let bytes = if answer["isBase64Encoded"].as_bool() == Some(true) {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default()
    } else {
        text.as_bytes().to_vec()
    };
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    if let Some(headers) = answer["headers"].as_object() {
        for (name, value) in headers {
            if let (Ok(name), Some(Ok(value))) = (
                HeaderName::try_from(name.as_str()),
                value.as_str().map(HeaderValue::from_str),
            ) {
                response.headers_mut().append(name, value);
            }
        }
    }
    if let Some(cookies) = answer["cookies"].as_array() {
        for cookie in cookies.iter().filter_map(Value::as_str) {
            if let Ok(value) = HeaderValue::from_str(cookie) {
                response.headers_mut().append("set-cookie", value);
            }
        }
    }
    response
}

/// `a=1&b=x%20y` as decoded pairs.
fn url_pairs(query: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://gateway/?{query}"))
        .map(|url| {
            url.query_pairs()
                .map(|(name, value)| (name.into_owned(), value.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}
