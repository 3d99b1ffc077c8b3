//! A Lambda runtime API on 127.0.0.1 in front of one function process: the
//! interface AWS Lambda gives a custom runtime (`provided.al2023`), so the
//! real `worker`, `scheduler` and `api` binaries run here as they run in
//! Lambda — the process starts, asks `GET …/invocation/next` for an event,
//! answers `POST …/invocation/{id}/response` (or `/error`), asks again.
//!
//! One process is one execution environment: it takes one event at a time,
//! in the order they were invoked, as Lambda's does; a function given a
//! concurrency of N runs N of them against the same runtime API, as Lambda
//! scales out. An invocation that outlasts the function's timeout is
//! answered with Lambda's timeout error.
//! What the process prints is kept (Lambda sends it to CloudWatch Logs).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, oneshot};

/// The account and region the emulated functions run in.
pub const ACCOUNT: &str = "123456789012";
pub const REGION: &str = "us-east-1";

/// How a function is started: its binary, name, timeout and environment
/// (the template's variables and the role's credentials; the runtime API's
/// own variables are added here).
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    pub name: String,
    pub binary: std::path::PathBuf,
    pub timeout: Duration,
    pub memory_mb: u32,
    pub env: Vec<(String, String)>,
    /// Execution environments (processes) taking events at once.
    pub concurrency: usize,
}

impl FunctionSpec {
    pub fn new(name: &str, binary: &Path) -> Self {
        Self {
            name: name.to_owned(),
            binary: binary.to_owned(),
            timeout: Duration::from_secs(30),
            memory_mb: 256,
            env: Vec::new(),
            concurrency: 1,
        }
    }

    pub fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_owned(), value.into()));
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn concurrency(mut self, environments: usize) -> Self {
        self.concurrency = environments.max(1);
        self
    }
}

/// What an invocation ended with.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The function's response body.
    Response(Vec<u8>),
    /// The function reported an error (`…/error`), or Lambda's own: the
    /// function timed out, its process exited, its init failed.
    Error(Value),
}

impl Outcome {
    /// The response as JSON; panics (a test failure) on an error.
    pub fn json(&self) -> Value {
        match self {
            Outcome::Response(body) => serde_json::from_slice(body).unwrap_or_else(|e| {
                panic!("a JSON response: {e}: {}", String::from_utf8_lossy(body))
            }),
            Outcome::Error(error) => panic!("the invocation failed: {error}"),
        }
    }
}

struct Pending {
    id: String,
    event: Vec<u8>,
    deadline_ms: u128,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Pending>>,
    queued: Notify,
    answers: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    init_error: Mutex<Option<Value>>,
    logs: Mutex<Vec<String>>,
    arn: String,
}

impl Shared {
    fn answer(&self, id: &str, outcome: Outcome) -> bool {
        let sender = self.answers.lock().unwrap().remove(id);
        sender.is_some_and(|tx| tx.send(outcome).is_ok())
    }
}

/// A function's processes behind its runtime API; all stop when dropped.
pub struct LambdaFunction {
    pub name: String,
    timeout: Duration,
    shared: Arc<Shared>,
    processes: Vec<tokio::process::Child>,
    server: tokio::task::JoinHandle<()>,
    next_id: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for LambdaFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LambdaFunction")
            .field("name", &self.name)
            .finish()
    }
}

