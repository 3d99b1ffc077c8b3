//! The SQS work queue: messages naming the instances to step.
//!
//! A message body is a [`WorkMessage`]: JSON naming an instance and, in
//! `also`, up to [`INSTANCES_PER_MESSAGE`]` - 1` more due at about the same
//! time. The worker receives messages as the records of an SQS event and
//! reads each record's `body` with [`WorkMessage::parse`].
//!
//! Items due together share a message: a batch of quiet checks asks for
//! their next checks at the same moment, and SQS bills every send, receive
//! and delete, and Lambda every invocation, by the message batch, not by
//! what a message names (docs/cost.md). A delayed item may go out in a
//! message up to a tenth of its delay (and two seconds at most) later than
//! it asked for, never earlier; an item due now waits for nothing.
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
/// Instances one message names at most. The worker steps a batch's
/// instances at once, so this times the event source's batch size (10) is
/// how many steps one invocation may run.
pub const INSTANCES_PER_MESSAGE: usize = 10;
/// How many seconds later than asked an instance may be stepped for the
/// sake of sharing a message (a batch's next checks are due within a
/// second or so of each other).
const LATE_AT_MOST: i32 = 2;
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
    /// More instances to step, due with the first. A worker that knew only
    /// `instance` steps that one and leaves these to the due index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<InstanceKey>,
}

impl WorkMessage {
    /// Asks for the instance to be stepped.
    pub fn step(instance: InstanceKey) -> Self {
        Self {
            instance,
            also: Vec::new(),
        }
    }

    /// Asks for every instance of `instances` to be stepped; `None` when
    /// there is none.
    pub fn step_all(instances: impl IntoIterator<Item = InstanceKey>) -> Option<Self> {
        let mut instances = instances.into_iter();
        let instance = instances.next()?;
        Some(Self {
            instance,
            also: instances.collect(),
        })
    }

    /// The instances to step, in the order they were asked for.
    pub fn instances(&self) -> impl Iterator<Item = &InstanceKey> {
        std::iter::once(&self.instance).chain(&self.also)
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

/// Instances with their delays, in messages of up to
/// [`INSTANCES_PER_MESSAGE`] each with the delay of its latest: an
/// instance shares a message whose delay is at most a tenth longer than
/// its own and at most [`LATE_AT_MOST`] seconds (none for one due now), so
/// none comes early and none much late.
fn together(mut delayed: Vec<(InstanceKey, i32)>) -> Vec<(WorkMessage, i32)> {
    delayed.sort_by_key(|(_, delay)| *delay);
    // Each message's instances, its first (shortest) delay and its last.
    let mut groups: Vec<(Vec<InstanceKey>, i32, i32)> = Vec::new();
    for (instance, delay) in delayed {
        match groups.last_mut() {
            Some((instances, first, last))
                if instances.len() < INSTANCES_PER_MESSAGE
                    && delay <= *first + (*first / 10).min(LATE_AT_MOST) =>
            {
                instances.push(instance);
                *last = delay;
            }
            _ => groups.push((vec![instance], delay, delay)),
        }
    }
    groups
        .into_iter()
        .filter_map(|(instances, _, last)| WorkMessage::step_all(instances).map(|m| (m, last)))
        .collect()
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
        let delayed: Vec<(InstanceKey, i32)> = earliest
            .into_iter()
            .filter_map(|(instance, not_before)| match delay_seconds(now, not_before) {
                Some(delay) => Some((instance.clone(), delay)),
                None => {
                    tracing::debug!(%instance, %not_before, "not sent: further out than SQS can delay; the scheduler will find it");
                    None
                }
            })
            .collect();
        let messages = together(delayed);
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

    fn key(service: &str) -> InstanceKey {
        InstanceKey::parse_storage_id(&format!("shop/{service}/prod")).expect("id")
    }

    fn grouped(delays: &[(&str, i32)]) -> Vec<(Vec<String>, i32)> {
        let delayed = delays.iter().map(|(s, d)| (key(s), *d)).collect();
        together(delayed)
            .into_iter()
            .map(|(m, delay)| {
                (
                    m.instances().map(|k| k.service.to_string()).collect(),
                    delay,
                )
            })
            .collect()
    }

    #[test]
    fn instances_due_together_share_a_message_that_is_never_early() {
        let names = |ns: &[&str]| ns.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        // A batch of quiet checks: their next checks a moment apart.
        assert_eq!(
            grouped(&[("a", 300), ("b", 301), ("c", 300), ("now", 0), ("wake", 0)]),
            [(names(&["now", "wake"]), 0), (names(&["a", "c", "b"]), 301)]
        );
        // Due now never waits for a delayed one; a short delay waits at
        // most a tenth of itself longer (none below ten seconds), a long
        // one two seconds.
        assert_eq!(
            grouped(&[
                ("now", 0),
                ("two", 2),
                ("three", 3),
                ("ten", 10),
                ("eleven", 11)
            ]),
            [
                (names(&["now"]), 0),
                (names(&["two"]), 2),
                (names(&["three"]), 3),
                (names(&["ten", "eleven"]), 11)
            ]
        );
        assert_eq!(
            grouped(&[("a", 600), ("b", 602), ("c", 603)]),
            [(names(&["a", "b"]), 602), (names(&["c"]), 603)]
        );
        // At most ten a message.
        let many: Vec<String> = (0..25).map(|n| format!("s{n:02}")).collect();
        let delays: Vec<(&str, i32)> = many.iter().map(|s| (s.as_str(), 60)).collect();
        let sizes: Vec<usize> = grouped(&delays).iter().map(|(m, _)| m.len()).collect();
        assert_eq!(sizes, [10, 10, 5]);
    }

    #[test]
    fn a_message_of_many_instances_round_trips_and_an_older_reader_takes_its_first() {
        let message = WorkMessage::step_all([key("web"), key("api")]).expect("one at least");
        let body = message.to_body().expect("encode");
        assert_eq!(WorkMessage::parse(&body).expect("parse"), message);
        assert_eq!(
            message
                .instances()
                .map(|k| k.service.to_string())
                .collect::<Vec<_>>(),
            ["web", "api"]
        );
        #[derive(serde::Deserialize)]
        struct Older {
            instance: InstanceKey,
        }
        let older: Older = serde_json::from_str(&body).expect("an older worker reads it");
        assert_eq!(older.instance, key("web"));
        assert!(WorkMessage::step_all([]).is_none());
        assert!(
            !WorkMessage::step(key("web"))
                .to_body()
                .expect("encode")
                .contains("also")
        );
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
