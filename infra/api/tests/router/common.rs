//! The API router over a real in-memory SQLite store and the real control
//! operations, called with `oneshot` as any HTTP server would call it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use jiff::Timestamp;
use serde_json::{Value, json};
use tower::ServiceExt;
use vergence_api::{ApiConfig, ApiState, create_token, router};
use vergence_embedded::{LocalQueue, SqliteStore};
use vergence_engine::control::Control;
use vergence_model::ConfigBundle;
use vergence_model::ports::{Clock, CurrentConfig, InstanceFilter, ManualClock, StateStore};
use vergence_model::{
    AlertState, ApiToken, Approval, Event, EventFilter, InstanceRecord, Release, Scope,
    TokenSubject,
};

pub const START: i64 = 1_800_000_000;

/// A second application, for checks across applications.
pub const BLOG: &str = "\
application:
  name: blog
  releaseChannels:
    - name: live
      runtimes:
        - runtime: blog-files
---
runtime:
  name: blog-files
  apply:
    taskConfig:
      program:
        cmd: [./scripts/publish.sh]
---
service:
  name: site
  runtime: blog-files
";

pub struct Api {
    pub store: Arc<SqliteStore>,
    pub clock: Arc<ManualClock>,
    pub control: Arc<Control>,
    pub router: Router,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.json)
    }
}

impl Reply {
    /// The error body, checking its shape on the way.
    pub fn error(&self) -> &Value {
        let error = &self.json["error"];
        assert!(error["code"].is_string(), "no error code: {self:?}");
        assert!(error["message"].is_string(), "no error message: {self:?}");
        error
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        self.error()["message"].as_str().unwrap_or_default()
    }
}

/// Everything a request could have written; equal before and after a
/// rejected request.
#[derive(Debug, PartialEq)]
pub struct Footprint {
    current_config: Option<CurrentConfig>,
    instances: Vec<InstanceRecord>,
    releases: Vec<Release>,
    approvals: Vec<Approval>,
    alerts: Vec<AlertState>,
    events: Vec<Event>,
    tokens: Vec<ApiToken>,
}

impl Api {
    pub fn new() -> Self {
        Self::with_config(ApiConfig::default())
    }

    pub fn with_config(config: ApiConfig) -> Self {
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let clock = Arc::new(ManualClock::new(Timestamp::from_second(START).unwrap()));
        let dyn_store: Arc<dyn StateStore> = store.clone();
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let queue = Arc::new(LocalQueue::new(dyn_clock.clone()));
        let control = Arc::new(Control::new(
            dyn_store.clone(),
            queue,
            dyn_clock.clone(),
            Arc::new(vergence_compiler::YamlCompiler),
        ));
        let router = router(ApiState::new(control.clone(), dyn_store, dyn_clock, config));
        Self {
            store,
            clock,
            control,
            router,
        }
    }

    /// A stored token for `app` with `scopes`, as the caller would send it.
    pub async fn token(&self, app: &str, scopes: &[Scope]) -> String {
        let (_, token) = create_token(
            self.store.as_ref(),
            &TokenSubject::Application(app.parse().unwrap()),
            scopes,
            Some("test".into()),
            "test",
            self.clock.as_ref(),
        )
        .await
        .unwrap();
        token
    }

    /// Applies the quickstart directly (not through the API under test).
    pub async fn with_quickstart(self) -> Self {
        self.control
            .apply_config(ConfigBundle::from_files(quickstart_files()), "test")
            .await
            .unwrap();
        self
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let json = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{status}: body is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        Reply {
            status,
            headers,
            json,
        }
    }

    /// `method uri` with a bearer token and a JSON body.
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        self.send(request(method, uri, token, body.map(|b| b.to_string())))
            .await
    }

    pub async fn footprint(&self) -> Footprint {
        let store: &dyn StateStore = self.store.as_ref();
        let instances = store
            .list_instances(&InstanceFilter::default())
            .await
            .unwrap();
        let mut releases = Vec::new();
        let mut approvals = Vec::new();
        let mut services = std::collections::BTreeSet::new();
        for record in &instances {
            approvals.extend(store.list_approvals(&record.key).await.unwrap());
            services.insert((record.key.application.clone(), record.key.service.clone()));
        }
        for (app, service) in &services {
            releases.extend(store.list_releases(app, service, 1000).await.unwrap());
        }
        let mut tokens = Vec::new();
        for app in ["shop", "blog"] {
            tokens.extend(
                store
                    .list_tokens(&TokenSubject::Application(app.parse().unwrap()))
                    .await
                    .unwrap(),
            );
        }
        Footprint {
            current_config: store.current_config().await.unwrap(),
            instances,
            releases,
            approvals,
            alerts: store.list_alerts().await.unwrap(),
            events: store.list_events(&EventFilter::default()).await.unwrap(),
            tokens,
        }
    }

    /// Sends a request that must be refused with `status` and `code`, and
    /// checks that nothing at all was written.
    pub async fn refused(&self, request: Request<Body>, status: StatusCode, code: &str) -> Reply {
        let before = self.footprint().await;
        let reply = self.send(request).await;
        assert_eq!(reply.status, status, "{reply:?}");
        assert_eq!(reply.error()["code"], code, "{reply:?}");
        assert_eq!(
            self.footprint().await,
            before,
            "a refused request wrote: {reply:?}"
        );
        reply
    }
}

pub fn request(
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<String>,
) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if body.is_some() {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    builder
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
        .unwrap()
}

/// The quickstart's YAML files, keyed by relative path, with release
/// parameters on web (`commit`, `workers`) for CI to set.
pub fn quickstart_files() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart");
    let mut files = vergence_compiler::read_dir(&dir).unwrap().files;
    let services = files.get_mut("services.yaml").unwrap();
    let web = "  name: web\n  runtime: files-structured\n";
    assert!(services.contains(web));
    *services = services.replace(
        web,
        &format!(
            "{web}  parameters:\n    - name: commit\n      string: {{defaultValue: none}}\n    - name: workers\n      int: {{defaultValue: 1}}\n"
        ),
    );
    files
}

/// The quickstart and blog in one config; services name their application.
pub fn two_applications() -> BTreeMap<String, String> {
    let mut files = quickstart_files();
    let services = files.get_mut("services.yaml").unwrap();
    *services = services.replace(
        "service:\n  name: ",
        "service:\n  application: shop\n  name: ",
    );
    files.insert(
        "blog.yaml".into(),
        BLOG.replace(
            "service:\n  name: ",
            "service:\n  application: blog\n  name: ",
        ),
    );
    files
}

pub fn quickstart_push() -> Value {
    json!({ "files": quickstart_files() })
}

pub const RELEASES: &str = "/v1/applications/shop/services/web/releases";
pub const APPROVALS: &str = "/v1/applications/shop/services/web/release-channels/prod/approvals";
