//! The state store conformance suite: the behaviour every [`StateStore`]
//! adapter must have. Adapters run it with [`store_conformance_tests!`]:
//!
//! ```ignore
//! vergence_model::store_conformance_tests!(async { Arc::new(MyStore::new().await) });
//! ```
//!
//! Each check gets a fresh, empty store from the expression.

// Test code: a failed expectation should stop the check with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::bundle::ConfigBundle;
use crate::error::{Error, Result};
use crate::instance::InstanceIds;
use crate::ports::*;
use crate::*;

/// Generates one `#[tokio::test]` per conformance check.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@tests $make;
            snapshots_are_immutable_and_idempotent,
            current_config_moves_only_from_the_revision_read,
            creating_an_instance_requires_that_it_does_not_exist,
            updates_require_the_revision_read_and_a_lost_race_writes_nothing,
            a_commit_writes_instance_jobs_and_events_together,
            an_existing_job_id_fails_the_whole_commit,
            deleting_an_instance_is_conditional_too,
            instances_are_listed_by_filter,
            due_instances_are_the_ones_whose_time_has_come_earliest_first,
            a_job_is_claimed_once_and_finished_once,
            releases_are_immutable_versions_and_the_last_pushed_is_latest,
            approvals_are_listed_per_instance,
            alerts_are_replaced_by_name,
            tokens_are_unique_by_id_and_listed_per_application,
            events_are_appended_once_and_listed_by_filter_and_limit,
            concurrent_writers_of_one_revision_have_exactly_one_winner,
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let store: std::sync::Arc<dyn $crate::ports::StateStore> = $make.await;
                $crate::conformance::$name(store).await;
            }
        )*
    };
}

/// A fixed instant `seconds` after the suite's epoch.
pub fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("valid timestamp")
}

fn key(app: &str, service: &str, channel: &str) -> InstanceKey {
    InstanceKey::new(
        app.parse().expect("name"),
        service.parse().expect("name"),
        channel.parse().expect("name"),
    )
}

/// A new instance record with nothing resolved yet.
pub fn record(key: &InstanceKey, next_check_at: Option<Timestamp>) -> InstanceRecord {
    InstanceRecord {
        key: key.clone(),
        revision: 0,
        config_hash: "hash".into(),
        desired: Desired::Unresolved {
            reason: "test".into(),
        },
        state: InstanceState::new_pending("new"),
        next_check_at,
        controls: Default::default(),
        updated_at: t(0),
    }
}

/// A created apply job of `key`.
pub fn job(id: &str, key: &InstanceKey) -> JobRecord {
    JobRecord {
        id: JobId(id.to_owned()),
        instance: key.clone(),
        ids: InstanceIds::of(key),
        kind: JobKind::Apply,
        version: "v1".parse().expect("version"),
        attempt: 1,
        spec: JobSpec {
            runner: RunnerSpec::Local,
            image: None,
            cmd: vec!["./apply".into()],
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            working_dir: String::new(),
            timeout: SignedDuration::from_mins(1),
            outputs: Vec::new(),
        },
        workspace_root: None,
        inputs: Vec::new(),
        created_at: t(0),
        deadline: t(120),
        state: JobState::Created,
    }
}

fn event(id: &str, key: &InstanceKey, at: Timestamp) -> Event {
    let mut event = Event::for_instance(
        key,
        at,
        "test",
        EventKind::InstanceAdded,
        format!("event {id}"),
    );
    event.id = id.to_owned();
    event
}

fn put(record: InstanceRecord, expected: Option<u64>) -> InstanceCommit {
    InstanceCommit {
        change: InstanceChange::Put(Box::new(record)),
        expected_revision: expected,
        new_jobs: Vec::new(),
        events: Vec::new(),
    }
}

fn is_conflict<T: std::fmt::Debug>(result: &Result<T>) -> bool {
    matches!(result, Err(Error::Conflict { .. }))
}

