//! A seeded fault-injecting HTTP proxy for tests: it sits between the AWS SDK
//! clients and a stand-in (DynamoDB Local, moto) and, for a chosen share of
//! requests, answers a throttling error or a server error in the service's
//! own wire format, delays the request, or forwards it and then drops the
//! connection without answering (the request happened; the client never
//! hears). Which request gets which fault follows from the seed and the
//! request's sequence number, so a run with the same seed and the same order
//! of requests injects the same faults.
//!
//! A poison rule can also fail every request of one operation whose body
//! contains a marker (for a message that must fail on every delivery), or
//! only the first few of them (for one precise fault at one precise call).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What can happen to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The service's throttling error (DynamoDB's
    /// ProvisionedThroughputExceededException, SQS's RequestThrottled, S3's
    /// SlowDown).
    Throttle,
    /// HTTP 500 with the service's internal-error body.
    InternalError,
    /// HTTP 503 with the service's unavailable body.
    Unavailable,
    /// Forwarded after a pause.
    Delay,
    /// Forwarded, answered by the stand-in, then the connection is closed
    /// without a response: the write happened, the client sees an I/O error.
    DropAfterForward,
}

impl Fault {
    /// The mix of faults among faulted requests: throttling most often, as
    /// a busy table or queue throttles, the others evenly.
    const MIX: [(Fault, u32); 5] = [
        (Fault::Throttle, 30),
        (Fault::InternalError, 15),
        (Fault::Unavailable, 15),
        (Fault::Delay, 20),
        (Fault::DropAfterForward, 20),
    ];

    fn pick(roll: u32) -> Fault {
        let mut left = roll;
        for (fault, weight) in Self::MIX {
            if left < weight {
                return fault;
            }
            left -= weight;
        }
        Fault::Throttle
    }

    fn total_weight() -> u32 {
        Self::MIX.iter().map(|(_, w)| w).sum()
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::Throttle => "throttle",
            Fault::InternalError => "500",
            Fault::Unavailable => "503",
            Fault::Delay => "delay",
            Fault::DropAfterForward => "drop-after-forward",
        })
    }
}

/// How a proxy misbehaves.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    pub seed: u64,
    /// Share of requests that get a fault, from 0.0 to 1.0.
    pub rate: f64,
    /// The longest pause of a delayed request (pauses are uniform up to it).
    pub max_delay: Duration,
}

impl FaultPlan {
    pub fn new(seed: u64, rate: f64) -> Self {
        Self {
            seed,
            rate,
            max_delay: Duration::from_millis(300),
        }
    }

    /// The fault (and pause) of request number `n`: a pure function of the
    /// seed and `n`, so a run can be replayed.
    fn decide(&self, n: u64) -> Option<(Fault, Duration)> {
        let mut rng = fastrand::Rng::with_seed(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        if rng.f64() >= self.rate {
            return None;
        }
        let fault = Fault::pick(rng.u32(0..Fault::total_weight()));
        let max = u64::try_from(self.max_delay.as_millis()).unwrap_or(u64::MAX);
        Some((fault, Duration::from_millis(rng.u64(0..=max))))
    }
}

/// A rule failing the requests of `operation` (e.g. `DynamoDB.Query`)
/// whose body contains `marker` with `fault`: every one, or the first
/// `limit`.
#[derive(Clone, Debug)]
pub struct Poison {
    pub operation: String,
    pub marker: String,
    pub fault: Fault,
    pub limit: Option<usize>,
}

/// What a proxy saw and did.
#[derive(Clone, Debug, Default)]
pub struct FaultReport {
    /// Requests by `Service.Operation` (S3 by method).
    pub requests: BTreeMap<String, usize>,
    /// Faults injected by the seeded plan, by kind.
    pub faults: BTreeMap<Fault, usize>,
    /// Requests failed by the poison rule.
    pub poisoned: usize,
}

impl FaultReport {
    pub fn total_requests(&self) -> usize {
        self.requests.values().sum()
    }

    pub fn total_faults(&self) -> usize {
        self.faults.values().sum()
    }

