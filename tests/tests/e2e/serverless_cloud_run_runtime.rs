//! The first-class Cloud Run runtime in the serverless deployment, against
//! DynamoDB Local, moto's SQS and the fake Cloud Run Admin API with the
//! real clients: the worker creates and updates the Cloud Run service
//! itself, and the engine's own rules do the rest — a release converges
//! once its revision is ready, a revision deployed by hand is drift the
//! engine heals, and a release whose revision fails to start fails its
//! attempts and is rolled back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_auth::credentials::anonymous;
use jiff::Timestamp;
use serde_json::json;
use vergence_e2e::{Harness, endpoints};
use vergence_fake_cloud_run::FakeCloudRun;
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::ManualClock;
use vergence_model::{EventKind, InstanceRecord, Status};
use vergence_runner_cloud_run::CloudRunClients;

const SERVICE: &str = "projects/shop-prod/locations/europe-west1/services/web-prod";

/// The config; `adopt` is the Cloud Run runtime's setting, if any.
fn write_config(dir: &std::path::Path, adopt: Option<&str>) {
    write_config_with(dir, adopt, None);
}

/// prod rolled out in two steps, 50% held 2 minutes, guarded by a
/// `prometheus` protection on the error ratio at `prometheus`; the service
/// does not roll back by itself.
fn write_rollout_config(dir: &std::path::Path, prometheus: &str) {
    write_config_with(dir, None, Some(prometheus));
}

fn write_config_with(dir: &std::path::Path, adopt: Option<&str>, prometheus: Option<&str>) {
    let adopt = adopt.map(|a| format!(", adopt: {a}")).unwrap_or_default();
    let runtime = format!(
        "runtime:\n  name: run\n  cloudRun: {{project: shop-prod, region: europe-west1, pollInterval: 20s, steadyStatePollInterval: 1m{adopt}}}\n  convergenceGracePeriod: 1m\n"
    );
    let files = [
        (
            "application.yaml",
            "application:\n  name: shop\n  releaseChannels:\n    - {name: prod, runtimes: [{runtime: run}]}\n",
        ),
        (
            "web.yaml",
            "service:\n  name: web\n  cloudRun: {service: run/web.yaml}\n  parameters: [{name: image, dockerImage: {}, required: true}]\n",
        ),
        (
            "run/web.yaml",
            "name: web-{{.Builtins.ReleaseChannel.Name}}\ntemplate:\n  containers:\n    - image: \"{{.Params.image}}\"\n",
        ),
    ];
    std::fs::write(dir.join("runtime.yaml"), runtime).unwrap();
    std::fs::create_dir_all(dir.join("run")).unwrap();
    if let Some(url) = prometheus {
        let application = "application:\n  name: shop\n  releaseChannels:\n    - name: prod\n      runtimes: [{runtime: run}]\n      rollout: {steps: [50, 100], bake: 2m}\n      protections:\n        - ref: {name: error-ratio}\n          lifecycle: [{deployment: {failureBehavior: BLOCK}}]\n";
        let protection = format!(
            "protection:\n  name: error-ratio\n  prometheus:\n    url: {url}\n    query: 'shop_error_ratio{{service=\"web\"}}'\n    threshold: {{max: 0.05}}\n  pollInterval: 20s\n"
        );
        let service = "service:\n  name: web\n  cloudRun: {service: run/web.yaml}\n  autoRollback: {disabled: true}\n  parameters: [{name: image, dockerImage: {}, required: true}]\n";
        for (file, content) in [
            ("web.yaml", service),
            ("application.yaml", application),
            ("protection.yaml", &protection),
        ] {
            std::fs::write(dir.join(file), content).unwrap();
        }
        std::fs::write(
            dir.join("run/web.yaml"),
            "name: web-{{.Builtins.ReleaseChannel.Name}}\ntemplate:\n  containers:\n    - image: \"{{.Params.image}}\"\n",
        )
        .unwrap();
        return;
    }
    for (file, content) in files {
        std::fs::write(dir.join(file), content).unwrap();
    }
}

struct Bed {
    h: Harness,
    worker: Worker,
    fake: FakeCloudRun,
    clock: Arc<ManualClock>,
}

impl Bed {
    async fn release(&self, version: &str) {
        let params = BTreeMap::from([(
            "image".to_owned(),
            format!("europe-docker.pkg.dev/shop/web:{version}"),
        )]);
        self.h
            .control()
            .push_release(
                None,
                &"web".parse().unwrap(),
                &version.parse().unwrap(),
                &params,
                "ci",
            )
            .await
            .unwrap();
    }