pub async fn snapshots_are_immutable_and_idempotent(store: Arc<dyn StateStore>) {
    let bundle = ConfigBundle::from_files(BTreeMap::from([("a.yaml".into(), "x: 1".into())]));
    let snapshot = ConfigSnapshot {
        hash: bundle.hash(),
        bundle,
        created_at: t(0),
        actor: "test".into(),
    };
    store.put_snapshot(&snapshot).await.expect("first put");
    store
        .put_snapshot(&snapshot)
        .await
        .expect("the same snapshot again is fine");
    let read = store.get_snapshot(&snapshot.hash).await.expect("get");
    assert_eq!(read.as_ref(), Some(&snapshot));
    assert_eq!(store.get_snapshot("nope").await.expect("get"), None);
}

fn pointer(hash: &str, channels: &[&str]) -> CurrentConfig {
    CurrentConfig {
        hash: hash.into(),
        revision: 0,
        channels: [(
            ApplicationName::parse("shop").expect("name"),
            channels
                .iter()
                .map(|c| ReleaseChannelName::parse(*c).expect("name"))
                .collect(),
        )]
        .into(),
    }
}

pub async fn current_config_moves_only_from_the_revision_read(store: Arc<dyn StateStore>) {
    assert_eq!(store.current_config().await.expect("read"), None);
    let first = store
        .set_current_config(&pointer("a", &["staging"]), None)
        .await
        .expect("first pointer");
    let b = pointer("b", &["staging", "prod"]);
    assert!(
        is_conflict(&store.set_current_config(&b, None).await),
        "a pointer exists now"
    );
    assert!(is_conflict(
        &store.set_current_config(&b, Some(first + 7)).await
    ));
    let second = store
        .set_current_config(&b, Some(first))
        .await
        .expect("from the revision read");
    assert!(second > first);
    let read = store.current_config().await.expect("read").expect("set");
    assert_eq!(
        read,
        CurrentConfig {
            revision: second,
            ..b
        }
    );
    assert_eq!(
        read.rank(
            &ApplicationName::parse("shop").unwrap(),
            &ReleaseChannelName::parse("prod").unwrap()
        ),
        Some(1)
    );
}

pub async fn creating_an_instance_requires_that_it_does_not_exist(store: Arc<dyn StateStore>) {
    let k = key("shop", "web", "staging");
    let revision = store
        .commit(put(record(&k, None), None))
        .await
        .expect("create");
    assert!(revision >= 1);
    let again = store.commit(put(record(&k, None), None)).await;
    assert!(
        is_conflict(&again),
        "creating twice must conflict, got {again:?}"
    );
    let read = store.get_instance(&k).await.expect("get").expect("exists");
    assert_eq!(read.revision, revision);
    assert_eq!(read.key, k);
}

pub async fn updates_require_the_revision_read_and_a_lost_race_writes_nothing(
    store: Arc<dyn StateStore>,
) {
    let k = key("shop", "web", "staging");
    let r1 = store
        .commit(put(record(&k, None), None))
        .await
        .expect("create");
    let mut changed = record(&k, Some(t(5)));
    changed.state.reason = "second".into();
    let r2 = store
        .commit(put(changed.clone(), Some(r1)))
        .await
        .expect("update");
    assert!(r2 > r1);

    let mut stale = put(record(&k, Some(t(9))), Some(r1));
    stale.new_jobs.push(job("job-stale", &k));
    stale.events.push(event("0001-stale", &k, t(1)));
    assert!(
        is_conflict(&store.commit(stale).await),
        "stale revision must conflict"
    );
    let read = store.get_instance(&k).await.expect("get").expect("exists");
    assert_eq!(read.state.reason, "second");
    assert_eq!(read.revision, r2);
    assert_eq!(
        store
            .get_job(&JobId("job-stale".into()))
            .await
            .expect("get job"),
        None
    );
    assert!(
        store
            .list_events(&EventFilter::default())
            .await
            .expect("events")
            .is_empty()
    );
    assert!(
        is_conflict(
            &store
                .commit(put(record(&key("shop", "x", "y"), None), Some(1)))
                .await
        ),
        "updating a missing instance"
    );
}

