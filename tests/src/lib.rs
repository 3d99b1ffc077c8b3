//! Support for the end-to-end tests in `tests/`: a serverless deployment
//! over the stand-ins (DynamoDB Local, moto's SQS) driven the way AWS drives
//! it — the scheduler gets an EventBridge event, the worker gets SQS event
//! payloads built from messages received from the queue — and copies of the
//! quickstart to converge.

// Test support: a failed setup should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod wire;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use vergence_aws::DynamoStore;
use vergence_aws::testing::{
    DYNAMODB_URL, SQS_URL, dynamodb_client, endpoint, fresh_bucket, sdk_config, unique_name,
};
use vergence_engine::control::Control;
use vergence_lambda::worker::Worker;
use vergence_lambda::{AwsClients, Deployment, DeploymentConfig, scheduler};
use vergence_model::ports::{Clock, EventStore, InstanceFilter, ManualClock, SystemClock};
use vergence_model::{Event, EventFilter, InstanceRecord, Status};

/// DynamoDB Local's and moto's SQS endpoints from the environment
/// (`scripts/services.sh`); `None` lets a test skip where they are not
/// running (CI sets `VERGENCE_REQUIRE_SERVICES`, which makes that fail).
pub fn endpoints() -> Option<(String, String)> {
    Some((endpoint(DYNAMODB_URL)?, endpoint(SQS_URL)?))
}

/// The functions' sample events (also used by `cargo lambda invoke`).
pub fn event_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../functions/events")
        .join(name)
}

/// A copy of examples/quickstart without state or deployed files.
pub fn quickstart_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart"),
        dir.path(),
    );
    dir
}

pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".vergence" || name == "deployed" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// One serverless deployment over fresh stand-in resources.
#[allow(missing_debug_implementations)] // holds SDK clients
pub struct Harness {
    pub deployment: Deployment,
    pub sqs: aws_sdk_sqs::Client,
    pub queue_url: String,
    /// Messages handed to a worker, by SQS message id.
    pub deliveries: HashMap<String, usize>,
    pub manual: Option<Arc<ManualClock>>,
}

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
        Self::build(dynamodb_url, sqs_url, manual, counter, None).await
    }

    /// Whose ECS jobs go through `ecs` (a client with fault injection).
    pub async fn start_on_ecs(
        dynamodb_url: &str,
        sqs_url: &str,
        manual: Option<Arc<ManualClock>>,
        ecs: aws_sdk_ecs::Client,
    ) -> Self {
        Self::build(dynamodb_url, sqs_url, manual, None, Some(ecs)).await
    }

    async fn build(
        dynamodb_url: &str,
        sqs_url: &str,
        manual: Option<Arc<ManualClock>>,
        counter: Option<wire::RequestCounter>,
        ecs: Option<aws_sdk_ecs::Client>,
    ) -> Self {
        let mut dynamodb = dynamodb_client(dynamodb_url).await;
        let table = unique_name("vergence-e2e");
        DynamoStore::create_table(&dynamodb, &table).await.unwrap();
        let mut sqs = aws_sdk_sqs::Client::new(&sdk_config(sqs_url).await);
        if let Some(counter) = counter {
            dynamodb = aws_sdk_dynamodb::Client::from_conf(
                dynamodb
                    .config()
                    .to_builder()
                    .interceptor(counter.clone())
                    .build(),
            );
            sqs = aws_sdk_sqs::Client::from_conf(
                sqs.config().to_builder().interceptor(counter).build(),
            );
        }
        let queue_url = sqs
            .create_queue()
            .queue_name(unique_name("vergence-work"))
            .send()
            .await
            .unwrap()
            .queue_url()
            .unwrap()
            .to_owned();
        let clock: Arc<dyn Clock> = match &manual {
            Some(manual) => manual.clone(),
            None => Arc::new(SystemClock),
        };
        let (s3, artifact_bucket) = fresh_bucket(sqs_url).await;
        let deployment = Deployment::with_clock(
            AwsClients {
                dynamodb,
                sqs: sqs.clone(),
                s3,
                ecs: match ecs {
                    Some(ecs) => ecs,
                    None => aws_sdk_ecs::Client::new(&sdk_config(sqs_url).await),
                },
                logs: aws_sdk_cloudwatchlogs::Client::new(&sdk_config(sqs_url).await),
            },
            DeploymentConfig {
                table,
                queue_url: queue_url.clone(),
                artifact_bucket,
                job_timeout_margin: Duration::from_secs(5),
            },
            clock,
        );
        Self {
            deployment,
            sqs,
            queue_url,
            deliveries: HashMap::new(),
            manual,
        }
    }

    pub fn control(&self) -> Control {
        self.deployment.control()
    }

    /// Invokes the scheduler with the sample EventBridge Scheduler event.
    pub async fn schedule(&self) -> usize {
        let raw = std::fs::read_to_string(event_file("schedule.json")).unwrap();
        let event: EventBridgeEvent = serde_json::from_str(&raw).unwrap();
        scheduler::handle(&self.deployment, event)
            .await
            .unwrap()
            .enqueued
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
        let response = worker.handle(event.clone(), Some(deadline)).await;
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        for record in &event.records {
            if failed.contains(&record.message_id.as_deref().unwrap_or_default()) {
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

    /// Every event recorded, as the store lists them.
    pub async fn events(&self) -> Vec<Event> {
        self.deployment
            .store
            .list_events(&EventFilter::default())
            .await
            .unwrap()
    }

    pub async fn instances(&self) -> Vec<InstanceRecord> {
        self.control()
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