    async fn step(&mut self) {
        let event = self.h.receive(Duration::from_secs(1)).await;
        if event.records.is_empty() {
            self.clock.advance(jiff::SignedDuration::from_secs(20));
            self.h.schedule().await;
        } else {
            self.h.deliver(&self.worker, event).await;
        }
    }

    async fn run_until(&mut self, what: &str, done: impl Fn(&InstanceRecord) -> bool) {
        let start = Instant::now();
        loop {
            let record = self.h.instances().await.remove(0);
            if done(&record) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "{what}: still {} ({})",
                record.state.status,
                record.state.reason
            );
            self.step().await;
        }
    }

    async fn converged_on(&mut self, version: &str) {
        let version = version.to_owned();
        self.run_until(&format!("converged on {version}"), |r| {
            r.state.status == Status::Converged
                && r.state.current_version.as_ref().map(ToString::to_string)
                    == Some(version.clone())
        })
        .await;
    }

    fn image(&self) -> String {
        self.fake.service(SERVICE).unwrap()["template"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

/// The deployment on the fake Cloud Run API, with the config applied.
async fn bed(adopt: Option<&str>, fake: FakeCloudRun) -> Option<Bed> {
    bed_with(fake, |dir| write_config(dir, adopt)).await
}

async fn bed_with(fake: FakeCloudRun, config: impl FnOnce(&std::path::Path)) -> Option<Bed> {
    let (dynamodb, sqs) = endpoints()?;
    let clock = Arc::new(ManualClock::new(Timestamp::now()));
    let mut h = Harness::start_with_clock(&dynamodb, &sqs, Some(clock.clone())).await;
    let clients = CloudRunClients::at_endpoint(fake.url(), anonymous::Builder::new().build())
        .await
        .unwrap();
    h.deployment = h.deployment.clone().with_cloud_run(clients);
    let dir = tempfile::tempdir().unwrap();
    config(dir.path());
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    Some(Bed {
        h,
        worker,
        fake,
        clock,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_rolls_out_heals_drift_and_rolls_back_a_revision_that_fails() {
    let fake = FakeCloudRun::start().await.unwrap();
    let Some(mut bed) = bed(None, fake).await else {
        return;
    };

    bed.release("v1").await;
    bed.converged_on("v1").await;
    bed.release("v2").await;
    bed.converged_on("v2").await;
    assert_eq!(bed.image(), "europe-docker.pkg.dev/shop/web:v2");

    // Someone deploys another image by hand: a new revision, not Vergence's.
    bed.fake
        .edit_service_out_of_band(SERVICE, |spec| {
            spec["template"]["containers"][0]["image"] =
                json!("europe-docker.pkg.dev/shop/web:hotfix");
            if let Some(template) = spec["template"].as_object_mut() {
                template.remove("revision");
            }
        })
        .unwrap();
    let start = Instant::now();
    while bed.image() != "europe-docker.pkg.dev/shop/web:v2" {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "drift was not healed"
        );
        bed.step().await;
    }
    let events = bed.h.events().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::DriftDetected { .. })
                && e.message.contains("not made by Vergence")),
        "{:#?}",
        events.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    bed.converged_on("v2").await;

    // v3's revision fails to start: the attempts fail, then the instance
    // rolls back to v2.
    bed.fake.fail_next_revision(
        SERVICE,
        "The user-provided container failed to start and listen on the port",
    );
    bed.release("v3").await;
    bed.run_until("rolled back", |r| r.state.status == Status::RolledBack)
        .await;
    let events = bed.h.events().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::RolledBack { .. })),
        "{:#?}",
        events.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    assert_eq!(bed.image(), "europe-docker.pkg.dev/shop/web:v2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_adopt_apply_an_existing_service_that_differs_is_applied_without_approval() {
    let fake = FakeCloudRun::start().await.unwrap();
    // Someone else's service: another image, no Vergence annotations.
    let url = format!(
        "{}/v2/projects/shop-prod/locations/europe-west1/services?serviceId=web-prod",
        fake.url()
    );
    let created = reqwest::Client::new()
        .post(url)
        .json(
            &json!({"template": {"containers": [{"image": "europe-docker.pkg.dev/shop/web:v0"}]}}),
        )
        .send()
        .await
        .unwrap();
    assert!(
        created.status().is_success(),
        "{}",
        created.text().await.unwrap()
    );
    let Some(mut bed) = bed(Some("apply"), fake).await else {
        return;
    };
    bed.fake.reset_requests();

    bed.release("v1").await;
    bed.converged_on("v1").await;
    assert_eq!(bed.image(), "europe-docker.pkg.dev/shop/web:v1");
    assert_eq!(
        bed.fake.count("PATCH", &format!("/v2/{SERVICE}")),
        1,
        "one apply: the update"
    );
    let events = bed.h.events().await;
    assert!(
        !events.iter().any(|e| matches!(
            e.kind,
            EventKind::StatusChanged {
                to: Status::WaitingApproval,
                ..
            }
        ) || matches!(e.kind, EventKind::Adopted { .. })),
        "{:#?}",
        events.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
}

impl Bed {
    /// The service's traffic as `(revision, percent, tag)`, by the
    /// version each revision was made for.
    fn traffic(&self) -> Vec<(String, i64, String)> {
        let service = self.fake.service(SERVICE).unwrap();
        let mut routes: Vec<(String, i64, String)> = service["trafficStatuses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let revision = t["revision"].as_str().unwrap_or_default();
                let name = format!("{SERVICE}/revisions/{revision}");
                let version = self
                    .fake
                    .revision(&name)
                    .and_then(|r| {
                        r["annotations"]["vergence.dev/version"]
                            .as_str()
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| format!("unknown revision {revision}"));
                (
                    version,
                    t["percent"].as_i64().unwrap_or(0),
                    t["tag"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        routes.sort();
        routes
    }

    async fn reason(&self) -> String {
        self.h.instances().await.remove(0).state.reason
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_splits_the_traffic_in_steps_and_a_prometheus_check_sends_it_back() {
    let exporter = vergence_testkit::prometheus::Exporter::start(0.0);
    let Some(prometheus) = vergence_testkit::prometheus::Prometheus::start(&exporter) else {
        return;
    };
    exporter.wait_scraped();
    let fake = FakeCloudRun::start().await.unwrap();
    let url = prometheus.url.clone();
    let Some(mut bed) = bed_with(fake, |dir| write_rollout_config(dir, &url)).await else {
        return;
    };

    // A first deployment has nothing to split with: all of it at once.
    bed.release("v1").await;
    bed.converged_on("v1").await;
    assert_eq!(bed.traffic(), [("v1".to_owned(), 100, String::new())]);

    // v2 takes half, tagged, and holds it for the bake while the error
    // ratio stays low; then all of it.
    bed.release("v2").await;
    bed.run_until("v2 at 50%", |r| r.state.reason.starts_with("v2 at 50% for"))
        .await;
    assert_eq!(
        bed.traffic(),
        [
            ("v1".to_owned(), 50, "stable".to_owned()),
            ("v2".to_owned(), 50, "canary".to_owned())
        ]
    );
    bed.converged_on("v2").await;
    assert_eq!(bed.traffic(), [("v2".to_owned(), 100, String::new())]);
    let steps: Vec<String> = bed
        .h
        .events()
        .await
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::RolloutStep { .. }))
        .map(|e| e.message)
        .collect();
    assert_eq!(
        steps,
        ["v2 has 50% of the traffic", "v2 has 100% of the traffic"]
    );

    // v3's errors rise mid-bake: the step fails, the traffic goes back to
    // v2, and v3 stays FAILED (no automatic rollback here).
    bed.release("v3").await;
    bed.run_until("v3 at 50%", |r| r.state.reason.starts_with("v3 at 50% for"))
        .await;
    exporter.set(0.5);
    exporter.wait_scraped();
    bed.run_until("v3 failed and its traffic went back", |r| {
        r.state.status == Status::Failed && r.state.reason.contains("was sent back")
    })
    .await;
    // Cloud Run finishes the change on its own; the fake, when read.
    for _ in 0..5 {
        let read = reqwest::get(format!("{}/v2/{SERVICE}", bed.fake.url()))
            .await
            .unwrap();
        assert!(read.status().is_success());
    }
    let reason = bed.reason().await;
    assert!(
        reason.starts_with("the rollout of v3 stopped at 50% of the traffic: deployment check error-ratio of v3 failed"),
        "{reason}"
    );
    assert_eq!(
        bed.traffic(),
        [
            ("v2".to_owned(), 100, "stable".to_owned()),
            ("v3".to_owned(), 0, "canary".to_owned())
        ]
    );
}