pub async fn a_commit_writes_instance_jobs_and_events_together(store: Arc<dyn StateStore>) {
    let k = key("shop", "web", "staging");
    let mut commit = put(record(&k, Some(t(3))), None);
    commit.new_jobs.push(job("job-1", &k));
    commit.events.push(event("0001-a", &k, t(1)));
    commit.events.push(event("0002-b", &k, t(2)));
    store.commit(commit).await.expect("commit");
    let stored = store
        .get_job(&JobId("job-1".into()))
        .await
        .expect("get")
        .expect("job stored");
    assert_eq!(stored, job("job-1", &k));
    let events = store
        .list_events(&EventFilter::default())
        .await
        .expect("events");
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, vec!["0001-a", "0002-b"]);
    assert_eq!(events[0], event("0001-a", &k, t(1)));
}

pub async fn an_existing_job_id_fails_the_whole_commit(store: Arc<dyn StateStore>) {
    let k = key("shop", "web", "staging");
    let mut first = put(record(&k, None), None);
    first.new_jobs.push(job("job-1", &k));
    let r1 = store.commit(first).await.expect("commit");
    let mut replay = put(record(&k, Some(t(1))), Some(r1));
    replay.new_jobs.push(job("job-1", &k));
    assert!(
        is_conflict(&store.commit(replay).await),
        "a job recorded twice is a replayed decision"
    );
    let read = store.get_instance(&k).await.expect("get").expect("exists");
    assert_eq!(
        read.revision, r1,
        "nothing of the failed commit was written"
    );
    assert_eq!(read.next_check_at, None);
}

pub async fn deleting_an_instance_is_conditional_too(store: Arc<dyn StateStore>) {
    let k = key("shop", "web", "staging");
    let r1 = store
        .commit(put(record(&k, Some(t(1))), None))
        .await
        .expect("create");
    let delete = |expected| InstanceCommit {
        change: InstanceChange::Delete(k.clone()),
        expected_revision: Some(expected),
        new_jobs: Vec::new(),
        events: vec![event("0009-removed", &k, t(9))],
    };
    assert!(is_conflict(&store.commit(delete(r1 + 1)).await));
    assert!(store.get_instance(&k).await.expect("get").is_some());
    store.commit(delete(r1)).await.expect("delete");
    assert_eq!(store.get_instance(&k).await.expect("get"), None);
    assert!(
        store
            .due_instances(t(100), 10)
            .await
            .expect("due")
            .is_empty(),
        "deleted instances are never due"
    );
    assert_eq!(
        store
            .list_events(&EventFilter::default())
            .await
            .expect("events")
            .len(),
        1
    );
}

pub async fn instances_are_listed_by_filter(store: Arc<dyn StateStore>) {
    for (app, svc, rc) in [
        ("shop", "web", "staging"),
        ("shop", "web", "prod"),
        ("shop", "api", "prod"),
        ("blog", "web", "prod"),
    ] {
        store
            .commit(put(record(&key(app, svc, rc), None), None))
            .await
            .expect("create");
    }
    let count = |filter: InstanceFilter| {
        let store = store.clone();
        async move { store.list_instances(&filter).await.expect("list").len() }
    };
    assert_eq!(count(InstanceFilter::default()).await, 4);
    assert_eq!(
        count(InstanceFilter {
            application: Some("shop".parse().expect("n")),
            ..Default::default()
        })
        .await,
        3
    );
    assert_eq!(
        count(InstanceFilter {
            application: Some("shop".parse().expect("n")),
            service: Some("web".parse().expect("n")),
            ..Default::default()
        })
        .await,
        2
    );
    assert_eq!(
        count(InstanceFilter {
            release_channel: Some("prod".parse().expect("n")),
            ..Default::default()
        })
        .await,
        3
    );
}

