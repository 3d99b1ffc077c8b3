//! Support for the end-to-end tests in `tests/`: a serverless deployment
//! over the stand-ins (DynamoDB Local, moto's SQS) driven the way AWS drives
//! it — the scheduler gets an EventBridge event, the worker gets SQS event
//! payloads built from messages received from the queue — and copies of the
//! quickstart to converge. With [`Harness::start_with_faults`] the
//! deployment's clients talk to the stand-ins through fault-injecting
//! proxies ([`faults`]), while the harness's own view (status, events, the
//! event source mapping's receive and delete) goes to them directly.

// Test support: a failed setup should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod faults;
pub mod lambda;
pub mod stack;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use faults::{FaultPlan, FaultProxy, FaultReport};
use vergence_aws::DynamoStore;
use vergence_aws::testing::{
    DYNAMODB_URL, SQS_URL, dynamodb_client, endpoint, fresh_bucket, sdk_config, unique_name,
};
use vergence_engine::control::Control;
use vergence_lambda::worker::Worker;
use vergence_lambda::{AwsClients, Deployment, DeploymentConfig, scheduler};
use vergence_model::ports::{Clock, EventStore, InstanceFilter, ManualClock, SystemClock};
use vergence_model::{
    Event, EventFilter, EventKind, InstanceKey, InstanceRecord, JobId, JobKind, JobOutcome, Status,
};

/// DynamoDB Local's and moto's SQS endpoints from the environment
/// (`scripts/services.sh`); `None` lets a test skip where they are not
/// running (CI sets `VERGENCE_REQUIRE_SERVICES`, which makes that fail).
pub fn endpoints() -> Option<(String, String)> {
    Some((endpoint(DYNAMODB_URL)?, endpoint(SQS_URL)?))
}

/// The functions' sample events (also used by `cargo lambda invoke`).
/// The instances a work message asks to step (none for any other body,
/// such as an ECS task-state event): a message names up to 10 due together.
pub fn instances_named(record: &aws_lambda_events::event::sqs::SqsMessage) -> Vec<InstanceKey> {
    vergence_aws::WorkMessage::parse(record.body.as_deref().unwrap_or_default())
        .map(|m| m.instances().cloned().collect())
        .unwrap_or_default()
}

pub fn event_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../functions/events")
        .join(name)
}

/// The ECS testbed of `vergence_runner_ecs::testing` in the moto at
/// `url`, with jobs' files in a fresh bucket through the S3 artifact store.
pub async fn ecs_testbed(url: &str) -> vergence_runner_ecs::testing::Moto {
    let (s3, bucket) = fresh_bucket(url).await;
    let artifacts = Arc::new(vergence_aws::S3ArtifactStore::new(s3, bucket, "artifacts/"));
    vergence_runner_ecs::testing::Moto::new(url, sdk_config(url).await, artifacts).await
}

/// A copy of examples/quickstart without state or deployed files.
pub fn quickstart_copy() -> tempfile::TempDir {
    vergence_testkit::example_copy("quickstart")
}

/// One serverless deployment over fresh stand-in resources.
#[allow(missing_debug_implementations)] // holds SDK clients
pub struct Harness {
    pub deployment: Deployment,
    pub sqs: aws_sdk_sqs::Client,
    pub queue_url: String,
    /// Messages handed to a worker, by SQS message id.
    pub deliveries: HashMap<String, usize>,
    /// Deliveries the worker reported as failed, by SQS message id.
    pub failed_deliveries: HashMap<String, usize>,
    pub manual: Option<Arc<ManualClock>>,
    /// The proxies in front of DynamoDB Local and moto, when started with
    /// faults.
    pub faults: Option<FaultInjection>,
    /// With faults: the dead-letter queue behind the work queue.
    pub dead_letter_queue_url: Option<String>,
    /// The same table and queue over direct clients: what the test reads
    /// to judge the outcome is not itself under faults.
    observer: Deployment,
    /// The observer's DynamoDB client, for reading items as stored.
    dynamodb: aws_sdk_dynamodb::Client,
    /// What the functions spent, for the cost table (docs/cost.md).
    pub spent: Arc<std::sync::Mutex<Spent>>,
    /// With `count_worker_logs`: where the worker's log lines go.
    worker_logs: Option<tracing::Dispatch>,
}

