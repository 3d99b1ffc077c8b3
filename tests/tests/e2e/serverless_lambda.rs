//! The serverless deployment running a custom runtime's jobs on the lambda
//! runner: config and releases pushed through the API router the `api`
//! function serves, the scheduler and the worker over DynamoDB Local and
//! moto (SQS, S3), and the worker's Lambda client pointed at `cargo lambda
//! watch` — the real Invoke and runtime APIs — whose function is this
//! build's `vergence-wrapper` in its Lambda mode. The worker only invokes
//! (asynchronously); results come from later checks, which read what the
//! wrapper uploaded to the artifact bucket.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::{Value, json};
use vergence_e2e::{Harness, endpoints};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::ManualClock;
use vergence_testkit::{CARGO_LAMBDA, WrapperFunction};

/// Staging then prod (prod once staging is stable), one service on the
/// function. Each apply appends `<channel> <version>` to `applies.log`
/// (one line per invocation) and records the version in `<channel>.txt`,
/// except v2's, which fails with a message on stderr; the exit-code fetch
/// compares the record with the desired version.
fn config(dir: &std::path::Path) -> String {
    let dir = dir.display();
    format!(
        r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: deployer}}]
    - name: prod
      runtimes: [{{runtime: deployer}}]
      preconditions:
        - releaseChannelStable: {{releaseChannel: staging}}
---
runtime:
  name: deployer
  runner:
    lambda: {{function: {function}}}
  apply:
    retryPolicy: {{baseInterval: 1s, maxInterval: 1s, maxAttempts: 1}}
    taskConfig:
      program:
        cmd: [sh, -c, 'echo "$VERGENCE_RELEASE_CHANNEL $VERGENCE_SERVICE_VERSION" >> {dir}/applies.log; if [ "$VERGENCE_SERVICE_VERSION" = v2 ]; then echo "v2 cannot start: port 8080 in use" >&2; exit 3; fi; echo "$VERGENCE_SERVICE_VERSION" > {dir}/$VERGENCE_RELEASE_CHANNEL.txt']
  fetch:
    mode: exitCode
    pollInterval: 2s
    steadyStatePollInterval: 10m
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat {dir}/$VERGENCE_RELEASE_CHANNEL.txt 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
---
service:
  name: api
  runtime: deployer
"#,
        function = WrapperFunction::NAME,
    )
}

/// Calls the API router the `api` function serves.
async fn call(
    api: &axum::Router,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        ))
        .unwrap();
    let response = api.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

fn applies(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("applies.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lambda_jobs_invoked_by_the_worker_converge_staging_then_prod_and_a_failing_apply_is_reported()
 {
    let Some((dynamodb, moto)) = endpoints() else {
        return;
    };
    let Some(cargo_lambda) = vergence_testkit::endpoint(CARGO_LAMBDA) else {
        return;
    };
    let jobs = tempfile::tempdir().unwrap();
    let function = WrapperFunction::start(&cargo_lambda, jobs.path());
    let clock = std::sync::Arc::new(ManualClock::new(Timestamp::now()));
    let mut h = Harness::start_with_clock(&dynamodb, &moto, Some(clock)).await;
    // The worker's Lambda client, as the deployment's other clients are
    // here: the SDK's, at the stand-in's endpoint.
    let lambda_sdk = vergence_aws::testing::sdk_config(&function.url).await;
    h.deployment = h
        .deployment
        .clone()
        .with_lambda(aws_sdk_lambda::Client::new(&lambda_sdk));

    let api = vergence_lambda::api_router(&h.deployment);
    let (_, admin) = vergence_api::create_token(
        h.deployment.store.as_ref(),
        &vergence_model::TokenSubject::Application("shop".parse().unwrap()),
        &[vergence_model::Scope::Admin],
        None,
        "cli:test",
        &vergence_model::ports::SystemClock,
    )
    .await
    .unwrap();
    let upload = json!({"files": {"vergence.yaml": config(jobs.path())}});
    let (status, body) = call(&api, "POST", "/v1/configs", &admin, Some(upload)).await;
    assert_eq!(status, 200, "{body}");
    let release = |version: &str| json!({"version": version, "params": {}});
    let releases = "/v1/applications/shop/services/api/releases";
    let (status, body) = call(&api, "POST", releases, &admin, Some(release("v1"))).await;
    assert_eq!(status, 200, "{body}");

    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(180), async |h, event| {
        let response = h.deliver(&worker, event).await;
        assert!(response.batch_item_failures.is_empty());
    })
    .await;
    // Each channel's apply was invoked once, staging's first.
    assert_eq!(applies(jobs.path()), ["staging v1", "prod v1"]);
    let detail =
        |channel: &str| format!("/v1/applications/shop/services/api/release-channels/{channel}");
    for channel in ["staging", "prod"] {
        let (status, detail) = call(&api, "GET", &detail(channel), &admin, None).await;
        assert_eq!(status, 200, "{detail}");
        assert_eq!(detail["instance"]["status"], "CONVERGED", "{detail:#}");
        assert_eq!(detail["instance"]["currentVersion"], "v1", "{detail:#}");
        let apply = detail["lastJobs"]
            .as_array()
            .unwrap_or_else(|| panic!("{detail:#}"))
            .iter()
            .find(|j| j["kind"] == "apply")
            .cloned()
            .unwrap_or_else(|| panic!("no apply among the last jobs: {detail:#}"));
        assert_eq!(apply["exitCode"], 0, "{apply}");
    }

    // v2's apply fails: its exit code and the end of its stderr come back
    // through the API; prod stays on v1.
    let (status, body) = call(&api, "POST", releases, &admin, Some(release("v2"))).await;
    assert_eq!(status, 200, "{body}");
    let start = Instant::now();
    let failed = loop {
        let (_, staging) = call(&api, "GET", &detail("staging"), &admin, None).await;
        let apply = staging["lastJobs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|j| j["kind"] == "apply" && j["version"] == "v2")
            .cloned();
        if let Some(apply) = apply {
            break apply;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no apply of v2 reported: {staging:#}"
        );
        let event = h.receive(Duration::from_secs(1)).await;
        if event.records.is_empty() {
            h.manual
                .as_ref()
                .unwrap()
                .advance(jiff::SignedDuration::from_secs(20));
            h.schedule().await;
        } else {
            h.deliver(&worker, event).await;
        }
    };
    assert_eq!(failed["exitCode"], 3, "{failed}");
    assert!(
        failed["output"]
            .as_str()
            .unwrap()
            .contains("v2 cannot start: port 8080 in use"),
        "the stderr tail: {failed}"
    );
    let v2: Vec<_> = applies(jobs.path())
        .into_iter()
        .filter(|line| line.ends_with(" v2"))
        .collect();
    assert_eq!(v2, ["staging v2"], "one invocation, in staging only");
    let (_, prod) = call(&api, "GET", &detail("prod"), &admin, None).await;
    assert_eq!(prod["instance"]["currentVersion"], "v1", "{prod:#}");
}
