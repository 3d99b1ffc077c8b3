//! The serverless deployment running a custom runtime's jobs as ECS tasks,
//! against DynamoDB Local and moto (ECS, CloudWatch Logs, EventBridge, S3,
//! SQS) with the real SDK clients: the worker only starts tasks; a task's
//! stop comes back as the "ECS Task State Change" event EventBridge puts on
//! the work queue, or, when that event is lost, through the later check.
//!
//! The test plays what the platform and the user's image would do with each
//! task moto starts: the image prints its output (written to the task's
//! awslogs stream) and hands its plan file to the presigned URL it was given
//! (what vergence-wrapper does); the task stops, with the exit code injected
//! at the wire since moto reports none.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ecs::types::DesiredStatus;
use jiff::Timestamp;
use serde_json::{Value, json};
use vergence_aws::testing::unique_name;
use vergence_e2e::{Harness, endpoints};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::{JobStore, ManualClock};
use vergence_model::{EventKind, JobHandle, JobId, JobState, Status};
use vergence_runner_ecs::testing::{Moto, StoppedAs};

/// A two-channel application whose one service runs on ECS: a structured
/// fetch that hands a plan to the apply of the same version.
fn write_config(dir: &std::path::Path, moto: &Moto) {
    let spec = moto.runner_spec();
    let runner = format!(
        "ecs: {{cluster: {}, subnets: [{}], securityGroups: [{}], executionRoleArn: '{}', logGroup: '{}'}}",
        spec.cluster,
        spec.subnets[0],
        spec.security_groups[0],
        spec.execution_role_arn.as_deref().unwrap(),
        spec.log_group,
    );
    let files = [
        (
            "application.yaml",
            "application:\n  name: shop\n  releaseChannels:\n    - name: staging\n      runtimes: [{runtime: deployer}]\n    - name: prod\n      runtimes: [{runtime: deployer}]\n      preconditions:\n        - releaseChannelStable: {releaseChannel: staging}\n".to_owned(),
        ),
        (
            "runtimes.yaml",
            format!(
                "runtime:\n  name: deployer\n  runner:\n    {runner}\n  apply:\n    taskConfig:\n      program:\n        image: registry.example.com/deploy-tools:1.4\n        cmd: [deploy, apply]\n  fetch:\n    mode: structured\n    outputs: [plan]\n    pollInterval: 2s\n    steadyStatePollInterval: 10m\n    taskConfig:\n      program:\n        image: registry.example.com/deploy-tools:1.4\n        cmd: [deploy, plan]\n"
            ),
        ),
        (
            "services.yaml",
            "service:\n  name: api\n  runtime: deployer\n".to_owned(),
        ),
    ];
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
    }
}

/// What runs where: the platform side of the test.
struct Platform {
    moto: Moto,
    http: reqwest::Client,
    /// The version each channel runs, as the apply tasks left it.
    deployed: HashMap<String, String>,
    /// Tasks already played to their end.
    done: HashSet<String>,
    /// Whether a stopped task's event reaches the queue.
    events: EventDelivery,
    /// The events put on the queue, by task.
    sent: Vec<String>,
    queue_url: String,
    sqs: aws_sdk_sqs::Client,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum EventDelivery {
    /// Through EventBridge to the queue, twice (EventBridge delivers at
    /// least once).
    Twice,
    /// Lost.
    Never,
}

impl Platform {
    async fn new(moto: Moto, h: &Harness, events: EventDelivery) -> Self {
        let platform = Self {
            moto,
            http: reqwest::Client::new(),
            deployed: HashMap::new(),
            done: HashSet::new(),
            events,
            sent: Vec::new(),
            queue_url: h.queue_url.clone(),
            sqs: h.sqs.clone(),
        };
        if events == EventDelivery::Twice {
            platform.route_task_events().await;
        }
        platform
    }

    /// The EventBridge rule of template.yaml (EcsTaskStoppedRule), on
    /// moto's default bus, with the work queue as its target.
    async fn route_task_events(&self) {
        let queue_arn = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .unwrap()
            .attributes()
            .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
            .clone();
        let rule = unique_name("vergence-task-stopped");
        let pattern = json!({
            "source": ["aws.ecs"],
            "detail-type": ["ECS Task State Change"],
            "detail": {
                "lastStatus": ["STOPPED"],
                "startedBy": [{"prefix": "fetch-"}, {"prefix": "apply-"}, {"prefix": "getinfo-"}, {"prefix": "protection-"}],
            },
        });
        self.events_call(
            "PutRule",
            json!({"Name": rule, "EventPattern": pattern.to_string()}),
        )
        .await;
        self.events_call(
            "PutTargets",
            json!({"Rule": rule, "Targets": [{"Id": "work-queue", "Arn": queue_arn}]}),
        )
        .await;
    }

