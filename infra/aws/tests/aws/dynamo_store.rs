//! Behaviour of the DynamoDB store beyond the conformance suite: the sparse,
//! sharded due index; bodies larger than an item; DynamoDB's transaction
//! limits; races between plain and transactional writers; and how failures
//! surface. Against DynamoDB Local, a fresh table per test.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use jiff::{SignedDuration, Timestamp};

use vergence_aws::DynamoStore;
use vergence_aws::dynamo::table::{DUE_INDEX, DUE_PK, PK, SK, TTL};
use vergence_model::ConfigBundle;
use vergence_model::Error;
use vergence_model::conformance::{job, record, t};
use vergence_model::ports::{
    ConfigSnapshot, ConfigStore, EventStore, InstanceChange, InstanceCommit, InstanceStore,
    JobStore,
};
use vergence_model::{
    Artifact, Event, EventFilter, EventKind, InstanceKey, InstanceRecord, JobId, JobOutcome,
    JobResult,
};

type Item = std::collections::HashMap<String, AttributeValue>;

/// A store over a fresh table, and a raw client to look at its items.
struct Fixture {
    store: Arc<DynamoStore>,
    client: Client,
}

async fn fixture() -> Option<Fixture> {
    let url = crate::common::endpoint(crate::common::DYNAMODB_URL)?;
    let store = crate::common::fresh_store(url.clone()).await;
    let client = crate::common::dynamodb_client(&url).await;
    Some(Fixture { store, client })
}

impl Fixture {
    /// Every item under a partition key, as stored (all pages: a page
    /// holds at most 1 MB).
    async fn items(&self, pk: &str) -> Vec<Item> {
        self.client
            .query()
            .table_name(self.store.table_name())
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .expect("query")
    }

    async fn due_index(&self) -> Vec<Item> {
        self.client
            .scan()
            .table_name(self.store.table_name())
            .index_name(DUE_INDEX)
            .send()
            .await
            .expect("scan the due index")
            .items
            .unwrap_or_default()
    }
}

fn key(service: &str) -> InstanceKey {
    InstanceKey::new(
        "shop".parse().expect("name"),
        service.parse().expect("name"),
        "prod".parse().expect("name"),
    )
}

fn event(id: &str, key: &InstanceKey) -> Event {
    let mut event = Event::for_instance(key, t(1), "test", EventKind::InstanceAdded, id);
    event.id = id.to_owned();
    event
}

fn put(record: InstanceRecord, expected: Option<u64>) -> InstanceCommit {
    InstanceCommit {
        change: InstanceChange::Put(Box::new(record)),
        expected_revision: expected,
        new_jobs: Vec::new(),
        finished_jobs: Vec::new(),
        events: Vec::new(),
    }
}

/// Text that gzip cannot shrink much, so bodies stay large once compressed.
fn noise(len: usize) -> String {
    std::iter::repeat_with(fastrand::alphanumeric)
        .take(len)
        .collect()
}

fn random_bytes(len: usize) -> Vec<u8> {
    std::iter::repeat_with(|| fastrand::u8(..))
        .take(len)
        .collect()
}

fn sk(item: &Item) -> &str {
    match item.get(SK) {
        Some(AttributeValue::S(sk)) => sk,
        other => panic!("no sort key: {other:?}"),
    }
}

