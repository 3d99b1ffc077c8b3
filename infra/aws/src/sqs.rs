//! The SQS work queue: one message per instance to step.
//!
//! A message body is a [`WorkMessage`]: JSON naming the instance and, when a
//! runner reports through the queue, the job whose result is ready. The
//! worker receives messages as the records of an SQS event and reads each
//! record's `body` with [`WorkMessage::parse`].
//!
//! A work item's `not_before` becomes the message's `DelaySeconds`. SQS
//! delays a message by at most 15 minutes, so an item due later than that is
//! **not sent**: the instance's `next_check_at` is stored with it, and the
//! scheduler finds it through the due index when its time comes (the
//! [`WorkQueue`] contract allows dropping far-future items for this reason).
//!
//! Standard queues only: FIFO queues do not take per-message delays.

use std::collections::BTreeMap;
use std::sync::Arc;
#[cfg(feature = "testing")]
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use vergence_model::InstanceKey;
use vergence_model::ports::{Clock, SystemClock, WorkItem, WorkQueue};

use crate::error::AwsError;

/// The longest delay SQS gives a message, in seconds (15 minutes).
pub const MAX_DELAY_SECONDS: i64 = 900;
/// SendMessageBatch takes at most this many messages.
const BATCH_MAX: usize = 10;
/// Batches in flight at once when many instances are enqueued together.
const CONCURRENT_BATCHES: usize = 4;
#[cfg(feature = "testing")]
/// The longest long poll SQS allows.
const MAX_WAIT: Duration = Duration::from_secs(20);

/// The body of a work message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkMessage {
    /// The instance to step.
    pub instance: InstanceKey,
}

impl WorkMessage {
    /// Asks for the instance to be stepped.
    pub fn step(instance: InstanceKey) -> Self {
        Self { instance }
    }

    /// Reads a message body (an SQS event record's `body`). Unknown fields
    /// are ignored, so newer senders can add some.
    pub fn parse(body: &str) -> Result<Self, AwsError> {
        serde_json::from_str(body).map_err(|source| AwsError::InvalidMessage { source })
    }

    /// The message body.
    pub fn to_body(&self) -> Result<String, AwsError> {
        serde_json::to_string(self).map_err(|e| AwsError::Encode {
            operation: "enqueue",
            source: e.into(),
        })
    }
}

/// A received message, with the handle that deletes it (tests only: the
/// worker gets its messages from the Lambda event source).
#[cfg(feature = "testing")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedWork {
    pub message: WorkMessage,
    pub receipt_handle: String,
}

/// The SQS [`WorkQueue`].
pub struct SqsQueue {
    client: Client,
    queue_url: String,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SqsQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsQueue")
            .field("queue_url", &self.queue_url)
            .finish_non_exhaustive()
    }
}

/// Seconds to delay a message so it is not delivered before `not_before`
/// (rounded up), or `None` when that is further out than SQS can delay.
fn delay_seconds(now: Timestamp, not_before: Timestamp) -> Option<i32> {
    let wait = not_before.duration_since(now);
    if wait.is_negative() || wait.is_zero() {
        return Some(0);
    }
    let seconds = wait.as_secs() + i64::from(wait.subsec_nanos() > 0);
    if seconds > MAX_DELAY_SECONDS {
        return None;
    }
    i32::try_from(seconds).ok()
}

