//! The serverless shape end to end against DynamoDB Local and moto's SQS:
//! the scheduler gets a real EventBridge event, the worker real SQS event
//! payloads built from received messages, until staging and prod converge.
//! Then the same under duplicate and concurrent deliveries, and with a
//! worker that dies between running an apply and recording its result.

// Test helpers outside #[test] functions unwrap too; a panic is a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use vergence_e2e::{Harness, applies_started, endpoints, quickstart_copy};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::{ArtifactStore, JobResultSink, ManualClock, Runner};
use vergence_model::{JobHandle, JobKind, JobRecord, JobResult, Status};
use vergence_runner_local::LocalRunner;

/// Applies started per (instance, version), from the audit trail.
async fn applies(h: &Harness) -> BTreeMap<(String, String), usize> {
    applies_started(h.events().await, false)
}

/// The quickstart's files as an API upload. Jobs of an uploaded config run
/// in the worker's directory, so paths are made absolute.
fn quickstart_upload(dir: &std::path::Path) -> serde_json::Value {
    let root = dir.display().to_string();
    let deployed = format!("{root}/deployed");
    let mut files = serde_json::Map::new();
    for name in ["application.yaml", "runtimes.yaml", "services.yaml"] {
        let mut text = std::fs::read_to_string(dir.join(name)).unwrap();
        if name == "runtimes.yaml" {
            text = text
                .replace("./scripts/", &format!("{root}/scripts/"))
                .replace(
                    "          SERVICE: \"{{.Params.service}}\"\n",
                    &format!(
                        "          SERVICE: \"{{{{.Params.service}}}}\"\n          QUICKSTART_DEPLOY_DIR: {deployed}\n"
                    ),
                )
                .replace(
                    "migrate.sh, \"{{.Params.service}}\"]\n",
                    &format!(
                        "migrate.sh, \"{{{{.Params.service}}}}\"]\n        env:\n          QUICKSTART_DEPLOY_DIR: {deployed}\n"
                    ),
                );
        }
        files.insert(name.to_owned(), text.into());
    }
    serde_json::json!({ "files": files })
}