/// Wall time inside the worker's and the scheduler's handlers (what Lambda
/// bills as duration, less its own rounding up to the millisecond), and the
/// bytes the worker logged (what CloudWatch Logs ingests).
#[derive(Clone, Copy, Debug, Default)]
pub struct Spent {
    pub worker: Duration,
    pub worker_invocations: usize,
    pub scheduler: Duration,
    pub scheduler_invocations: usize,
    pub worker_log_bytes: usize,
}

/// Counts the bytes written to it.
#[derive(Clone)]
struct ByteCounter(Arc<std::sync::Mutex<Spent>>);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().worker_log_bytes += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fault-injecting proxies in front of both stand-ins.
#[allow(missing_debug_implementations)] // holds hyper clients
pub struct FaultInjection {
    pub dynamodb: FaultProxy,
    /// moto: SQS and S3.
    pub moto: FaultProxy,
}

impl FaultInjection {
    /// Both proxies' figures together.
    pub fn report(&self) -> FaultReport {
        self.dynamodb.report().merge(&self.moto.report())
    }
}

/// A work message is moved to the dead-letter queue after this many
/// receives, as `template.yaml` configures the real queue (and as
/// `WorkerConfig::default` expects).
pub const MAX_RECEIVE_COUNT: u32 = 5;

impl Harness {
    pub async fn start(dynamodb_url: &str, sqs_url: &str) -> Self {
        Self::start_with_clock(dynamodb_url, sqs_url, None).await
    }

    /// With a manual clock, `converge` moves time forward whenever the
    /// queue is empty, so timers far ahead come due without waiting.
    pub async fn start_with_clock(
        dynamodb_url: &str,
        sqs_url: &str,
        manual: Option<Arc<ManualClock>>,
    ) -> Self {
        Self::start_with(dynamodb_url, sqs_url, manual, None).await
    }

    /// With every AWS request counted by `counter`.
    pub async fn start_with(
        dynamodb_url: &str,
        sqs_url: &str,
        manual: Option<Arc<ManualClock>>,
        counter: Option<wire::RequestCounter>,
    ) -> Self {
        Self::build(dynamodb_url, sqs_url, None, manual, counter, None, None).await
    }

    /// With every AWS request counted by `counter`, and the work queue on
    /// another SQS than moto's (`queue_sqs_url`; S3 and the rest stay on
    /// moto at `sqs_url`): the scale test's, whose queue outgrows moto.
    pub async fn start_with_queue_on(
        dynamodb_url: &str,
        sqs_url: &str,
        queue_sqs_url: &str,
        counter: wire::RequestCounter,
    ) -> Self {
        Self::build(
            dynamodb_url,
            sqs_url,
            Some(queue_sqs_url),
            None,
            Some(counter),
            None,
            None,
        )
        .await
    }

    /// Whose deployment (scheduler, worker, API) reaches DynamoDB, SQS and
    /// S3 through proxies injecting `plan`'s faults, with the SDK's standard
    /// retries as in production. The work queue gets a dead-letter queue;
    /// messages a worker reports as failed are made visible again at once
    /// (SQS would after the visibility timeout).
    pub async fn start_with_faults(
        dynamodb_url: &str,
        sqs_url: &str,
        manual: Option<Arc<ManualClock>>,
        plan: FaultPlan,
    ) -> Self {
        let faults = FaultInjection {
            dynamodb: FaultProxy::start(dynamodb_url, plan.clone()).await.unwrap(),
            moto: FaultProxy::start(
                sqs_url,
                FaultPlan {
                    seed: plan.seed.rotate_left(17),
                    ..plan
                },
            )
            .await
            .unwrap(),
        };
        Self::build(
            dynamodb_url,
            sqs_url,
            None,
            manual,
            None,
            None,
            Some(faults),
        )
        .await
    }

    /// Whose ECS jobs go through `ecs` (a client with fault injection).
    pub async fn start_on_ecs(
        dynamodb_url: &str,
        sqs_url: &str,
        manual: Option<Arc<ManualClock>>,
        ecs: aws_sdk_ecs::Client,
    ) -> Self {
        Self::build(dynamodb_url, sqs_url, None, manual, None, Some(ecs), None).await
    }

