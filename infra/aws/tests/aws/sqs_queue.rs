//! The SQS work queue against moto: delays, batching, and message bodies
//! on the wire. Each test gets a queue of its own.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};

use vergence_aws::{ReceivedWork, SqsQueue, WorkMessage};
use vergence_model::InstanceKey;
use vergence_model::ports::{WorkItem, WorkQueue};

async fn queue() -> Option<SqsQueue> {
    let url = crate::common::endpoint(crate::common::SQS_URL)?;
    Some(crate::common::fresh_queue(&url).await)
}

fn key(service: &str) -> InstanceKey {
    InstanceKey::new(
        "shop".parse().expect("name"),
        service.parse().expect("name"),
        "prod".parse().expect("name"),
    )
}

fn item(service: &str, in_seconds: i64) -> WorkItem {
    WorkItem {
        instance: key(service),
        not_before: Timestamp::now()
            .checked_add(SignedDuration::from_secs(in_seconds))
            .expect("valid"),
    }
}

/// Everything delivered within `within`, deleting each message.
async fn drain(queue: &SqsQueue, within: Duration) -> Vec<ReceivedWork> {
    let deadline = Instant::now() + within;
    let mut received = Vec::new();
    while Instant::now() < deadline {
        let batch = queue
            .receive(10, Duration::from_secs(1))
            .await
            .expect("receive");
        for message in &batch {
            queue.delete(&message.receipt_handle).await.expect("delete");
        }
        received.extend(batch);
    }
    received
}

fn services(received: &[ReceivedWork]) -> BTreeSet<String> {
    received
        .iter()
        .flat_map(|r| r.message.instances())
        .map(|instance| instance.service.to_string())
        .collect()
}

#[tokio::test]
async fn near_items_wait_for_their_time_and_far_ones_are_left_to_the_scheduler() {
    let Some(queue) = queue().await else { return };
    let started = Instant::now();
    queue
        .enqueue(&[item("now", 0), item("soon", 3), item("later", 3600)])
        .await
        .expect("enqueue");

    let first = queue
        .receive(10, Duration::from_secs(1))
        .await
        .expect("receive");
    assert_eq!(services(&first), BTreeSet::from(["now".to_owned()]));
    queue
        .delete(&first[0].receipt_handle)
        .await
        .expect("delete");

    let mut soon = Vec::new();
    while soon.is_empty() && started.elapsed() < Duration::from_secs(15) {
        soon = queue
            .receive(10, Duration::from_secs(1))
            .await
            .expect("receive");
    }
    assert_eq!(services(&soon), BTreeSet::from(["soon".to_owned()]));
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "delivered after {:?}, before its delay",
        started.elapsed()
    );
    queue.delete(&soon[0].receipt_handle).await.expect("delete");

    assert!(
        drain(&queue, Duration::from_secs(2)).await.is_empty(),
        "an item an hour out is not sent"
    );
}

#[tokio::test]
async fn more_items_than_a_batch_holds_are_all_sent_once_per_instance() {
    let Some(queue) = queue().await else { return };
    let mut items: Vec<WorkItem> = (0..25).map(|i| item(&format!("svc-{i}"), 0)).collect();
    // The same instance asked for twice in one call is named once.
    items.push(item("svc-0", 0));
    queue.enqueue(&items).await.expect("enqueue");
    let received = drain(&queue, Duration::from_secs(4)).await;
    let sizes: Vec<usize> = received
        .iter()
        .map(|r| r.message.instances().count())
        .collect();
    assert_eq!(
        sizes.iter().sum::<usize>(),
        25,
        "each instance once: {sizes:?}"
    );
    assert_eq!(received.len(), 3, "due together, ten a message: {sizes:?}");
    assert_eq!(
        services(&received),
        (0..25).map(|i| format!("svc-{i}")).collect()
    );
}

#[tokio::test]
async fn a_message_body_round_trips_through_the_queue() {
    let Some(queue) = queue().await else { return };
    let report = WorkMessage::step(key("web"));
    queue
        .send(std::slice::from_ref(&report))
        .await
        .expect("send");
    let received = drain(&queue, Duration::from_secs(2)).await;
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].message, report);
    assert_eq!(
        WorkMessage::parse(&report.to_body().expect("encode")).expect("parse"),
        report
    );
}