    /// Both proxies' figures together.
    pub fn merge(mut self, other: &FaultReport) -> Self {
        for (op, n) in &other.requests {
            *self.requests.entry(op.clone()).or_default() += n;
        }
        for (fault, n) in &other.faults {
            *self.faults.entry(*fault).or_default() += n;
        }
        self.poisoned += other.poisoned;
        self
    }
}

impl fmt::Display for FaultReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, {} faults injected",
            self.total_requests(),
            self.total_faults()
        )?;
        let kinds: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        write!(f, " ({})", kinds.join(", "))?;
        if self.poisoned > 0 {
            write!(f, ", {} poisoned", self.poisoned)?;
        }
        Ok(())
    }
}

/// How a request is spoken, which decides how its errors are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// DynamoDB's JSON 1.0 (`X-Amz-Target: DynamoDB_20120810.Op`).
    DynamoDb,
    /// SQS's JSON protocol (`X-Amz-Target: AmazonSQS.Op`), query-compatible.
    SqsJson,
    /// SQS's older query protocol (`Action=Op` form bodies).
    SqsQuery,
    /// S3's REST/XML.
    S3,
}

struct Shared {
    plan: FaultPlan,
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    sequence: AtomicU64,
    poison: Mutex<Option<Poison>>,
    report: Mutex<FaultReport>,
}

/// A running proxy in front of one stand-in; stops when dropped.
#[allow(missing_debug_implementations)] // holds a hyper client
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 and forwards to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str, plan: FaultPlan) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let upstream: Uri = upstream
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let shared = Arc::new(Shared {
            plan,
            upstream,
            client: Client::builder(TokioExecutor::new()).build_http(),
            sequence: AtomicU64::new(0),
            poison: Mutex::new(None),
            report: Mutex::new(FaultReport::default()),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Ok(Self { addr, shared, task })
    }

    /// The endpoint to give the SDK clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_poison(&self, poison: Option<Poison>) {
        *lock(&self.shared.poison) = poison;
    }

    pub fn report(&self) -> FaultReport {
        lock(&self.shared.report).clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A poisoned lock only means another request panicked mid-count.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((stream, _)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(shared.clone(), request));
            // A dropped connection ends here with the service's error.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Returned by the service to make hyper close the connection without
/// writing a response.
#[derive(Debug)]
struct Dropped;

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection dropped by fault injection")
    }
}

impl std::error::Error for Dropped {}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Dropped> {
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Err(Dropped);
    };
    let (protocol, operation) = classify(&parts, &body);
    let fault = shared.fault_for(&operation, &body);
    let Some((fault, pause)) = fault else {
        return Ok(shared.forward(parts, body).await);
    };
    match fault {
        Fault::Throttle | Fault::InternalError | Fault::Unavailable => {
            Ok(error_response(protocol, fault))
        }
        Fault::Delay => {
            tokio::time::sleep(pause).await;
            Ok(shared.forward(parts, body).await)
        }
        Fault::DropAfterForward => {
            shared.forward(parts, body).await;
            Err(Dropped)
        }
    }
}

impl Shared {
    /// Counts the request and picks its fault: the poison rule first, then
    /// the seeded plan.
    fn fault_for(&self, operation: &str, body: &[u8]) -> Option<(Fault, Duration)> {
        let n = self.sequence.fetch_add(1, Ordering::SeqCst);
        let poisoned = {
            let mut rule = lock(&self.poison);
            rule.as_mut().and_then(|p| {
                let matches = p.operation == operation
                    && contains(body, p.marker.as_bytes())
                    && p.limit.is_none_or(|n| n > 0);
                if matches {
                    p.limit = p.limit.map(|n| n - 1);
                }
                matches.then_some(p.fault)
            })
        };
        let mut report = lock(&self.report);
        *report.requests.entry(operation.to_owned()).or_default() += 1;
        if let Some(fault) = poisoned {
            report.poisoned += 1;
            return Some((fault, Duration::ZERO));
        }
        let decided = self.plan.decide(n);
        if let Some((fault, _)) = decided {
            *report.faults.entry(fault).or_default() += 1;
        }
        decided
    }