/// Calls the API router the `api` function serves.
async fn call(
    api: &axum::Router,
    method: &str,
    path: &str,
    token: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_converges_through_the_api_scheduler_and_worker() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let mut h = Harness::start(&dynamodb, &sqs).await;
    let dir = quickstart_copy();
    let api = vergence_lambda::api_router(&h.deployment);
    // What `vergence token create --dynamodb-table` does.
    let token = async |scope| {
        vergence_api::create_token(
            h.deployment.store.as_ref(),
            &vergence_model::TokenSubject::Application("shop".parse().unwrap()),
            &[scope],
            None,
            "cli:test",
            &vergence_model::ports::SystemClock,
        )
        .await
        .unwrap()
        .1
    };
    let admin = token(vergence_model::Scope::Admin).await;
    let ci = token(vergence_model::Scope::Release).await;

    let (status, body) = call(
        &api,
        "POST",
        "/v1/configs",
        &admin,
        Some(quickstart_upload(dir.path())),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(120), async |h, event| {
        let response = h.deliver(&worker, event).await;
        assert!(response.batch_item_failures.is_empty());
    })
    .await;
    for channel in ["staging", "prod"] {
        let api_file =
            std::fs::read_to_string(dir.path().join(format!("deployed/{channel}/api.txt")));
        assert!(api_file.unwrap().contains("service=api"));
    }

    // CI pushes a release with a release-scoped token; it cannot approve.
    let release = serde_json::json!({"version": "v2", "params": {}});
    let (status, body) = call(
        &api,
        "POST",
        "/v1/applications/shop/services/web/releases",
        &ci,
        Some(release),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = call(
        &api,
        "POST",
        "/v1/applications/shop/services/web/release-channels/prod/approvals",
        &ci,
        Some(serde_json::json!({})),
    )
    .await;
    assert_eq!(status, 403);
    h.converge(Duration::from_secs(120), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;
    let web = std::fs::read_to_string(dir.path().join("deployed/prod/web.txt")).unwrap();
    assert!(web.contains("version=v2"), "{web}");
    for (key, n) in applies(&h).await {
        assert_eq!(n, 1, "{key:?} applied {n} times");
    }

    // Status read back through the API.
    let (status, body) = call(&api, "GET", "/v1/applications/shop/status", &ci, None).await;
    assert_eq!(status, 200, "{body}");
    let instances = body["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 6);
    assert!(
        instances.iter().all(|i| i["status"] == "CONVERGED"),
        "{body}"
    );
    assert!(
        instances
            .iter()
            .filter(|i| i["service"] == "web")
            .all(|i| i["currentVersion"] == "v2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_concurrent_deliveries_apply_once_per_instance_and_version() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let mut h = Harness::start(&dynamodb, &sqs).await;
    let dir = quickstart_copy();
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let first = Worker::new(h.deployment.clone(), WorkerConfig::default());
    let second = Worker::new(h.deployment.clone(), WorkerConfig::default());
    let mut rng = fastrand::Rng::with_seed(7);
    h.converge(Duration::from_secs(180), async |h, event| {
        let copies = rng.usize(1..=3);
        if rng.bool() {
            // Two workers get the same messages at once, as when a
            // visibility timeout runs out while the first is busy.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            tokio::join!(
                first.handle(event.clone(), Some(deadline)),
                second.handle(event.clone(), Some(deadline))
            );
        }
        for _ in 0..copies {
            h.deliver(&first, event.clone()).await;
        }
    })
    .await;
    assert!(
        h.deliveries.values().any(|n| *n > 1),
        "some messages were delivered more than once"
    );
    for channel in ["staging", "prod"] {
        let log = std::fs::read_to_string(
            dir.path()
                .join(format!("deployed/{channel}/migrations.log")),
        )
        .unwrap();
        assert_eq!(
            log.lines().count(),
            1,
            "apply-only ran once in {channel}: {log}"
        );
    }
    let counts = applies(&h).await;
    assert_eq!(counts.len(), 6, "{counts:?}");
    for (key, n) in counts {
        assert_eq!(n, 1, "{key:?} applied {n} times");
    }
}

/// Runs jobs with the local runner, except that the worker "dies" at the
/// first apply: before running it (after recording and claiming it), or
/// after running it but before recording its result.
struct DiesAtFirstApply {
    inner: LocalRunner,
    artifacts: Arc<dyn ArtifactStore>,
    died: AtomicBool,
    ran_before_dying: bool,
}

#[async_trait]
impl Runner for DiesAtFirstApply {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        if job.kind == JobKind::Apply && !self.died.swap(true, Ordering::SeqCst) {
            if self.ran_before_dying {
                return LocalRunner::inline(Arc::new(Forget), self.artifacts.clone())
                    .dispatch(job)
                    .await;
            }
            return Ok(None);
        }
        self.inner.dispatch(job).await
    }
}

struct Forget;

#[async_trait]
impl JobResultSink for Forget {
    async fn job_finished(&self, _: &JobRecord, _: JobResult) -> vergence_model::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dying_between_running_and_recording_an_apply_converges_without_a_second_apply() {
    worker_dies_at_first_apply(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dying_between_recording_and_running_an_apply_converges_with_one_run() {
    worker_dies_at_first_apply(false).await;
}

async fn worker_dies_at_first_apply(ran_before_dying: bool) {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let clock = Arc::new(ManualClock::new(jiff::Timestamp::now()));
    let mut h = Harness::start_with_clock(&dynamodb, &sqs, Some(clock)).await;
    let dir = quickstart_copy();
    // One exit-code service in one channel: its fetch can tell what ran.
    std::fs::write(
        dir.path().join("services.yaml"),
        "service:\n  name: api\n  runtime: files-exit-code\n  custom:\n    parameterValues:\n      - name: service\n        string: api\n",
    )
    .unwrap();
    let app = std::fs::read_to_string(dir.path().join("application.yaml")).unwrap();
    let staging_only = app.split("    - name: prod").next().unwrap().to_owned();
    std::fs::write(dir.path().join("application.yaml"), staging_only).unwrap();
    // A short apply timeout, so the lost job's deadline comes soon.
    let runtimes = std::fs::read_to_string(dir.path().join("runtimes.yaml")).unwrap();
    let marker =
        "        env:\n          SERVICE: \"{{.Params.service}}\"\n  fetch:\n    mode: exitCode";
    assert!(runtimes.contains(marker));
    let runtimes = runtimes.replacen(
        marker,
        "        env:\n          SERVICE: \"{{.Params.service}}\"\n    timeout: 10s\n  fetch:\n    mode: exitCode",
        1,
    );
    std::fs::write(dir.path().join("runtimes.yaml"), runtimes).unwrap();
    // Every run of the deploy script leaves a line.
    let deploy = dir.path().join("scripts/deploy.sh");
    let script = std::fs::read_to_string(&deploy).unwrap();
    std::fs::write(
        &deploy,
        format!("{script}echo \"$VERGENCE_JOB_ID\" >> apply-runs.log\n"),
    )
    .unwrap();
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();

    let healthy = Worker::new(h.deployment.clone(), WorkerConfig::default());
    let runner = Arc::new(DiesAtFirstApply {
        inner: LocalRunner::inline(healthy.completion(), h.deployment.artifacts.clone()),
        artifacts: h.deployment.artifacts.clone(),
        died: AtomicBool::new(false),
        ran_before_dying,
    });
    let worker = Worker::with_runner(h.deployment.clone(), WorkerConfig::default(), runner);
    h.converge(Duration::from_secs(120), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;
    let instances = h.instances().await;
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0].state.status, Status::Converged);
    // The deploy script ran exactly once either way.
    let runs = std::fs::read_to_string(dir.path().join("apply-runs.log")).unwrap();
    assert_eq!(runs.lines().count(), 1, "{runs}");
    let deployed = std::fs::read_to_string(dir.path().join("deployed/staging/api.txt")).unwrap();
    assert!(deployed.contains("service=api"));
    let counts = applies(&h).await;
    let expected = if ran_before_dying { 1 } else { 2 };
    assert_eq!(
        counts.values().sum::<usize>(),
        expected,
        "ran before dying: a fetch saw the apply and nothing was applied again; \
         died before running: one more attempt ran it: {counts:?}"
    );
}

/// Measures what one apply-only instance costs, in requests at the wire,
/// from a pushed release to CONVERGED (reported in docs/serverless.md).
/// The test harness's own receive/delete calls stand in for Lambda's event
/// source mapping and are counted separately.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_apply_only_instance_from_release_to_converged() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let counter = vergence_e2e::wire::RequestCounter::default();
    let mut h = Harness::start_with(&dynamodb, &sqs, None, Some(counter.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("vergence.yaml"),
        "runtime:\n  name: touch\n  apply:\n    taskConfig:\n      program:\n        cmd: [sh, -c, 'echo $VERGENCE_SERVICE_VERSION > applied']\n---\napplication:\n  name: shop\n  releaseChannels:\n    - name: prod\n      runtimes: [{runtime: touch}]\n---\nservice:\n  name: api\n  runtime: touch\n",
    )
    .unwrap();
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(60), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;

    counter.reset();
    h.control()
        .push_release(
            None,
            &"api".parse().unwrap(),
            &"v2".parse().unwrap(),
            &BTreeMap::new(),
            "ci",
        )
        .await
        .unwrap();
    let release = counter.snapshot();
    counter.reset();
    h.converge(Duration::from_secs(60), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;
    let mut converge = counter.snapshot();
    // The harness's own calls (what Lambda's SQS integration does).
    let mapping: usize = ["SQS.ReceiveMessage", "SQS.DeleteMessage"]
        .iter()
        .filter_map(|op| converge.remove(*op))
        .sum();
    // The convergence check itself reads status: not part of the cost.
    let total = |m: &BTreeMap<String, usize>| m.values().sum::<usize>();
    println!("release push: {} requests {release:?}", total(&release));
    println!(
        "release to CONVERGED: {} requests {converge:?} (+{mapping} receive/delete by the event source mapping)",
        total(&converge)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("applied"))
            .unwrap()
            .trim(),
        "v2"
    );
    assert!(total(&converge) < 40, "cost regression: {converge:?}");
}