impl SqsQueue {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            clock: Arc::new(SystemClock),
        }
    }

    /// Measures delays against `clock` instead of the machine's clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends messages for immediate delivery (a runner reporting that a
    /// job's result is ready, say).
    pub async fn send(&self, messages: &[WorkMessage]) -> Result<(), AwsError> {
        let delayed = messages.iter().map(|m| (m, 0)).collect();
        self.send_all(delayed).await
    }

    #[tracing::instrument(skip_all, fields(items = items.len()))]
    async fn enqueue_items(&self, items: &[WorkItem]) -> Result<(), AwsError> {
        // One message per instance, at the earliest time asked for: the step
        // it triggers looks at everything that is due.
        let mut earliest: BTreeMap<&InstanceKey, Timestamp> = BTreeMap::new();
        for item in items {
            earliest
                .entry(&item.instance)
                .and_modify(|at| *at = (*at).min(item.not_before))
                .or_insert(item.not_before);
        }
        let now = self.clock.now();
        let messages: Vec<(WorkMessage, i32)> = earliest
            .into_iter()
            .filter_map(|(instance, not_before)| match delay_seconds(now, not_before) {
                Some(delay) => Some((WorkMessage::step(instance.clone()), delay)),
                None => {
                    tracing::debug!(%instance, %not_before, "not sent: further out than SQS can delay; the scheduler will find it");
                    None
                }
            })
            .collect();
        self.send_all(messages.iter().map(|(m, d)| (m, *d)).collect())
            .await
    }

    async fn send_all(&self, messages: Vec<(&WorkMessage, i32)>) -> Result<(), AwsError> {
        let entries = messages
            .into_iter()
            .enumerate()
            .map(|(index, (message, delay))| {
                SendMessageBatchRequestEntry::builder()
                    // Ids only need to be unique within one batch.
                    .id(index.to_string())
                    .message_body(message.to_body()?)
                    .delay_seconds(delay)
                    .build()
                    .map_err(AwsError::build("enqueue"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let batches: Vec<Vec<_>> = entries.chunks(BATCH_MAX).map(<[_]>::to_vec).collect();
        futures::stream::iter(batches)
            .map(|batch| self.send_batch(batch))
            .buffer_unordered(CONCURRENT_BATCHES)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    async fn send_batch(&self, batch: Vec<SendMessageBatchRequestEntry>) -> Result<(), AwsError> {
        let total = batch.len();
        let output = self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(batch))
            .send()
            .await
            .map_err(|e| AwsError::sqs("enqueue", e))?;
        let failed = output.failed();
        let Some(first) = failed.first() else {
            return Ok(());
        };
        Err(AwsError::SqsRefused {
            operation: "enqueue",
            failed: failed.len(),
            total,
            first: format!("{}: {}", first.code(), first.message().unwrap_or("")),
            // SQS marks the entries that would fail again the same way.
            retryable: failed.iter().any(|f| !f.sender_fault()),
        })
    }
}

#[cfg(feature = "testing")]
impl SqsQueue {
    /// Receives up to `max` (at most 10) messages, long-polling up to `wait`
    /// (at most 20 s). For tests.
    pub async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedWork>, AwsError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .wait_time_seconds(i32::try_from(wait.min(MAX_WAIT).as_secs()).unwrap_or(20))
            .send()
            .await
            .map_err(|e| AwsError::sqs("receive", e))?;
        output
            .messages()
            .iter()
            .map(|message| {
                Ok(ReceivedWork {
                    message: WorkMessage::parse(message.body().unwrap_or_default())?,
                    receipt_handle: message.receipt_handle().unwrap_or_default().to_owned(),
                })
            })
            .collect()
    }

    /// Deletes a received message, so it is not delivered again.
    pub async fn delete(&self, receipt_handle: &str) -> Result<(), AwsError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map(drop)
            .map_err(|e| AwsError::sqs("delete", e))
    }
}

#[async_trait]
impl WorkQueue for SqsQueue {
    async fn enqueue(&self, items: &[WorkItem]) -> vergence_model::Result<()> {
        self.enqueue_items(items)
            .await
            .map_err(AwsError::into_queue_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).expect("valid")
    }

    #[test]
    fn due_items_go_now_and_near_ones_wait_whole_seconds() {
        assert_eq!(delay_seconds(at(10), at(5)), Some(0));
        assert_eq!(delay_seconds(at(10), at(10)), Some(0));
        assert_eq!(delay_seconds(at(0), at(30)), Some(30));
        let half = at(0)
            .checked_add(jiff::SignedDuration::from_millis(1500))
            .expect("valid");
        assert_eq!(delay_seconds(at(0), half), Some(2), "never early");
    }

    #[test]
    fn items_beyond_fifteen_minutes_are_left_to_the_scheduler() {
        assert_eq!(delay_seconds(at(0), at(900)), Some(900));
        assert_eq!(delay_seconds(at(0), at(901)), None);
    }

    #[test]
    fn a_message_body_round_trips_and_ignores_unknown_fields() {
        let instance = InstanceKey::parse_storage_id("shop/web/prod").expect("id");
        let message = WorkMessage::step(instance.clone());
        let body = message.to_body().expect("encode");
        assert_eq!(WorkMessage::parse(&body).expect("parse"), message);
        let newer = r#"{"instance":{"application":"shop","service":"web","releaseChannel":"prod"},"priority":3}"#;
        assert_eq!(
            WorkMessage::parse(newer).expect("parse"),
            WorkMessage::step(instance)
        );
        assert!(WorkMessage::parse(r#"{"instance":"Shop"}"#).is_err());
    }
}