    /// The stand-in's answer, or a 502 when it cannot be reached.
    async fn forward(
        &self,
        parts: hyper::http::request::Parts,
        body: Bytes,
    ) -> Response<Full<Bytes>> {
        let mut builder = Request::builder().method(parts.method);
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let uri = format!(
            "{}://{}{path}",
            self.upstream.scheme_str().unwrap_or("http"),
            self.upstream.authority().map_or("", |a| a.as_str())
        );
        builder = builder.uri(uri);
        for (name, value) in &parts.headers {
            builder = builder.header(name, value);
        }
        let Ok(request) = builder.body(Full::new(body)) else {
            return plain(StatusCode::BAD_GATEWAY, "unforwardable request");
        };
        let response = match self.client.request(request).await {
            Ok(response) => response,
            Err(e) => return plain(StatusCode::BAD_GATEWAY, &e.to_string()),
        };
        let (mut parts, body) = response.into_parts();
        let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
            return plain(StatusCode::BAD_GATEWAY, "truncated upstream response");
        };
        // The body is re-framed here: hop-by-hop framing headers go.
        for header in [CONNECTION, TRANSFER_ENCODING, CONTENT_LENGTH] {
            parts.headers.remove(header);
        }
        Response::from_parts(parts, Full::new(body))
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response
}

/// The request's protocol and `Service.Operation` name.
fn classify(parts: &hyper::http::request::Parts, body: &[u8]) -> (Protocol, String) {
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|t| t.to_str().ok())
        .unwrap_or_default();
    if let Some(op) = target.strip_prefix("DynamoDB_20120810.") {
        return (Protocol::DynamoDb, format!("DynamoDB.{op}"));
    }
    if let Some(op) = target.strip_prefix("AmazonSQS.") {
        return (Protocol::SqsJson, format!("SQS.{op}"));
    }
    let form = String::from_utf8_lossy(body);
    if let Some(action) = form
        .split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
    {
        return (Protocol::SqsQuery, format!("SQS.{action}"));
    }
    (Protocol::S3, format!("S3.{}", parts.method))
}

/// An error answer as the real service writes it, so the SDK parses and
/// classifies it as it would in production.
fn error_response(protocol: Protocol, fault: Fault) -> Response<Full<Bytes>> {
    let (status, code, message) = match (protocol, fault) {
        (Protocol::DynamoDb, Fault::Throttle) => (
            StatusCode::BAD_REQUEST,
            "ProvisionedThroughputExceededException",
            "The level of configured provisioned throughput for the table was exceeded. \
             Consider increasing your provisioning level with the UpdateTable API.",
        ),
        (Protocol::SqsJson | Protocol::SqsQuery, Fault::Throttle) => {
            (StatusCode::BAD_REQUEST, "RequestThrottled", "Rate exceeded")
        }
        (Protocol::S3, Fault::Throttle) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "Please reduce your request rate.",
        ),
        (Protocol::DynamoDb, Fault::Unavailable) | (_, Fault::Unavailable) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "The service is unavailable. Please try again shortly.",
        ),
        (Protocol::DynamoDb, _) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "Internal server error",
        ),
        (_, _) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "We encountered an internal error. Please try again.",
        ),
    };
    let request_id = format!("fault-{:016x}", fastrand::u64(..));
    let mut response = match protocol {
        Protocol::DynamoDb => json(&format!("com.amazonaws.dynamodb.v20120810#{code}"), message),
        Protocol::SqsJson => {
            let mut response = json(&format!("com.amazonaws.sqs#{code}"), message);
            // What moto and SQS send for the query-compatible error code.
            let fault_side = if status.is_server_error() {
                "Receiver"
            } else {
                "Sender"
            };
            if let Ok(value) = HeaderValue::from_str(&format!("{code};{fault_side}")) {
                response.headers_mut().insert("x-amzn-query-error", value);
            }
            response
        }
        Protocol::SqsQuery => xml(format!(
            "<ErrorResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\"><Error>\
             <Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>\
             <RequestId>{request_id}</RequestId></ErrorResponse>"
        )),
        Protocol::S3 => xml(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>{message}</Message><RequestId>{request_id}</RequestId></Error>"
        )),
    };
    *response.status_mut() = status;
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-amzn-requestid", value);
    }
    response
}

fn json(error_type: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "__type": error_type, "message": message }).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    if let Ok(value) = HeaderValue::from_str(error_type) {
        response.headers_mut().insert("x-amzn-errortype", value);
    }
    response
}

fn xml(body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    response
}
