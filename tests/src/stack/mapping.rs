//! Lambda's SQS event source mapping for the worker, as the template sets
//! it up: the queue polled with the worker role's own credentials (as the
//! Lambda service does, through AWSLambdaSQSQueueExecutionRole), batches
//! of up to `BatchSize` handed to the function, and — with
//! `ReportBatchItemFailures` — every message the function did not report
//! as failed deleted. A message the function failed stays invisible for the
//! queue's visibility timeout, then comes back, and after `maxReceiveCount`
//! receives SQS moves it to the dead-letter queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use serde_json::{Value, json};

use super::super::lambda::{LambdaFunction, Outcome};

/// What the mapping has done so far.
#[derive(Debug, Default)]
pub struct MappingCounts {
    pub batches: AtomicUsize,
    pub messages: AtomicUsize,
    /// Messages the function reported as failed (or whose whole batch failed).
    pub failed: AtomicUsize,
}

/// The polling task; stops when dropped.
#[derive(Debug)]
pub struct EventSourceMapping {
    pub counts: Arc<MappingCounts>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl EventSourceMapping {
    pub fn start(
        sqs: aws_sdk_sqs::Client,
        queue_url: String,
        queue_arn: String,
        batch_size: i32,
        worker: Arc<LambdaFunction>,
    ) -> Self {
        let counts = Arc::new(MappingCounts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(poll(
            sqs,
            queue_url,
            queue_arn,
            batch_size,
            worker,
            counts.clone(),
            stop.clone(),
        ));
        Self { counts, stop, task }
    }
}

impl Drop for EventSourceMapping {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

async fn poll(
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    queue_arn: String,
    batch_size: i32,
    worker: Arc<LambdaFunction>,
    counts: Arc<MappingCounts>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        let received = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(batch_size.min(10))
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await;
        let messages = match received {
            Ok(received) => received.messages().to_vec(),
            Err(e) => {
                // The mapping keeps polling, as Lambda does; a denied receive
                // is in the account's decision log.
                eprintln!("event source mapping: receive failed: {e:?}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        let records: Vec<Value> = messages
            .iter()
            .map(|m| {
                let attributes: serde_json::Map<String, Value> = m
                    .attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.as_str().to_owned(), Value::String(v.clone())))
                            .collect()
                    })
                    .unwrap_or_default();
                json!({
                    "messageId": m.message_id(),
                    "receiptHandle": m.receipt_handle(),
                    "body": m.body(),
                    "attributes": attributes,
                    "messageAttributes": {},
                    "md5OfBody": m.md5_of_body(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": queue_arn,
                    "awsRegion": "us-east-1",
                })
            })
            .collect();
        counts.batches.fetch_add(1, Ordering::Relaxed);
        counts.messages.fetch_add(messages.len(), Ordering::Relaxed);
        let failed: Vec<String> = match worker.invoke(&json!({ "Records": records })).await {
            Outcome::Response(body) => {
                let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                answer["batchItemFailures"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|i| i["itemIdentifier"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            }
            // A failed invocation fails the whole batch.
            Outcome::Error(error) => {
                eprintln!("event source mapping: the worker failed: {error}");
                messages
                    .iter()
                    .filter_map(|m| m.message_id().map(str::to_owned))
                    .collect()
            }
        };
        counts.failed.fetch_add(failed.len(), Ordering::Relaxed);
        for message in &messages {
            if failed
                .iter()
                .any(|id| Some(id.as_str()) == message.message_id())
            {
                continue;
            }
            if let Some(handle) = message.receipt_handle()
                && let Err(e) = sqs
                    .delete_message()
                    .queue_url(&queue_url)
                    .receipt_handle(handle)
                    .send()
                    .await
            {
                eprintln!("event source mapping: delete failed: {e:?}");
            }
        }
    }
}