pub async fn due_instances_are_the_ones_whose_time_has_come_earliest_first(
    store: Arc<dyn StateStore>,
) {
    let a = key("shop", "a", "x");
    let b = key("shop", "b", "x");
    let c = key("shop", "c", "x");
    let d = key("shop", "d", "x");
    store
        .commit(put(record(&a, Some(t(30))), None))
        .await
        .expect("a");
    store
        .commit(put(record(&b, Some(t(10))), None))
        .await
        .expect("b");
    store.commit(put(record(&c, None), None)).await.expect("c");
    store
        .commit(put(record(&d, Some(t(99))), None))
        .await
        .expect("d");
    assert_eq!(
        store.due_instances(t(30), 10).await.expect("due"),
        vec![b.clone(), a.clone()]
    );
    assert_eq!(store.due_instances(t(30), 1).await.expect("due"), vec![b]);
    assert!(store.due_instances(t(5), 10).await.expect("due").is_empty());
}

pub async fn a_job_is_claimed_once_and_finished_once(store: Arc<dyn StateStore>) {
    let k = key("shop", "web", "staging");
    let mut commit = put(record(&k, None), None);
    commit.new_jobs.push(job("job-1", &k));
    store.commit(commit).await.expect("commit");
    let id = JobId("job-1".into());
    assert!(store.claim_job(&id, t(1)).await.expect("claim"));
    assert!(
        !store.claim_job(&id, t(2)).await.expect("claim again"),
        "a second claim must lose"
    );
    assert_eq!(
        store.get_job(&id).await.expect("get").expect("job").state,
        JobState::Dispatched {
            at: t(1),
            handle: None
        }
    );
    let handle = JobHandle("arn:aws:ecs:us-east-1:1:task/c/abc".into());
    assert!(store.record_handle(&id, &handle).await.expect("handle"));
    assert_eq!(
        store.get_job(&id).await.expect("get").expect("job").state,
        JobState::Dispatched {
            at: t(1),
            handle: Some(handle.clone())
        },
        "the handle is kept with the dispatch time"
    );
    let result = JobResult {
        outcome: JobOutcome::Exited,
        exit_code: Some(0),
        stdout: "ok".into(),
        stderr_tail: String::new(),
        duration_ms: 5,
        outputs: vec![Artifact::of(
            "plan",
            Artifact::output_key(&id, "plan"),
            b"\x00binary\xff",
        )],
        finished_at: t(3),
    };
    assert!(store.finish_job(&id, &result).await.expect("finish"));
    let mut other = result.clone();
    other.exit_code = Some(1);
    assert!(
        !store.finish_job(&id, &other).await.expect("finish again"),
        "results are recorded once"
    );
    let stored = store.get_job(&id).await.expect("get").expect("job");
    assert_eq!(stored.result(), Some(&result));
    assert!(!store.claim_job(&id, t(4)).await.expect("claim finished"));
    assert!(
        !store.record_handle(&id, &handle).await.expect("handle"),
        "a finished job takes no handle"
    );
    assert!(
        !store
            .record_handle(&JobId("nope".into()), &handle)
            .await
            .expect("unknown job")
    );
    assert!(
        !store
            .finish_job(&JobId("nope".into()), &result)
            .await
            .expect("unknown job")
    );
}

