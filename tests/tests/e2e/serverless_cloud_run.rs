//! The serverless deployment running a custom runtime's jobs on Cloud Run:
//! the worker (DynamoDB Local, moto's SQS and S3) with the real
//! google-cloud-run-v2 and logging clients pointed at the in-repo fake
//! Cloud Run Admin API. The worker only starts executions; results come
//! from later checks of the instance, which poll the execution, its task
//! and Cloud Logging.
//!
//! The fake's executor plays the user's image: a structured fetch prints
//! which version its channel runs; an apply changes it, except the first
//! apply in prod, which fails once (retried by the engine).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use google_cloud_auth::credentials::anonymous;
use jiff::Timestamp;
use serde_json::json;
use vergence_e2e::{Harness, endpoints};
use vergence_fake_cloud_run::{FakeCloudRun, TaskExecutor, TaskOutcome, TaskRun};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::ManualClock;
use vergence_model::{EventKind, JobOutcome, Status};
use vergence_runner_cloud_run::CloudRunClients;

/// What the runtime's image does, by the job it is given.
#[derive(Default)]
struct Image {
    /// The version each channel runs.
    deployed: Mutex<HashMap<String, String>>,
    /// Applies run, by channel.
    applies: Mutex<BTreeMap<String, u32>>,
}

/// The fake's executor, sharing what the image did with the test.
struct Play(Arc<Image>);

#[async_trait]
impl TaskExecutor for Play {
    async fn run(&self, task: &TaskRun) -> TaskOutcome {
        let channel = task.env_var("VERGENCE_RELEASE_CHANNEL").unwrap().to_owned();
        let version = task.env_var("VERGENCE_SERVICE_VERSION").unwrap().to_owned();
        match task.args.first().map(String::as_str) {
            Some("plan") => {
                let versions: Vec<_> = self
                    .0
                    .deployed
                    .lock()
                    .unwrap()
                    .get(&channel)
                    .map(|v| json!({"version": v, "active": true}))
                    .into_iter()
                    .collect();
                task.write_stderr("reading the service");
                task.write_stdout(
                    &json!({"objects": [{"name": "api", "versions": versions, "status": "SUCCEEDED"}]})
                        .to_string(),
                );
                TaskOutcome::Exited(0)
            }
            Some("apply") => {
                let attempt = {
                    let mut applies = self.0.applies.lock().unwrap();
                    let n = applies.entry(channel.clone()).or_default();
                    *n += 1;
                    *n
                };
                if channel == "prod" && attempt == 1 {
                    task.write_stderr("Error: the load balancer is busy");
                    return TaskOutcome::Exited(1);
                }
                self.0.deployed.lock().unwrap().insert(channel, version);
                TaskOutcome::Exited(0)
            }
            other => panic!("unexpected args {other:?}"),
        }
    }
}

fn write_config(dir: &std::path::Path) {
    let files = [
        (
            "application.yaml",
            "application:\n  name: shop\n  releaseChannels:\n    - name: staging\n      runtimes: [{runtime: deployer}]\n    - name: prod\n      runtimes: [{runtime: deployer}]\n      preconditions:\n        - releaseChannelStable: {releaseChannel: staging}\n",
        ),
        (
            "runtimes.yaml",
            "runtime:\n  name: deployer\n  runner:\n    cloudRun: {project: test-project, region: europe-west1}\n  apply:\n    retryPolicy: {baseInterval: 1s, maxInterval: 5s, maxAttempts: 3}\n    taskConfig:\n      program:\n        image: europe-docker.pkg.dev/test-project/tools/deploy:1\n        cmd: [deploy, apply]\n  fetch:\n    mode: structured\n    pollInterval: 2s\n    steadyStatePollInterval: 10m\n    taskConfig:\n      program:\n        image: europe-docker.pkg.dev/test-project/tools/deploy:1\n        cmd: [deploy, plan]\n",
        ),
        (
            "services.yaml",
            "service:\n  name: api\n  runtime: deployer\n",
        ),
    ];
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_run_jobs_started_by_the_worker_converge_staging_then_prod() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let image = Arc::new(Image::default());
    let fake = FakeCloudRun::builder()
        .executor(Play(image.clone()))
        .start()
        .await
        .unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::now()));
    let mut h = Harness::start_with_clock(&dynamodb, &sqs, Some(clock)).await;
    let clients = CloudRunClients::at_endpoint(fake.url(), anonymous::Builder::new().build())
        .await
        .unwrap();
    h.deployment = h.deployment.clone().with_cloud_run(clients);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(std::time::Duration::from_secs(180), async |h, event| {
        let response = h.deliver(&worker, event).await;
        assert!(response.batch_item_failures.is_empty());
    })
    .await;

    let deployed = image.deployed.lock().unwrap().clone();
    assert_eq!(deployed.len(), 2, "{deployed:?}");
    assert_eq!(deployed["staging"], deployed["prod"]);
    // prod's first apply failed and was retried: one failed result, then
    // a good one.
    assert_eq!(image.applies.lock().unwrap()["prod"], 2);
    let events = h.events().await;
    let failed: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::JobFinished {
                outcome: JobOutcome::Exited,
                exit_code: Some(1),
                ..
            } => Some(e.message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].contains("the load balancer is busy"),
        "{failed:?}"
    );
    for record in h.instances().await {
        assert_eq!(record.state.status, Status::Converged);
    }
    // One Cloud Run job for the image and settings, created once.
    assert_eq!(
        fake.count(
            "POST",
            "/v2/projects/test-project/locations/europe-west1/jobs"
        ),
        1
    );
}