    async fn build(
        dynamodb_url: &str,
        sqs_url: &str,
        queue_sqs_url: Option<&str>,
        manual: Option<Arc<ManualClock>>,
        counter: Option<wire::RequestCounter>,
        ecs: Option<aws_sdk_ecs::Client>,
        faults: Option<FaultInjection>,
    ) -> Self {
        let dynamodb = dynamodb_client(dynamodb_url).await;
        let table = unique_name("vergence-e2e");
        DynamoStore::create_table(&dynamodb, &table).await.unwrap();
        let sqs = aws_sdk_sqs::Client::new(&sdk_config(queue_sqs_url.unwrap_or(sqs_url)).await);
        let queue_url = create_queue(&sqs, "vergence-work").await;
        let clock: Arc<dyn Clock> = match &manual {
            Some(manual) => manual.clone(),
            None => Arc::new(SystemClock),
        };
        let dead_letter_queue_url = match &faults {
            Some(_) => Some(add_dead_letter_queue(&sqs, &queue_url).await),
            None => None,
        };
        let (s3, artifact_bucket) = fresh_bucket(sqs_url).await;
        let direct = AwsClients {
            dynamodb,
            sqs: sqs.clone(),
            s3,
            ecs: match ecs {
                Some(ecs) => ecs,
                None => aws_sdk_ecs::Client::new(&sdk_config(sqs_url).await),
            },
            logs: aws_sdk_cloudwatchlogs::Client::new(&sdk_config(sqs_url).await),
            lambda: aws_sdk_lambda::Client::new(&sdk_config(sqs_url).await),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&sdk_config(sqs_url).await),
        };
        let config = DeploymentConfig {
            table,
            queue_url: queue_url.clone(),
            artifact_bucket,
            job_timeout_margin: Duration::from_secs(5),
        };
        let observer = Deployment::with_clock(direct.clone(), config.clone(), clock.clone());
        let direct_dynamodb = direct.dynamodb.clone();
        let deployment = match (&faults, counter) {
            (Some(faults), _) => Deployment::with_clock(
                proxied_clients(&faults.dynamodb.url(), &faults.moto.url(), direct).await,
                config,
                clock,
            ),
            // Only the deployment's own requests are counted: the harness's
            // status reads and its receive/delete calls are not what a
            // deployment pays for.
            (None, Some(counter)) => {
                Deployment::with_clock(counted_clients(direct, counter), config, clock)
            }
            (None, None) => observer.clone(),
        };
        Self {
            deployment,
            sqs,
            queue_url,
            deliveries: HashMap::new(),
            failed_deliveries: HashMap::new(),
            manual,
            faults,
            dead_letter_queue_url,
            observer,
            dynamodb: direct_dynamodb,
            spent: Arc::default(),
            worker_logs: None,
        }
    }

    /// From now on the worker's log lines, as the functions write them
    /// (`json_logs` at their default level, `info`, or `RUST_LOG`), are
    /// counted in `spent` instead of shown. Lines of tasks the worker
    /// spawns are not seen (an inline job's are logged by the step).
    pub fn count_worker_logs(&mut self) {
        let counter = ByteCounter(self.spent.clone());
        let subscriber = vergence_lambda::json_logs(move || counter.clone(), "info").finish();
        self.worker_logs = Some(tracing::Dispatch::new(subscriber));
    }

    /// What the functions spent since the last call.
    pub fn take_spent(&self) -> Spent {
        std::mem::take(&mut *self.spent.lock().unwrap())
    }

    pub fn control(&self) -> Control {
        self.deployment.control()
    }

    /// Invokes the scheduler with the sample EventBridge Scheduler event.
    pub async fn schedule(&self) -> usize {
        self.try_schedule().await.unwrap()
    }

    /// The scheduler's invocation, which may fail under faults (EventBridge
    /// Scheduler invokes it again a minute later).
    pub async fn try_schedule(&self) -> Result<usize, String> {
        let raw = std::fs::read_to_string(event_file("schedule.json")).unwrap();
        let event: EventBridgeEvent = serde_json::from_str(&raw).unwrap();
        let started = Instant::now();
        let result = scheduler::handle(&self.deployment, event).await;
        {
            let mut spent = self.spent.lock().unwrap();
            spent.scheduler += started.elapsed();
            spent.scheduler_invocations += 1;
        }
        result.map(|r| r.enqueued).map_err(|e| e.to_string())
    }

    /// Receives up to 10 messages and builds the SQS event Lambda would
    /// deliver for them.
    pub async fn receive(&self, wait: Duration) -> SqsEvent {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait.as_secs() as i32)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let records: Vec<serde_json::Value> = received
            .messages()
            .iter()
            .map(|m| {
                let attributes: serde_json::Map<String, serde_json::Value> = m
                    .attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.as_str().to_owned(), v.clone().into()))
                            .collect()
                    })
                    .unwrap_or_default();
                serde_json::json!({
                    "messageId": m.message_id(),
                    "receiptHandle": m.receipt_handle(),
                    "body": m.body(),
                    "attributes": attributes,
                    "messageAttributes": {},
                    "md5OfBody": m.md5_of_body(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:vergence-work",
                    "awsRegion": "us-east-1"
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
    }

    /// Hands `event` to `worker`, then deletes the messages it did not
    /// report as failed — what Lambda's event source mapping does.
    pub async fn deliver(&mut self, worker: &Worker, event: SqsEvent) -> SqsBatchResponse {
        for record in &event.records {
            *self
                .deliveries
                .entry(record.message_id.clone().unwrap_or_default())
                .or_default() += 1;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let started = Instant::now();
        let response = match &self.worker_logs {
            Some(logs) => {
                use tracing::instrument::WithSubscriber;
                worker
                    .handle(event.clone(), Some(deadline))
                    .with_subscriber(logs.clone())
                    .await
            }
            None => worker.handle(event.clone(), Some(deadline)).await,
        };
        {
            let mut spent = self.spent.lock().unwrap();
            spent.worker += started.elapsed();
            spent.worker_invocations += 1;
        }
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        for record in &event.records {
            let id = record.message_id.as_deref().unwrap_or_default();
            if failed.contains(&id) {
                *self.failed_deliveries.entry(id.to_owned()).or_default() += 1;
                if self.faults.is_some() {
                    self.redeliver_at_once(record).await;
                }
                continue;
            }
            if let Some(handle) = &record.receipt_handle {
                // A duplicate delivery may already have deleted it.
                let _ = self
                    .sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(handle)
                    .send()
                    .await;
            }
        }
        response
    }

    /// A failed message comes back when its visibility timeout runs out;
    /// the test does not wait for that.
    async fn redeliver_at_once(&self, record: &aws_lambda_events::event::sqs::SqsMessage) {
        if let Some(handle) = &record.receipt_handle {
            // Already gone (a duplicate was deleted) is fine.
            let _ = self
                .sqs
                .change_message_visibility()
                .queue_url(&self.queue_url)
                .receipt_handle(handle)
                .visibility_timeout(0)
                .send()
                .await;
        }
    }

    /// Delivers what the queue holds to `worker`, and what its steps enqueue
    /// in turn, until a receive comes back empty; never runs the scheduler,
    /// so what the steps cost is all that happens. Returns the messages
    /// delivered.
    pub async fn deliver_until_idle(&mut self, worker: &Worker) -> usize {
        let mut delivered = 0;
        loop {
            let event = self.receive(Duration::from_secs(1)).await;
            if event.records.is_empty() {
                return delivered;
            }
            delivered += event.records.len();
            let response = self.deliver(worker, event).await;
            assert!(response.batch_item_failures.is_empty(), "a step failed");
        }
    }

    /// Every job item in the table (not the parts a large body spills
    /// into), read past the deployment's clients.
    pub async fn job_items(&self) -> Vec<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
        use aws_sdk_dynamodb::types::AttributeValue;
        let items: Vec<_> = self
            .dynamodb
            .scan()
            .table_name(&self.observer.config.table)
            .filter_expression("begins_with(#pk, :job) AND #sk = :sk")
            .expression_attribute_names("#pk", vergence_aws::dynamo::table::PK)
            .expression_attribute_names("#sk", vergence_aws::dynamo::table::SK)
            .expression_attribute_values(":job", AttributeValue::S("job#".into()))
            .expression_attribute_values(":sk", AttributeValue::S("job".into()))
            .into_paginator()
            .items()
            .send()
            .collect::<Vec<_>>()
            .await;
        items.into_iter().map(Result::unwrap).collect()
    }

    /// Every event recorded, as the store lists them.
    pub async fn events(&self) -> Vec<Event> {
        self.observer
            .store
            .list_events(&EventFilter::default())
            .await
            .unwrap()
    }

    /// The test's own control, over direct clients (not under faults).
    pub fn observer(&self) -> Control {
        self.observer.control()
    }

    /// The store over direct clients (not under faults).
    pub fn observer_store(&self) -> Arc<DynamoStore> {
        self.observer.store.clone()
    }

    pub async fn instances(&self) -> Vec<InstanceRecord> {
        self.observer()
            .status(&InstanceFilter::default())
            .await
            .unwrap()
    }

    /// Runs scheduler and worker until every instance is converged, giving
    /// each received event to `deliver` (which may duplicate or reorder).
    pub async fn converge(
        &mut self,
        timeout: Duration,
        mut deliver: impl AsyncFnMut(&mut Self, SqsEvent),
    ) {
        let start = Instant::now();
        loop {
            let instances = self.instances().await;
            if !instances.is_empty()
                && instances.iter().all(|r| {
                    r.state.status == Status::Converged
                        && r.state.current_version.as_ref() == r.desired.version()
                })
            {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "not converged after {timeout:?}: {:#?}",
                instances
                    .iter()
                    .map(|r| format!("{} {} {}", r.key, r.state.status, r.state.reason))
                    .collect::<Vec<_>>()
            );
            let event = self.receive(Duration::from_secs(1)).await;
            if event.records.is_empty() {
                if let Some(clock) = &self.manual {
                    clock.advance(jiff::SignedDuration::from_secs(20));
                }
                self.schedule().await;
                continue;
            }
            deliver(self, event).await;
        }
    }
}

/// The same clients with every DynamoDB and SQS request counted.
fn counted_clients(direct: AwsClients, counter: wire::RequestCounter) -> AwsClients {
    let dynamodb = direct
        .dynamodb
        .config()
        .to_builder()
        .interceptor(counter.clone())
        .build();
    let sqs = direct
        .sqs
        .config()
        .to_builder()
        .interceptor(counter)
        .build();
    AwsClients {
        dynamodb: aws_sdk_dynamodb::Client::from_conf(dynamodb),
        sqs: aws_sdk_sqs::Client::from_conf(sqs),
        ..direct
    }
}

/// Creates a queue with a fresh name starting with `prefix`; returns its url.
async fn create_queue(sqs: &aws_sdk_sqs::Client, prefix: &str) -> String {
    sqs.create_queue()
        .queue_name(unique_name(prefix))
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned()
}

/// Creates a dead-letter queue for `queue_url` and sets its redrive policy,
/// as `template.yaml` does; returns the dead-letter queue's url.
async fn add_dead_letter_queue(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> String {
    let dlq_url = create_queue(sqs, "vergence-dlq").await;
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap();
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": MAX_RECEIVE_COUNT.to_string(),
    });
    sqs.set_queue_attributes()
        .queue_url(queue_url)
        .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
        .send()
        .await
        .unwrap();
    dlq_url
}