pub async fn releases_are_immutable_versions_and_the_last_pushed_is_latest(
    store: Arc<dyn StateStore>,
) {
    let release = |version: &str, image: &str, at: i64| Release {
        application: "shop".parse().expect("n"),
        service: "web".parse().expect("n"),
        version: version.parse().expect("version"),
        params: BTreeMap::from([("image".to_owned(), ParamValue::DockerImage(image.into()))]),
        config_fingerprint: "f".into(),
        created_at: t(at),
        actor: "ci".into(),
    };
    let (app, svc) = ("shop".parse().expect("n"), "web".parse().expect("n"));
    assert_eq!(
        store.latest_release(&app, &svc).await.expect("latest"),
        None
    );
    store
        .put_release(&release("v1", "r/w:1", 1))
        .await
        .expect("v1");
    store
        .put_release(&release("v2", "r/w:2", 2))
        .await
        .expect("v2");
    assert_eq!(
        store
            .latest_release(&app, &svc)
            .await
            .expect("latest")
            .map(|r| r.version),
        Some("v2".parse().expect("version"))
    );
    // Rolling back by pushing v1 again makes it latest; its record is unchanged.
    store
        .put_release(&release("v1", "r/w:1", 3))
        .await
        .expect("v1 again");
    let latest = store
        .latest_release(&app, &svc)
        .await
        .expect("latest")
        .expect("some");
    assert_eq!(latest.version, "v1");
    assert_eq!(latest.created_at, t(1), "a release's record is immutable");
    assert!(
        is_conflict(&store.put_release(&release("v2", "r/w:other", 4)).await),
        "same version, other parameters"
    );
    let listed: Vec<Version> = store
        .list_releases(&app, &svc, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.version)
        .collect();
    assert_eq!(listed, vec!["v1", "v2"]);
    let other_service: ServiceName = "api".parse().expect("n");
    assert_eq!(
        store
            .latest_release(&app, &other_service)
            .await
            .expect("latest"),
        None
    );
}