#[tokio::test]
async fn the_due_index_holds_only_waiting_instances_and_finds_due_ones_across_shards() {
    let Some(f) = fixture().await else { return };
    let mut due = Vec::new();
    for i in 0..48 {
        let k = key(&format!("svc-{i}"));
        let next_check_at = match i % 4 {
            0 | 1 => Some(t(i)),
            2 => Some(t(1000 + i)),
            _ => None,
        };
        f.store
            .commit(put(record(&k, next_check_at), None))
            .await
            .expect("create");
        if let Some(at) = next_check_at.filter(|at| *at <= t(500)) {
            due.push((at, k));
        }
    }
    due.sort();
    let due: Vec<InstanceKey> = due.into_iter().map(|(_, k)| k).collect();

    assert_eq!(f.store.due_instances(t(500), 100).await.expect("due"), due);
    assert_eq!(
        f.store.due_instances(t(500), 5).await.expect("due"),
        due[..5],
        "the earliest across all shards"
    );

    let entries = f.due_index().await;
    assert_eq!(
        entries.len(),
        36,
        "only instances with a next check are indexed"
    );
    let shards: HashSet<&String> = entries
        .iter()
        .filter_map(|e| e.get(DUE_PK)?.as_s().ok())
        .collect();
    assert!(shards.len() > 1, "entries spread over shards: {shards:?}");

    let first = &due[0];
    let revision = f
        .store
        .get_instance(first)
        .await
        .expect("get")
        .expect("exists")
        .revision;
    f.store
        .commit(put(record(first, None), Some(revision)))
        .await
        .expect("no next check any more");
    assert!(
        !f.store
            .due_instances(t(500), 100)
            .await
            .expect("due")
            .contains(first)
    );
    assert_eq!(f.due_index().await.len(), 35);
}

#[tokio::test]
async fn a_snapshot_larger_than_an_item_round_trips_and_is_stored_once() {
    let Some(f) = fixture().await else { return };
    let files: BTreeMap<String, String> = (0..3)
        .map(|i| (format!("services/svc-{i}.yaml"), noise(600_000)))
        .collect();
    let bundle = ConfigBundle::from_files(files);
    let snapshot = ConfigSnapshot {
        hash: bundle.hash(),
        bundle,
        created_at: t(0),
        actor: "test".into(),
    };
    f.store.put_snapshot(&snapshot).await.expect("put");
    let stored = f.items(&format!("snapshot#{}", snapshot.hash)).await;
    assert!(
        stored.len() > 3,
        "the body is split over parts: {} items",
        stored.len()
    );
    let tokens: HashSet<&str> = stored
        .iter()
        .filter_map(|item| sk(item).strip_prefix("part#"))
        .filter_map(|rest| rest.split('#').next())
        .collect();
    assert_eq!(tokens.len(), 1, "the parts of one write");

    f.store
        .put_snapshot(&snapshot)
        .await
        .expect("putting the same snapshot again is fine");
    assert_eq!(
        f.items(&format!("snapshot#{}", snapshot.hash)).await.len(),
        stored.len(),
        "the second put left no parts behind"
    );
    assert_eq!(
        f.store.get_snapshot(&snapshot.hash).await.expect("get"),
        Some(snapshot)
    );
}

#[tokio::test]
async fn large_job_inputs_and_results_round_trip_and_a_duplicate_report_leaves_nothing() {
    let Some(f) = fixture().await else { return };
    let k = key("web");
    let mut planned = job("job-big", &k);
    // Records hold artifact references, not content; a huge environment
    // still makes the job record spill into parts.
    Arc::make_mut(&mut planned.spec)
        .env
        .insert("LARGE".into(), noise(400_000));
    planned.inputs = vec![Artifact::of(
        "plan",
        "jobs/fetch-1/outputs/plan",
        &random_bytes(400_000),
    )];
    let mut commit = put(record(&k, None), None);
    commit.new_jobs.push(planned.clone());
    f.store.commit(commit).await.expect("commit");
    let id = planned.id.clone();
    assert_eq!(
        f.store.get_job(&id).await.expect("get"),
        Some(planned.clone())
    );

    assert!(f.store.claim_job(&id, t(1)).await.expect("claim"));
    let result = JobResult {
        outcome: JobOutcome::Exited,
        exit_code: Some(0),
        stdout: noise(900_000),
        stderr_tail: String::new(),
        duration_ms: 5,
        outputs: vec![Artifact::of(
            "state",
            Artifact::output_key(&id, "state"),
            &random_bytes(300_000),
        )],
        finished_at: t(3),
    };
    assert!(f.store.finish_job(&id, &result).await.expect("finish"));
    let items = f.items("job#job-big").await.len();

    let mut duplicate = result.clone();
    duplicate.stdout = noise(900_000);
    assert!(
        !f.store
            .finish_job(&id, &duplicate)
            .await
            .expect("finish again")
    );
    assert_eq!(
        f.items("job#job-big").await.len(),
        items,
        "the loser's parts are gone"
    );

    let stored = f.store.get_job(&id).await.expect("get").expect("job");
    assert_eq!(stored.result(), Some(&result));
    assert_eq!(stored.inputs, planned.inputs);
}