/// The deployment's clients through the proxies: the SDK's standard retry
/// mode with its default three attempts, as the functions run in
/// production (`aws_config::defaults`), but with a short first backoff so
/// a test with thousands of faults does not sleep for minutes. ECS and
/// CloudWatch Logs stay direct (no job here runs on ECS).
async fn proxied_clients(dynamodb_url: &str, moto_url: &str, direct: AwsClients) -> AwsClients {
    let retry = RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(20));
    let dynamodb = sdk_config(dynamodb_url)
        .await
        .into_builder()
        .retry_config(retry.clone())
        .build();
    let moto = sdk_config(moto_url)
        .await
        .into_builder()
        .retry_config(retry)
        .build();
    let s3 = aws_sdk_s3::config::Builder::from(&moto)
        .force_path_style(true)
        .build();
    AwsClients {
        dynamodb: aws_sdk_dynamodb::Client::new(&dynamodb),
        sqs: aws_sdk_sqs::Client::new(&moto),
        s3: aws_sdk_s3::Client::from_conf(s3),
        ..direct
    }
}

/// Applies started per (service@channel, version), from the audit trail.
/// With `leave_out_lost`, attempts that ended lost are not counted: a claim
/// that landed while every try of the SDK failed looks like a worker that
/// died after claiming, so it is given up at its deadline and started
/// again; whether it ran is for the jobs' own side effects to say.
pub fn applies_started(
    events: Vec<Event>,
    leave_out_lost: bool,
) -> BTreeMap<(String, String), usize> {
    let lost: BTreeSet<JobId> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::JobFinished {
                job_id,
                job: JobKind::Apply,
                outcome: JobOutcome::Lost,
                ..
            } if leave_out_lost => Some(job_id.clone()),
            _ => None,
        })
        .collect();
    let mut counts = BTreeMap::new();
    for event in events {
        if let EventKind::JobStarted {
            job: JobKind::Apply,
            job_id,
            ..
        } = &event.kind
            && !lost.contains(job_id)
        {
            let instance = format!(
                "{}@{}",
                event.service.expect("an apply names its service"),
                event.release_channel.expect("an apply names its channel")
            );
            // "apply of VERSION started (attempt N)…"
            let version = event
                .message
                .split_whitespace()
                .nth(2)
                .expect("the version")
                .to_owned();
            *counts.entry((instance, version)).or_default() += 1;
        }
    }
    counts
}