    /// One EventBridge call in its JSON protocol (moto checks no
    /// signature, only the service the credential scope names).
    async fn events_call(&self, action: &str, body: Value) -> Value {
        let response = self
            .http
            .post(format!("{}/", self.moto.url))
            .header("X-Amz-Target", format!("AWSEvents.{action}"))
            .header("Content-Type", "application/x-amz-json-1.1")
            .header(
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/events/aws4_request, SignedHeaders=host, Signature=0",
            )
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "{action}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Plays every task that is running to its end: its output, its plan,
    /// its exit code, and (unless lost) its event.
    async fn finish_running_tasks(&mut self) {
        let listed = self
            .moto
            .plain_ecs
            .list_tasks()
            .cluster(&self.moto.cluster)
            .desired_status(DesiredStatus::Running)
            .send()
            .await
            .unwrap();
        for arn in listed.task_arns() {
            if !self.done.insert(arn.clone()) {
                continue;
            }
            self.finish(&JobHandle(arn.clone())).await;
        }
    }

    async fn finish(&mut self, task: &JobHandle) {
        let env = self.moto.task_env(task).await;
        let job = env["VERGENCE_JOB_ID"].clone();
        let channel = env["VERGENCE_RELEASE_CHANNEL"].clone();
        let version = env["VERGENCE_SERVICE_VERSION"].clone();
        let plan = format!("plan: api {version} in {channel}");
        let stdout = if job.starts_with("fetch-") {
            let versions: Vec<Value> = self
                .deployed
                .get(&channel)
                .map(|v| json!({"version": v, "active": true}))
                .into_iter()
                .collect();
            // The image writes its plan; the wrapper hands it over.
            let urls: BTreeMap<String, String> =
                serde_json::from_str(&env["VERGENCE_OUTPUT_URLS"]).unwrap();
            let put = self.http.put(&urls["plan"]).body(plan).send().await;
            assert!(put.unwrap().status().is_success());
            vec![
                "planning…".to_owned(),
                json!({"objects": [{"name": "api", "versions": versions, "status": "SUCCEEDED"}]})
                    .to_string(),
            ]
        } else {
            assert!(job.starts_with("apply-"), "{job}");
            // The apply gets the plan its fetch made, through S3.
            let urls: BTreeMap<String, String> =
                serde_json::from_str(&env["VERGENCE_INPUT_URLS"]).unwrap();
            let handed = self.http.get(&urls["plan"]).send().await.unwrap();
            assert_eq!(handed.text().await.unwrap(), plan);
            self.deployed.insert(channel, version);
            vec!["applied".to_owned()]
        };
        self.moto.write_log_stream(task, &stdout).await;
        self.moto
            .plain_ecs
            .stop_task()
            .cluster(&self.moto.cluster)
            .task(task.as_str())
            .send()
            .await
            .unwrap();
        self.moto.injector.stopped(&job, StoppedAs::exited(0));
        // moto moves a stopping task one state on per DescribeTasks; a
        // real task would get there on its own in a few seconds.
        let mut stopped = self.moto.task(task).await;
        for _ in 0..10 {
            if stopped.last_status() == Some("STOPPED") {
                break;
            }
            stopped = self.moto.task(task).await;
        }
        assert_eq!(stopped.last_status(), Some("STOPPED"));
        if self.events == EventDelivery::Twice {
            let event = json!({
                "Source": "aws.ecs",
                "DetailType": "ECS Task State Change",
                "Resources": [task.as_str()],
                "Detail": json!({
                    "taskArn": task.as_str(),
                    "clusterArn": stopped.cluster_arn(),
                    "lastStatus": "STOPPED",
                    "desiredStatus": "STOPPED",
                    "taskDefinitionArn": stopped.task_definition_arn(),
                    "startedBy": job,
                    "stopCode": "EssentialContainerExited",
                    "containers": [{"name": "job", "exitCode": 0, "lastStatus": "STOPPED"}],
                }).to_string(),
            });
            for _ in 0..2 {
                let put = self
                    .events_call("PutEvents", json!({"Entries": [event.clone()]}))
                    .await;
                assert_eq!(put["FailedEntryCount"], 0, "{put}");
            }
            self.sent.push(task.as_str().to_owned());
        }
    }

    /// Every task started, by the job that started it.
    async fn tasks_by_job(&self) -> BTreeMap<String, usize> {
        let mut by_job = BTreeMap::new();
        for status in [DesiredStatus::Running, DesiredStatus::Stopped] {
            let listed = self
                .moto
                .plain_ecs
                .list_tasks()
                .cluster(&self.moto.cluster)
                .desired_status(status)
                .send()
                .await
                .unwrap();
            for arn in listed.task_arns() {
                let task = self.moto.task(&JobHandle(arn.clone())).await;
                *by_job
                    .entry(task.started_by().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        by_job
    }
}

/// How many results were recorded for each job.
async fn results_by_job(h: &Harness) -> BTreeMap<JobId, usize> {
    let events = h.events().await;
    let mut by_job = BTreeMap::new();
    for event in events {
        if let EventKind::JobFinished { job_id, .. } = event.kind {
            *by_job.entry(job_id).or_default() += 1;
        }
    }
    by_job
}

/// The serverless deployment over DynamoDB Local and moto's ECS, the
/// config applied, a worker, and the platform that finishes tasks and
/// sends their events as `delivery` says; `None` without the services.
async fn on_ecs(
    clock: Option<Arc<ManualClock>>,
    delivery: EventDelivery,
) -> Option<(Harness, Worker, Arc<tokio::sync::Mutex<Platform>>)> {
    let (dynamodb, sqs) = endpoints()?;
    let moto = vergence_e2e::ecs_testbed(&sqs).await;
    let h = Harness::start_on_ecs(&dynamodb, &sqs, clock, moto.ecs.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &moto);
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    let platform = Platform::new(moto, &h, delivery).await;
    Some((h, worker, Arc::new(tokio::sync::Mutex::new(platform))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecs_jobs_started_by_the_worker_converge_through_task_stopped_events() {
    let Some((mut h, worker, platform)) = on_ecs(None, EventDelivery::Twice).await else {
        return;
    };
    let mut slowest = Duration::ZERO;
    h.converge(Duration::from_secs(180), async |h, event| {
        let started = Instant::now();
        h.deliver(&worker, event.clone()).await;
        slowest = slowest.max(started.elapsed());
        // The worker started tasks and returned: no job it dispatched
        // has a result yet, whatever ran in this invocation.
        assert_no_finished_in_flight_job(h).await;
        // Tasks run and stop before anything looks at them again (moto
        // moves a task on when it is described).
        platform.lock().await.finish_running_tasks().await;
        // A redelivered message (the visibility timeout ran out) steps
        // the same instances again.
        h.deliver(&worker, event).await;
        platform.lock().await.finish_running_tasks().await;
    })
    .await;
    println!("slowest worker invocation: {slowest:?}");

    let platform = platform.lock().await;
    assert!(!platform.sent.is_empty(), "no task stopped");
    for (job, tasks) in platform.tasks_by_job().await {
        assert_eq!(tasks, 1, "job {job} started {tasks} tasks");
    }
    let results = results_by_job(&h).await;
    assert!(!results.is_empty());
    for (job, n) in &results {
        assert_eq!(*n, 1, "job {job} has {n} results recorded");
    }
    assert_eq!(platform.deployed.len(), 2, "{:?}", platform.deployed);
    for record in h.instances().await {
        assert_eq!(record.state.status, Status::Converged);
    }
}

/// Every job in flight has no result: the worker does not wait for tasks.
async fn assert_no_finished_in_flight_job(h: &Harness) {
    for record in h.instances().await {
        let Some(flight) = &record.state.in_flight else {
            continue;
        };
        let job = h
            .deployment
            .store
            .get_job(&flight.job_id)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(job.state, JobState::Dispatched { .. }),
            "{}: {:?}",
            job.id,
            job.state
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_task_stopped_event_only_delays_the_result() {
    let clock = Arc::new(ManualClock::new(Timestamp::now()));
    let Some((mut h, worker, platform)) = on_ecs(Some(clock), EventDelivery::Never).await else {
        return;
    };
    h.converge(Duration::from_secs(180), async |h, event| {
        h.deliver(&worker, event).await;
        platform.lock().await.finish_running_tasks().await;
    })
    .await;
    let platform = platform.lock().await;
    assert!(platform.sent.is_empty());
    assert_eq!(platform.deployed.len(), 2, "{:?}", platform.deployed);
    for (job, n) in results_by_job(&h).await {
        assert_eq!(n, 1, "job {job} has {n} results recorded");
    }
}