impl LambdaFunction {
    /// Serves a runtime API on a free port and starts the function's
    /// process against it.
    pub async fn start(spec: FunctionSpec) -> Self {
        let shared = Arc::new(Shared {
            arn: format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{}", spec.name),
            ..Shared::default()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address: SocketAddr = listener.local_addr().unwrap();
        let routes = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, routes).await;
        });
        let processes = (0..spec.concurrency)
            .map(|_| spawn(&spec, address, &shared))
            .collect();
        Self {
            name: spec.name,
            timeout: spec.timeout,
            shared,
            processes,
            server,
            next_id: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Invokes the function with `event` and waits for its outcome, as a
    /// synchronous (`RequestResponse`) invocation does.
    pub async fn invoke(&self, event: &Value) -> Outcome {
        let number = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{:08x}-0000-4000-8000-{number:012x}", fastrand::u32(..));
        let (tx, rx) = oneshot::channel();
        self.shared.answers.lock().unwrap().insert(id.clone(), tx);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        self.shared.queue.lock().unwrap().push_back(Pending {
            id: id.clone(),
            event: serde_json::to_vec(event).unwrap(),
            deadline_ms: now_ms + self.timeout.as_millis(),
        });
        self.shared.queued.notify_one();
        // Lambda's timeout counts from when the environment takes the
        // event; a queued event may wait for the one before it.
        match tokio::time::timeout(self.timeout * 2 + Duration::from_secs(5), rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Outcome::Error(serde_json::json!({"errorType": "Runtime.Dropped"})),
            Err(_) => {
                self.shared.answers.lock().unwrap().remove(&id);
                let init = self.shared.init_error.lock().unwrap().clone();
                Outcome::Error(init.unwrap_or_else(|| {
                    serde_json::json!({
                        "errorType": "Sandbox.Timedout",
                        "errorMessage": format!("Task timed out after {:.2} seconds", self.timeout.as_secs_f64()),
                    })
                }))
            }
        }
    }

    /// What the process printed so far, line by line.
    pub fn logs(&self) -> Vec<String> {
        self.shared.logs.lock().unwrap().clone()
    }

    /// Whether every process is still running.
    pub fn is_running(&mut self) -> bool {
        self.processes
            .iter_mut()
            .all(|p| matches!(p.try_wait(), Ok(None)))
    }
}

impl Drop for LambdaFunction {
    fn drop(&mut self) {
        self.server.abort();
        for process in &mut self.processes {
            let _ = process.start_kill();
        }
    }
}

/// One execution environment: the function's process against the
/// runtime API at `address`, its output kept in `shared`.
fn spawn(spec: &FunctionSpec, address: SocketAddr, shared: &Arc<Shared>) -> tokio::process::Child {
    let mut command = tokio::process::Command::new(&spec.binary);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir())
        .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", &spec.name)
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env(
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            spec.memory_mb.to_string(),
        )
        .env(
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{}", spec.name),
        )
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/27/[$LATEST]local")
        .env("AWS_REGION", REGION)
        .env("AWS_DEFAULT_REGION", REGION)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut process = command
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", spec.binary.display()));
    let streams: [Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>; 2] = [
        process.stdout.take().map(|s| Box::new(s) as _),
        process.stderr.take().map(|s| Box::new(s) as _),
    ];
    for stream in streams.into_iter().flatten() {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                shared.logs.lock().unwrap().push(line);
            }
        });
    }
    process
}

/// `GET …/invocation/next`: the next event, when there is one.
async fn next(State(shared): State<Arc<Shared>>) -> Response {
    loop {
        let pending = shared.queue.lock().unwrap().pop_front();
        if let Some(pending) = pending {
            let mut headers = HeaderMap::new();
            let header = |v: &str| HeaderValue::from_str(v).unwrap();
            headers.insert("lambda-runtime-aws-request-id", header(&pending.id));
            headers.insert(
                "lambda-runtime-deadline-ms",
                header(&pending.deadline_ms.to_string()),
            );
            headers.insert("lambda-runtime-invoked-function-arn", header(&shared.arn));
            headers.insert(
                "lambda-runtime-trace-id",
                header(&format!(
                    "Root=1-00000000-{:024x};Sampled=0",
                    fastrand::u128(..1 << 96)
                )),
            );
            headers.insert("content-type", header("application/json"));
            return (StatusCode::OK, headers, pending.event).into_response();
        }
        shared.queued.notified().await;
    }
}

/// `POST …/invocation/{id}/response`.
async fn response(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> StatusCode {
    if shared.answer(&id, Outcome::Response(body.to_vec())) {
        StatusCode::ACCEPTED
    } else {
        StatusCode::BAD_REQUEST
    }
}

/// `POST …/invocation/{id}/error`.
async fn error(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> StatusCode {
    let error = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    if shared.answer(&id, Outcome::Error(error)) {
        StatusCode::ACCEPTED
    } else {
        StatusCode::BAD_REQUEST
    }
}

/// `POST …/init/error`: the process could not start; every invocation
/// waiting gets this error.
async fn init_error(State(shared): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    let error: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    *shared.init_error.lock().unwrap() = Some(error.clone());
    let waiting: Vec<String> = shared.answers.lock().unwrap().keys().cloned().collect();
    for id in waiting {
        shared.answer(&id, Outcome::Error(error.clone()));
    }
    StatusCode::ACCEPTED
}