pub async fn tokens_are_unique_by_id_and_listed_per_application(store: Arc<dyn StateStore>) {
    use crate::{ApiToken, Scope};
    let token = |id: &str, app: &str| ApiToken {
        id: id.into(),
        application: app.parse().unwrap(),
        scopes: vec![Scope::Release],
        secret_sha256: "ab".repeat(32),
        description: Some("ci".into()),
        created_at: t(1),
        created_by: "cli:alice".into(),
    };
    store.put_token(&token("t1", "shop")).await.unwrap();
    store.put_token(&token("t2", "shop")).await.unwrap();
    store.put_token(&token("t3", "blog")).await.unwrap();
    let again = store.put_token(&token("t1", "blog")).await;
    assert!(
        matches!(again, Err(Error::Conflict { .. })),
        "an id is never reused: {again:?}"
    );
    assert_eq!(
        store.get_token("t1").await.unwrap(),
        Some(token("t1", "shop"))
    );
    assert_eq!(store.get_token("nope").await.unwrap(), None);
    let shop: Vec<String> = store
        .list_tokens(&"shop".parse().unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(shop, vec!["t1".to_owned(), "t2".to_owned()]);
    assert!(store.delete_token("t1").await.unwrap());
    assert!(!store.delete_token("t1").await.unwrap());
    assert_eq!(store.get_token("t1").await.unwrap(), None);
}

pub async fn alerts_are_replaced_by_name(store: Arc<dyn StateStore>) {
    assert_eq!(store.get_alert("high-errors").await.unwrap(), None);
    assert!(store.list_alerts().await.unwrap().is_empty());
    let firing = AlertState {
        name: "high-errors".into(),
        firing: true,
        since: t(1),
        actor: "cli:alice".into(),
        summary: Some("5xx above 2%".into()),
    };
    store.put_alert(&firing).await.unwrap();
    let resolved = AlertState {
        firing: false,
        since: t(2),
        summary: None,
        ..firing.clone()
    };
    store.put_alert(&resolved).await.unwrap();
    let other = AlertState {
        name: "disk-full".into(),
        ..firing.clone()
    };
    store.put_alert(&other).await.unwrap();
    assert_eq!(
        store.get_alert("high-errors").await.unwrap(),
        Some(resolved.clone())
    );
    let names: Vec<String> = store
        .list_alerts()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(
        names,
        vec!["disk-full".to_owned(), "high-errors".to_owned()]
    );
}

pub async fn approvals_are_listed_per_instance(store: Arc<dyn StateStore>) {
    let prod = key("shop", "web", "prod");
    let staging = key("shop", "web", "staging");
    let approval = |k: &InstanceKey, version: &str, at: i64| Approval {
        instance: k.clone(),
        version: version.parse().expect("version"),
        plan_sha256: None,
        actor: "alice".into(),
        at: t(at),
    };
    store
        .put_approval(&approval(&prod, "v1", 1))
        .await
        .expect("put");
    store
        .put_approval(&approval(&prod, "v2", 2))
        .await
        .expect("put");
    store
        .put_approval(&approval(&staging, "v2", 3))
        .await
        .expect("put");
    let mut versions: Vec<Version> = store
        .list_approvals(&prod)
        .await
        .expect("list")
        .into_iter()
        .map(|a| a.version)
        .collect();
    versions.sort();
    assert_eq!(versions, vec!["v1", "v2"]);
    assert_eq!(
        store.list_approvals(&staging).await.expect("list"),
        vec![approval(&staging, "v2", 3)]
    );
}

pub async fn events_are_appended_once_and_listed_by_filter_and_limit(store: Arc<dyn StateStore>) {
    let web = key("shop", "web", "prod");
    let api = key("shop", "api", "staging");
    let blog = key("blog", "web", "prod");
    let events = vec![
        event("0001", &web, t(1)),
        event("0002", &api, t(2)),
        event("0003", &blog, t(3)),
        event("0004", &web, t(4)),
    ];
    store.append_events(&events).await.expect("append");
    store
        .append_events(&events[..1])
        .await
        .expect("appending the same id again is a no-op");
    let ids = |events: Vec<Event>| events.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store
            .list_events(&EventFilter::default())
            .await
            .expect("all")),
        vec!["0001", "0002", "0003", "0004"]
    );
    let shop = EventFilter {
        application: Some("shop".parse().expect("n")),
        ..Default::default()
    };
    assert_eq!(
        ids(store.list_events(&shop).await.expect("shop")),
        vec!["0001", "0002", "0004"]
    );
    let web_prod = EventFilter {
        application: Some("shop".parse().expect("n")),
        service: Some("web".parse().expect("n")),
        release_channel: Some("prod".parse().expect("n")),
        limit: None,
    };
    assert_eq!(
        ids(store.list_events(&web_prod).await.expect("web")),
        vec!["0001", "0004"]
    );
    let newest_two = EventFilter {
        limit: Some(2),
        ..Default::default()
    };
    assert_eq!(
        ids(store.list_events(&newest_two).await.expect("limit")),
        vec!["0003", "0004"]
    );
}

pub async fn concurrent_writers_of_one_revision_have_exactly_one_winner(
    store: Arc<dyn StateStore>,
) {
    let k = key("shop", "web", "staging");
    let r1 = store
        .commit(put(record(&k, None), None))
        .await
        .expect("create");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let mut r = record(&k, None);
            r.state.reason = format!("writer {i}");
            let mut commit = put(r, Some(r1));
            commit.new_jobs.push(job(&format!("job-{i}"), &k));
            store.commit(commit).await
        }));
    }
    let mut winners = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(_) => winners += 1,
            Err(Error::Conflict { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(winners, 1, "exactly one writer of revision {r1} may win");
    let read = store.get_instance(&k).await.expect("get").expect("exists");
    let winner: usize = read
        .state
        .reason
        .trim_start_matches("writer ")
        .parse()
        .expect("a writer");
    for i in 0..8 {
        let stored = store
            .get_job(&JobId(format!("job-{i}")))
            .await
            .expect("get");
        assert_eq!(
            stored.is_some(),
            i == winner,
            "only the winner's job is recorded"
        );
    }
}
