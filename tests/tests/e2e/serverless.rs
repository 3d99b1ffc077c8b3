//! The serverless shape end to end against DynamoDB Local and moto's SQS:
//! the scheduler gets a real EventBridge event, the worker real SQS event
//! payloads built from received messages, until staging and prod converge.
//! Then the same under duplicate and concurrent deliveries, and with a
//! worker that dies between running an apply and recording its result.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use vergence_e2e::{Harness, applies_started, endpoints, quickstart_copy};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::{ArtifactStore, JobResultSink, ManualClock, Runner};
use vergence_model::{EventKind, InstanceRecord, JobHandle, JobKind, JobRecord, JobResult, Status};
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

/// The design's custom runtime example through the API, scheduler and
/// worker: a structured fetch without status converges, and what getInfo
/// printed (a console link, as plain text) is served by the API as printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeform_get_info_reaches_the_api_and_a_fetch_without_status_converges() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let mut h = Harness::start(&dynamodb, &sqs).await;
    // Jobs of an uploaded config run in the worker's directory: every path
    // is absolute.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let scripts = [
        (
            "apply.sh",
            format!("#!/bin/sh\nprintf '%s' \"$VERGENCE_SERVICE_VERSION\" > {root}/deployed-$VERGENCE_RELEASE_CHANNEL\n"),
        ),
        (
            "fetch.sh",
            format!("#!/bin/sh\nf={root}/deployed-$VERGENCE_RELEASE_CHANNEL\nif [ ! -f $f ]; then echo '{{\"objects\":[]}}'; exit 0; fi\nprintf '{{\"objects\": [{{\"name\": \"my-service\", \"objectType\": \"my-type\", \"versions\": [{{\"version\": \"%s\", \"active\": true}}]}}]}}\\n' \"$(cat $f)\"\n"),
        ),
        (
            "info.sh",
            "#!/bin/sh\necho \"Console: https://console.example.com/services/$VERGENCE_SERVICE?env=$VERGENCE_RELEASE_CHANNEL\"\n".to_owned(),
        ),
    ];
    for (name, text) in &scripts {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = format!(
        "application:\n  name: shop\n  releaseChannels:\n    - name: staging\n      runtimes: [{{runtime: custom}}]\n---\nruntime:\n  name: custom\n  apply: {{taskConfig: {{program: {{cmd: [{root}/apply.sh]}}}}}}\n  fetch:\n    mode: structured\n    taskConfig: {{program: {{cmd: [{root}/fetch.sh]}}}}\n  getInfo: {{taskConfig: {{program: {{cmd: [{root}/info.sh]}}}}}}\n---\nservice:\n  name: my-service\n  runtime: custom\n"
    );
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
    let upload = serde_json::json!({"files": {"vergence.yaml": config}});
    let (status, body) = call(&api, "POST", "/v1/configs", &admin, Some(upload)).await;
    assert_eq!(status, 200, "{body}");
    let release = serde_json::json!({"version": "svc-1", "params": {}});
    let (status, body) = call(
        &api,
        "POST",
        "/v1/applications/shop/services/my-service/releases",
        &admin,
        Some(release),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(120), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;

    // getInfo runs once nothing else does.
    let path = "/v1/applications/shop/services/my-service/release-channels/staging";
    let start = Instant::now();
    let detail = loop {
        let (status, detail) = call(&api, "GET", path, &admin, None).await;
        assert_eq!(status, 200, "{detail}");
        if detail["instance"]["infoText"].is_string() {
            break detail;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no getInfo output: {detail:#}"
        );
        h.schedule().await;
        h.deliver_until_idle(&worker).await;
    };
    let instance = &detail["instance"];
    assert_eq!(instance["status"], "CONVERGED", "{detail:#}");
    assert_eq!(instance["currentVersion"], "svc-1", "{detail:#}");
    assert_eq!(
        instance["infoText"],
        "Console: https://console.example.com/services/my-service?env=staging",
        "{detail:#}"
    );
    assert_eq!(instance["info"], serde_json::json!([]), "{detail:#}");
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
            let deadline = Instant::now() + Duration::from_secs(60);
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

/// Requests the deployment sent, by `Service.Operation`, as one line a
/// benchmark script can grep: `BENCH <name> dynamodb=… sqs_sends=… <op>=…`.
/// SQS sends are requests (SendMessage and SendMessageBatch), which is what
/// SQS bills, however many messages each carries.
fn bench(name: &str, counts: &BTreeMap<String, usize>) -> (usize, usize) {
    let of = |service: &str| -> usize {
        counts
            .iter()
            .filter(|(op, _)| op.starts_with(service))
            .map(|(_, n)| n)
            .sum()
    };
    let dynamodb = of("DynamoDB.");
    let sqs_sends = of("SQS.SendMessage");
    let ops: Vec<String> = counts.iter().map(|(op, n)| format!("{op}={n}")).collect();
    println!(
        "BENCH {name} dynamodb={dynamodb} sqs_sends={sqs_sends} {}",
        ops.join(" ")
    );
    (dynamodb, sqs_sends)
}

/// What docs/cost.md prices, as one line for scripts/bench.py:
/// DynamoDB request units (`ReturnConsumedCapacity`, see tests/src/wire.rs),
/// SQS requests of every kind, and the function's wall time.
fn bench_cost(
    name: &str,
    counts: &BTreeMap<String, usize>,
    capacity: vergence_e2e::wire::Capacity,
    time: Duration,
    invocations: usize,
) {
    let sqs: usize = counts
        .iter()
        .filter(|(op, _)| op.starts_with("SQS."))
        .map(|(_, n)| n)
        .sum();
    println!(
        "BENCH {name} rru={} wru={} sqs_requests={sqs} ms={:.3} invocations={invocations}",
        capacity.read,
        capacity.write,
        time.as_secs_f64() * 1e3
    );
}

/// `counts` is exactly `expected`: a change in what a phase costs shows as
/// a failed test, up or down, and the expectation is updated on purpose.
fn assert_counts(phase: &str, counts: &BTreeMap<String, usize>, expected: &[(&str, usize)]) {
    let expected: BTreeMap<String, usize> = expected
        .iter()
        .map(|(op, n)| ((*op).to_owned(), *n))
        .collect();
    assert_eq!(counts, &expected, "requests of {phase} changed");
}

/// An apply-only runtime writing the version it applied to `applied` in
/// each release channel's directory, and the channels it runs in (each
/// after the one before it is stable).
fn apply_only_config(dir: &std::path::Path, channels: &[&str]) {
    let mut application = String::from("application:\n  name: shop\n  releaseChannels:\n");
    let mut upstream: Option<&str> = None;
    for channel in channels {
        application.push_str(&format!(
            "    - name: {channel}\n      runtimes: [{{runtime: touch}}]\n"
        ));
        if let Some(upstream) = upstream {
            application.push_str(&format!(
                "      preconditions:\n        - releaseChannelStable: {{releaseChannel: {upstream}}}\n"
            ));
        }
        upstream = Some(channel);
    }
    std::fs::write(
        dir.join("vergence.yaml"),
        format!(
            "runtime:\n  name: touch\n  apply:\n    taskConfig:\n      program:\n        cmd: [sh, -c, 'echo $VERGENCE_SERVICE_VERSION > applied-$VERGENCE_RELEASE_CHANNEL']\n---\n{application}---\nservice:\n  name: api\n  runtime: touch\n"
        ),
    )
    .unwrap();
}

/// What a release of an apply-only service costs, counted at the wire: the
/// push (API) and the worker's steps from there to CONVERGED in every
/// channel; and another push from a cold api container. The event source mapping's receive and delete, the test's own
/// status reads and the scheduler (never needed here) are not counted.
async fn release_costs(
    channels: &[&str],
) -> (
    BTreeMap<String, usize>,
    BTreeMap<String, usize>,
    BTreeMap<String, usize>,
) {
    let (dynamodb, sqs) = endpoints().unwrap();
    let counter = vergence_e2e::wire::RequestCounter::default();
    let mut h = Harness::start_with(&dynamodb, &sqs, None, Some(counter.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    apply_only_config(dir.path(), channels);
    // One control for both, as the api function keeps one per container:
    // a warm container has the config compiled (a cold one reads its
    // snapshot first, one GetItem more).
    let control = h.control();
    control
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(60), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;

    // What `vergence release` asks the api function for.
    let release = async |control: &vergence_engine::control::Control, version: &str| {
        let (service, version) = ("api".parse().unwrap(), version.parse().unwrap());
        let params = BTreeMap::new();
        let pushed = control.push_release(None, &service, &version, &params, "ci");
        pushed.await.unwrap();
    };
    counter.reset();
    release(&control, "v2").await;
    let push = counter.snapshot();
    counter.reset();
    h.deliver_until_idle(&worker).await;
    let steps = counter.snapshot();
    for instance in h.instances().await {
        assert_eq!(instance.state.status, Status::Converged, "{}", instance.key);
        assert_eq!(instance.state.current_version.unwrap().as_str(), "v2");
    }
    for channel in channels {
        let applied = std::fs::read_to_string(dir.path().join(format!("applied-{channel}")));
        assert_eq!(applied.unwrap().trim(), "v2");
    }
    // A push from a container that has compiled nothing yet.
    counter.reset();
    release(&h.control(), "v3").await;
    (push, steps, counter.snapshot())
}

/// What one apply-only instance costs from a pushed release to CONVERGED
/// (reported in docs/serverless.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_apply_only_instance_from_release_to_converged() {
    if endpoints().is_none() {
        return;
    }
    let (push, steps, cold) = release_costs(&["prod"]).await;
    bench("serverless_release_push", &push);
    bench("serverless_release_to_converged", &steps);
    bench("serverless_release_push_cold", &cold);
    assert_counts("the release push", &push, PUSH_ONE_CHANNEL);
    assert_counts("the steps to CONVERGED", &steps, STEPS_ONE_CHANNEL);
    assert_counts("a cold container's push", &cold, PUSH_COLD);
}

/// The same through two channels, prod waiting for staging to be stable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_instance_from_release_through_staging_to_prod() {
    if endpoints().is_none() {
        return;
    }
    let (push, steps, _) = release_costs(&["staging", "prod"]).await;
    let (push_dynamodb, push_sqs) = bench("serverless_release_push_two_channels", &push);
    let (dynamodb, sqs) = bench("serverless_staging_to_prod", &steps);
    println!(
        "BENCH serverless_staging_to_prod_per_instance dynamodb={} sqs_sends={}",
        (push_dynamodb + dynamodb) as f64 / 2.0,
        (push_sqs + sqs) as f64 / 2.0
    );
    assert_counts("the release push", &push, PUSH_TWO_CHANNELS);
    assert_counts("the steps to CONVERGED", &steps, STEPS_TWO_CHANNELS);
}

/// Pushing a release (API), from a container that has the config compiled:
/// the service's instances in one query, then one transaction: the release
/// (a new version: nothing read first), each instance's new desired state
/// and the release's event, on the condition that the config it compiled
/// is still the one in force; and a message to step the instances.
const PUSH_ONE_CHANNEL: &[(&str, usize)] = &[
    ("DynamoDB.Query", 1),
    ("DynamoDB.TransactWriteItems", 1),
    ("SQS.SendMessageBatch", 1),
];
/// The same from a container that has not compiled the config yet: the
/// config pointer and snapshot first.
const PUSH_COLD: &[(&str, usize)] = &[
    ("DynamoDB.GetItem", 2),
    ("DynamoDB.Query", 1),
    ("DynamoDB.TransactWriteItems", 1),
    ("SQS.SendMessageBatch", 1),
];
/// One step: read the instance (with its last quiet check), commit the
/// apply job claimed, run it inline, commit CONVERGED with its result. No
/// deadline check is sent for the apply, which ended in the step.
const STEPS_ONE_CHANNEL: &[(&str, usize)] =
    &[("DynamoDB.Query", 1), ("DynamoDB.TransactWriteItems", 2)];
const PUSH_TWO_CHANNELS: &[(&str, usize)] = PUSH_ONE_CHANNEL;
/// Each channel as above, plus a step of prod from the push, in which it
/// records that it waits for staging, and staging's wake of prod. Prod's
/// steps read staging in the same query as prod (the worker learnt that
/// prod's preconditions look at staging while converging the first
/// version), and its decision after the apply reuses that read.
const STEPS_TWO_CHANNELS: &[(&str, usize)] = &[
    ("DynamoDB.Query", 3),
    ("DynamoDB.TransactWriteItems", 5),
    ("SQS.SendMessageBatch", 1),
];
/// One query per due-index shard, one message for the due instance.
const SCHEDULER_ONE_DUE: &[(&str, usize)] = &[("DynamoDB.Query", 8), ("SQS.SendMessageBatch", 1)];
/// A steady-state check that finds nothing: read the instance (with its
/// last check, in one query), run the fetch inline, write the small check
/// item, send the next check as a delayed message. No job record, no claim,
/// no transaction, and the due index untouched.
const ONE_QUIET_CHECK: &[(&str, usize)] = &[
    ("DynamoDB.PutItem", 1),
    ("DynamoDB.Query", 1),
    ("SQS.SendMessageBatch", 1),
];

/// A runtime whose exit-code fetch finds drift while a `drift` file
/// exists, and whose apply removes it and counts itself in `applied`.
const STEADY_CONFIG: &str = "runtime:\n  name: checked\n  apply:\n    taskConfig:\n      program:\n        cmd: [sh, -c, 'rm -f drift; echo applied >> applied']\n  fetch:\n    mode: exitCode\n    taskConfig:\n      program:\n        cmd: [sh, -c, 'if [ -e drift ]; then exit 2; fi']\n    pollInterval: 2s\n    steadyStatePollInterval: INTERVAL\n---\napplication:\n  name: shop\n  releaseChannels:\n    - name: prod\n      runtimes: [{runtime: checked}]\n---\nservice:\n  name: api\n  runtime: checked\n";

/// A converged instance of [`STEADY_CONFIG`] checked every `interval`
/// (`1s`: on the machine's clock, so that the queue's delayed messages
/// carry the checks; `5m`: on a manual clock, where they stay out of the
/// way and only the scheduler's index brings the instance back).
async fn steadily_checked(
    counter: &vergence_e2e::wire::RequestCounter,
    interval: &str,
    clock: Option<Arc<ManualClock>>,
) -> (Harness, Worker, tempfile::TempDir) {
    steadily_checked_services(counter, interval, clock, &[]).await
}

/// [`steadily_checked`] with more services on the same runtime.
async fn steadily_checked_services(
    counter: &vergence_e2e::wire::RequestCounter,
    interval: &str,
    clock: Option<Arc<ManualClock>>,
    more: &[&str],
) -> (Harness, Worker, tempfile::TempDir) {
    let (dynamodb, sqs) = endpoints().unwrap();
    let mut h = Harness::start_with(&dynamodb, &sqs, clock, Some(counter.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = STEADY_CONFIG.replace("INTERVAL", interval);
    for service in more {
        config.push_str(&format!(
            "---\nservice:\n  name: {service}\n  runtime: checked\n"
        ));
    }
    std::fs::write(dir.path().join("vergence.yaml"), config).unwrap();
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(60), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;
    (h, worker, dir)
}

/// Waits for the next check's delayed message and delivers it; returns
/// what the worker's step cost.
async fn check_once(
    h: &mut Harness,
    worker: &Worker,
    counter: &vergence_e2e::wire::RequestCounter,
) -> BTreeMap<String, usize> {
    let event = h.receive(Duration::from_secs(5)).await;
    assert_eq!(event.records.len(), 1, "one message carries the next check");
    counter.reset();
    let response = h.deliver(worker, event).await;
    assert!(response.batch_item_failures.is_empty(), "the check failed");
    counter.snapshot()
}

/// The instance, converged and not fetching.
async fn the_converged_instance(h: &Harness) -> InstanceRecord {
    let instances = h.instances().await;
    assert_eq!(instances.len(), 1);
    let instance = instances.into_iter().next().unwrap();
    assert_eq!(
        instance.state.status,
        Status::Converged,
        "{}",
        instance.state.reason
    );
    assert!(instance.state.in_flight.is_none(), "the fetch ended");
    instance
}

/// What one steady-state check of a converged instance costs when it
/// finds nothing to do: one read, one small write, one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_steady_state_poll_with_a_fetch() {
    if endpoints().is_none() {
        return;
    }
    let counter = vergence_e2e::wire::RequestCounter::default();
    let (mut h, worker, _dir) = steadily_checked(&counter, "1s", None).await;
    // The first check after converging is one like any other, but one
    // more makes sure nothing of the convergence is left in it.
    check_once(&mut h, &worker, &counter).await;
    h.count_worker_logs();
    h.take_spent();
    let before = the_converged_instance(&h).await;
    let steps = check_once(&mut h, &worker, &counter).await;
    let check = counter.capacity();
    let spent = h.take_spent();
    bench("serverless_poll", &steps);
    bench_cost(
        "cost_check",
        &steps,
        check,
        spent.worker,
        spent.worker_invocations,
    );
    println!("BENCH cost_check_logs log_bytes={}", spent.worker_log_bytes);
    assert_counts("a steady-state check", &steps, ONE_QUIET_CHECK);
    assert!(
        check.write <= 1.0 && check.read <= 1.0,
        "a check that finds nothing costs at most one read and one write unit: {check:?}"
    );
    let after = the_converged_instance(&h).await;
    let (seen, now) = (
        before.state.last_fetch.unwrap(),
        after.state.last_fetch.unwrap(),
    );
    assert!(
        now.at > seen.at && now.seq > seen.seq,
        "the check is on record: {now:?}"
    );
    assert!(after.next_check_at > before.next_check_at);
    // The scheduler's run with nothing due: what every minute costs.
    counter.reset();
    assert_eq!(h.schedule().await, 0, "nothing is due");
    let spent = h.take_spent();
    bench_cost(
        "cost_scheduler_idle",
        &counter.snapshot(),
        counter.capacity(),
        spent.scheduler,
        spent.scheduler_invocations,
    );
}

/// Checks that find nothing keep no job records: the instance keeps the
/// last one's summary, and the table does not grow with every check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_items_of_steady_state_polls_all_expire() {
    if endpoints().is_none() {
        return;
    }
    const CHECKS: usize = 5;
    let counter = vergence_e2e::wire::RequestCounter::default();
    let (mut h, worker, _dir) = steadily_checked(&counter, "1s", None).await;
    let before = h.job_items().await.len();
    let mut last = None;
    for _ in 0..CHECKS {
        check_once(&mut h, &worker, &counter).await;
        let instance = the_converged_instance(&h).await;
        let fetch = instance
            .state
            .last_jobs
            .iter()
            .find(|job| job.kind == JobKind::Fetch)
            .cloned()
            .unwrap();
        assert_ne!(
            Some(&fetch.job_id),
            last.as_ref(),
            "each check is summarised"
        );
        last = Some(fetch.job_id);
    }
    let items = h.job_items().await;
    println!(
        "BENCH serverless_job_rows polls={CHECKS} job_items={} new_job_items={}",
        items.len(),
        items.len() - before
    );
    assert_eq!(
        items.len(),
        before,
        "no job item per check that found nothing"
    );
}

/// A cheaper check does not hide drift: the check that finds it records
/// its fetch as every job is recorded, and the drift is applied away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_check_that_finds_drift_applies_it_away() {
    if endpoints().is_none() {
        return;
    }
    let counter = vergence_e2e::wire::RequestCounter::default();
    let (mut h, worker, dir) = steadily_checked(&counter, "1s", None).await;
    check_once(&mut h, &worker, &counter).await;
    let jobs_before = h.job_items().await.len();
    std::fs::write(dir.path().join("drift"), "").unwrap();
    check_once(&mut h, &worker, &counter).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while dir.path().join("drift").exists()
        || h.instances().await[0].state.status != Status::Converged
    {
        assert!(Instant::now() < deadline, "the drift was not applied away");
        let event = h.receive(Duration::from_secs(2)).await;
        if !event.records.is_empty() {
            h.deliver(&worker, event).await;
        }
    }
    let applied = std::fs::read_to_string(dir.path().join("applied")).unwrap();
    // The first fetch found nothing to apply; the drift is applied once.
    assert_eq!(
        applied.lines().count(),
        1,
        "applied for the drift: {applied}"
    );
    assert!(
        h.job_items().await.len() >= jobs_before + 2,
        "the fetch that found the drift and the apply are recorded"
    );
    let events = h.events().await;
    assert!(
        events.iter().any(|e| matches!(
            e.kind,
            EventKind::JobFinished {
                job: JobKind::Fetch,
                ..
            }
        )),
        "the drift is on record: {events:#?}"
    );
}

/// SQS delivers a message at least once: a check delivered twice runs its
/// fetch twice at most, and only one chain of checks goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_delivered_twice_goes_on_once() {
    if endpoints().is_none() {
        return;
    }
    let counter = vergence_e2e::wire::RequestCounter::default();
    let (mut h, worker, _dir) = steadily_checked(&counter, "1s", None).await;
    check_once(&mut h, &worker, &counter).await;
    let event = h.receive(Duration::from_secs(5)).await;
    assert_eq!(event.records.len(), 1);
    h.deliver(&worker, event.clone()).await;
    counter.reset();
    h.deliver(&worker, event).await;
    let duplicate = counter.snapshot();
    assert_eq!(
        duplicate.get("SQS.SendMessageBatch"),
        None,
        "the duplicate sends no second next check: {duplicate:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let next = h.receive(Duration::from_secs(3)).await;
    assert_eq!(next.records.len(), 1, "one chain of checks");
}

/// A message naming several instances is delivered again whole when one
/// of its steps fails (or as SQS's duplicate): the steps that went through
/// find nothing due the second time, write nothing and send nothing, and
/// each instance's chain of checks goes on once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_several_checks_delivered_again_goes_on_once_per_instance() {
    if endpoints().is_none() {
        return;
    }
    const SERVICES: usize = 3;
    let counter = vergence_e2e::wire::RequestCounter::default();
    let (mut h, worker, _dir) =
        steadily_checked_services(&counter, "1s", None, &["web", "shop"]).await;
    // Until the three next checks share one message (a batch's do).
    let deadline = Instant::now() + Duration::from_secs(30);
    let shared = loop {
        assert!(
            Instant::now() < deadline,
            "the next checks never shared a message"
        );
        let event = h.receive(Duration::from_secs(2)).await;
        if event.records.len() == 1 && instances_named(&event) == SERVICES {
            break event;
        }
        h.deliver(&worker, event).await;
    };
    tokio::time::sleep(Duration::from_millis(1100)).await;
    counter.reset();
    let first = h.deliver(&worker, shared.clone()).await;
    assert!(first.batch_item_failures.is_empty());
    let checked = counter.snapshot();
    assert_eq!(
        checked.get("DynamoDB.PutItem"),
        Some(&SERVICES),
        "{checked:?}"
    );
    counter.reset();
    let again = h.deliver(&worker, shared).await;
    assert!(again.batch_item_failures.is_empty());
    let repeated = counter.snapshot();
    assert_eq!(
        repeated.get("DynamoDB.Query"),
        Some(&SERVICES),
        "each step reads its instance: {repeated:?}"
    );
    assert_eq!(
        (
            repeated.get("DynamoDB.PutItem"),
            repeated.get("SQS.SendMessageBatch")
        ),
        (None, None),
        "and finds its check done: nothing written, nothing sent: {repeated:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut next = 0;
    let mut received = h.receive(Duration::from_secs(3)).await;
    while !received.records.is_empty() {
        next += instances_named(&received);
        received = h.receive(Duration::from_secs(1)).await;
    }
    assert_eq!(next, SERVICES, "one next check per instance");
}

/// The due index only watches a chain of checks: it does not bring a
/// carried check back, but finds an instance whose chain broke an hour
/// later, and that check starts the chain again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_chain_of_checks_is_found_by_the_scheduler() {
    if endpoints().is_none() {
        return;
    }
    let counter = vergence_e2e::wire::RequestCounter::default();
    let clock = Arc::new(ManualClock::new(jiff::Timestamp::now()));
    let (mut h, worker, _dir) = steadily_checked(&counter, "5m", Some(clock.clone())).await;
    // The delayed message of the next check is lost.
    h.sqs
        .purge_queue()
        .queue_url(&h.queue_url)
        .send()
        .await
        .unwrap();
    clock.advance(jiff::SignedDuration::from_secs(5 * 60 + 1));
    assert_eq!(
        h.schedule().await,
        0,
        "the check is the queue's, not the index's"
    );
    clock.advance(jiff::SignedDuration::from_hours(1));
    counter.reset();
    assert_eq!(h.schedule().await, 1, "the watchdog finds it");
    let scheduler = counter.snapshot();
    bench("serverless_scheduler_one_due", &scheduler);
    assert_counts("the scheduler", &scheduler, SCHEDULER_ONE_DUE);
    let before = the_converged_instance(&h).await;
    counter.reset();
    assert_eq!(h.deliver_until_idle(&worker).await, 1);
    let steps = counter.snapshot();
    let spent = h.take_spent();
    bench_cost(
        "cost_rearm",
        &steps,
        counter.capacity(),
        spent.worker,
        spent.worker_invocations,
    );
    // The whole instance is written again, with the watchdog moved on.
    assert_counts(
        "a check that moves the watchdog",
        &steps,
        &[
            ("DynamoDB.PutItem", 1),
            ("DynamoDB.Query", 1),
            ("SQS.SendMessageBatch", 1),
        ],
    );
    let after = the_converged_instance(&h).await;
    assert!(after.watchdog_at > before.watchdog_at, "{after:?}");
    assert!(after.revision > before.revision);
}

/// The next checks of one batch's steps go out together: a batch of quiet
/// checks costs one send, not one per check (docs/cost.md). The batch's
/// instances are stepped at once, so the invocation, which Lambda bills,
/// lasts about as long as one check, not ten: its time is the Lambda
/// column of docs/cost.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_checks_of_one_batch_send_their_next_checks_together() {
    if endpoints().is_none() {
        return;
    }
    // A full batch: the template's `BatchSize`.
    const BATCH: usize = 10;
    let more: Vec<String> = (1..BATCH).map(|n| format!("web{n}")).collect();
    let more: Vec<&str> = more.iter().map(String::as_str).collect();
    let counter = vergence_e2e::wire::RequestCounter::default();
    let (mut h, worker, _dir) = steadily_checked_services(&counter, "1s", None, &more).await;
    // Each instance's next check, gathered into one batch as Lambda would.
    let gather = async |h: &mut Harness| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut batch = h.receive(Duration::from_secs(3)).await;
        while instances_named(&batch) < BATCH {
            assert!(
                Instant::now() < deadline,
                "not every instance has its next check: {} of {BATCH}",
                instances_named(&batch)
            );
            let more = h.receive(Duration::from_secs(2)).await;
            batch.records.extend(more.records);
        }
        // Each is due: the last one sent was sent a second ago at most.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        batch
    };
    // The first round warms what a warm container holds (the compiled
    // config, the SDK's connections); the second is the one measured.
    let batch = gather(&mut h).await;
    assert!(
        h.deliver(&worker, batch)
            .await
            .batch_item_failures
            .is_empty()
    );
    let batch = gather(&mut h).await;
    assert_eq!(
        batch.records.len(),
        1,
        "the next checks of one batch share a message"
    );
    h.take_spent();
    counter.reset();
    let response = h.deliver(&worker, batch).await;
    let spent = h.take_spent();
    assert!(response.batch_item_failures.is_empty());
    let steps = counter.snapshot();
    let sends = steps.get("SQS.SendMessageBatch").copied().unwrap_or(0);
    assert_eq!(
        steps.get("SQS.SendMessageBatch"),
        Some(&1),
        "{BATCH} checks, one send: {steps:?}"
    );
    assert_eq!(
        steps.get("DynamoDB.Query"),
        Some(&BATCH),
        "{BATCH} quiet checks: {steps:?}"
    );
    assert_eq!(
        steps.get("DynamoDB.PutItem"),
        Some(&BATCH),
        "{BATCH} quiet checks: {steps:?}"
    );
    let next = h.receive(Duration::from_secs(3)).await;
    let mut more = instances_named(&next);
    let mut messages = next.records.len();
    while more < BATCH {
        let got = h.receive(Duration::from_secs(2)).await;
        assert!(
            !got.records.is_empty(),
            "every instance's next check was sent: {more} of {BATCH}"
        );
        more += instances_named(&got);
        messages += got.records.len();
    }
    assert_eq!(more, BATCH, "every instance's next check was sent once");
    assert_eq!(messages, 1, "the next checks of one batch share a message");
    // The batch's time (the Lambda column), and the sends and messages its
    // next checks took (the SQS column: Lambda's event source receives
    // and deletes by the message).
    println!(
        "BENCH cost_check_batch checks={BATCH} ms={:.3} invocations={} sends={sends} messages={messages}",
        spent.worker.as_secs_f64() * 1e3,
        spent.worker_invocations
    );
}

/// How many instances the messages of `event` ask to step.
fn instances_named(event: &SqsEvent) -> usize {
    event
        .records
        .iter()
        .map(|r| vergence_e2e::instances_named(r).len())
        .sum()
}