#[tokio::test]
async fn a_commit_that_loses_its_race_leaves_no_job_parts_behind() {
    let Some(f) = fixture().await else { return };
    let k = key("web");
    let r1 = f
        .store
        .commit(put(record(&k, None), None))
        .await
        .expect("create");
    f.store
        .commit(put(record(&k, None), Some(r1)))
        .await
        .expect("update");
    let mut stale = put(record(&k, None), Some(r1));
    let mut big = job("job-stale", &k);
    Arc::make_mut(&mut big.spec)
        .env
        .insert("LARGE".into(), noise(500_000));
    stale.new_jobs.push(big);
    assert!(matches!(
        f.store.commit(stale).await,
        Err(Error::Conflict { .. })
    ));
    assert!(f.items("job#job-stale").await.is_empty());
}

#[tokio::test]
async fn plain_and_transactional_writers_of_one_revision_have_exactly_one_winner() {
    let Some(f) = fixture().await else { return };
    let k = key("web");
    let r1 = f
        .store
        .commit(put(record(&k, None), None))
        .await
        .expect("create");
    let writers = (0..16).map(|i| {
        let store = f.store.clone();
        let k = k.clone();
        tokio::spawn(async move {
            let mut r = record(&k, Some(t(i)));
            r.state.reason = format!("writer {i}");
            let mut commit = put(r, Some(r1));
            // Odd writers carry a job and events (a transaction), even ones
            // only the instance (a single conditional put).
            if i % 2 == 1 {
                commit.new_jobs.push(job(&format!("job-{i}"), &k));
                commit.events.push(event(&format!("0001-{i:02}"), &k));
            }
            store.commit(commit).await
        })
    });
    let mut winners = Vec::new();
    for (i, writer) in writers.enumerate() {
        match writer.await.expect("writer") {
            Ok(revision) => winners.push((i, revision)),
            Err(Error::Conflict { .. }) => {}
            Err(other) => panic!("writer {i}: {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
    let (winner, revision) = winners[0];
    let read = f
        .store
        .get_instance(&k)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(read.revision, revision);
    assert_eq!(read.state.reason, format!("writer {winner}"));
    let events = f
        .store
        .list_events(&EventFilter::default())
        .await
        .expect("events");
    assert_eq!(events.len(), winner % 2, "only the winner's events");
    for i in (1..16).step_by(2) {
        let stored = f
            .store
            .get_job(&JobId(format!("job-{i}").into()))
            .await
            .expect("get");
        assert_eq!(stored.is_some(), i == winner, "job-{i}");
    }
}

#[tokio::test]
async fn a_commit_with_more_events_than_a_transaction_holds_records_them_all() {
    let Some(f) = fixture().await else { return };
    let k = key("web");
    let mut commit = put(record(&k, None), None);
    commit.new_jobs.push(job("job-1", &k));
    commit.events = (0..150)
        .map(|i| event(&format!("0001-{i:03}"), &k))
        .collect();
    assert_eq!(f.store.commit(commit).await.expect("commit"), 1);
    let events = f
        .store
        .list_events(&EventFilter::default())
        .await
        .expect("events");
    assert_eq!(events.len(), 150);
    assert!(
        f.store
            .get_job(&JobId("job-1".into()))
            .await
            .expect("get")
            .is_some()
    );
}

/// A store over a new table that keeps events and ended jobs for a day.
async fn keeping_a_day() -> Option<(Client, String, DynamoStore)> {
    let url = crate::common::endpoint(crate::common::DYNAMODB_URL)?;
    let client = crate::common::dynamodb_client(&url).await;
    let table = crate::common::unique_name("vergence-test");
    DynamoStore::create_table(&client, &table)
        .await
        .expect("table");
    let store = DynamoStore::new(client.clone(), &table)
        .with_event_retention(SignedDuration::from_hours(24));
    Some((client, table, store))
}

#[tokio::test]
async fn events_expire_after_the_configured_retention() {
    let Some((client, table, store)) = keeping_a_day().await else {
        return;
    };
    store
        .append_events(&[event("0001-a", &key("web"))])
        .await
        .expect("append");
    let item = client
        .get_item()
        .table_name(&table)
        .key(PK, AttributeValue::S("events#shop".into()))
        .key(SK, AttributeValue::S("0001-a".into()))
        .send()
        .await
        .expect("get")
        .item
        .expect("stored");
    let Some(AttributeValue::N(ttl)) = item.get(TTL) else {
        panic!("no ttl: {item:?}");
    };
    let expected = Timestamp::now().as_second() + 24 * 3600;
    let ttl: i64 = ttl.parse().expect("a number");
    assert!(
        (ttl - expected).abs() < 120,
        "ttl {ttl}, expected about {expected}"
    );
}

#[tokio::test]
async fn an_instance_too_large_for_an_item_is_refused_with_a_permanent_error() {
    let Some(f) = fixture().await else { return };
    let mut huge = record(&key("web"), None);
    huge.state.reason = noise(600_000);
    match f.store.commit(put(huge, None)).await {
        Err(error @ Error::Store { .. }) => {
            assert!(!error.is_retryable());
            assert!(error.to_string().contains("at most"), "{error}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_table_is_permanent_and_an_unreachable_endpoint_is_retryable() {
    let Some(url) = crate::common::endpoint(crate::common::DYNAMODB_URL) else {
        return;
    };
    let missing = DynamoStore::new(crate::common::dynamodb_client(&url).await, "no-such-table");
    let error = missing
        .get_instance(&key("web"))
        .await
        .expect_err("no table");
    assert!(
        matches!(error, Error::Store { .. }) && !error.is_retryable(),
        "{error}"
    );

    // Nothing listens on port 9 (discard) of the loopback address here.
    let unreachable = DynamoStore::new(
        crate::common::dynamodb_client("http://127.0.0.1:9").await,
        "any",
    );
    let error = unreachable
        .get_instance(&key("web"))
        .await
        .expect_err("no server");
    assert!(error.is_retryable(), "{error}");
}

#[tokio::test]
async fn an_ended_job_and_every_part_of_it_expire_after_the_retention() {
    let Some((client, table, store)) = keeping_a_day().await else {
        return;
    };
    let k = key("web");
    let mut planned = job("job-ttl", &k);
    Arc::make_mut(&mut planned.spec)
        .env
        .insert("LARGE".into(), noise(400_000));
    let mut commit = put(record(&k, None), None);
    commit.new_jobs.push(planned.clone());
    store.commit(commit).await.expect("commit");
    assert!(store.claim_job(&planned.id, t(1)).await.expect("claim"));
    let result = JobResult {
        outcome: JobOutcome::Exited,
        exit_code: Some(0),
        stdout: noise(900_000),
        stderr_tail: String::new(),
        duration_ms: 5,
        outputs: Vec::new(),
        finished_at: t(3),
    };
    assert!(
        store
            .finish_job(&planned.id, &result)
            .await
            .expect("finish")
    );

    let items = client
        .query()
        .table_name(&table)
        .key_condition_expression("#pk = :pk")
        .expression_attribute_names("#pk", PK)
        .expression_attribute_values(":pk", AttributeValue::S("job#job-ttl".into()))
        .send()
        .await
        .expect("query")
        .items
        .unwrap_or_default();
    assert!(
        items.len() > 2,
        "the job spilled into parts: {}",
        items.len()
    );
    let now = Timestamp::now().as_second();
    let deadline = planned.deadline.as_second();
    for item in &items {
        let Some(AttributeValue::N(ttl)) = item.get(TTL) else {
            panic!("{} has no ttl", sk(item));
        };
        let ttl: i64 = ttl.parse().expect("a number");
        let from_now = (ttl - (now + 24 * 3600)).abs() < 120;
        let from_deadline = ttl == deadline + 24 * 3600;
        assert!(
            from_now || from_deadline,
            "{}: ttl {ttl}, expected a day after now or after the deadline",
            sk(item)
        );
    }
}
