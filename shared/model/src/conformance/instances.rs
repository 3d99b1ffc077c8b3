//! Conformance: service instances, their commits, due times and jobs.

use std::sync::Arc;

use crate::error::Error;
use crate::ports::*;
use crate::*;

use super::*;

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
        finished_jobs: Vec::new(),
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

pub async fn instances_read_together_come_in_the_order_asked(store: Arc<dyn StateStore>) {
    for (svc, rc) in [("web", "staging"), ("web", "prod"), ("web-2", "prod")] {
        store
            .commit(put(record(&key("shop", svc, rc), None), None))
            .await
            .expect("create");
    }
    let asked = [
        key("shop", "web", "prod"),
        key("shop", "web", "canary"),
        key("shop", "web", "staging"),
    ];
    let found = store.get_instances(&asked).await.expect("read");
    let keys: Vec<Option<InstanceKey>> = found.into_iter().map(|r| r.map(|r| r.key)).collect();
    assert_eq!(
        keys,
        vec![Some(asked[0].clone()), None, Some(asked[2].clone())],
        "one service's channels, missing ones as None, no other service's"
    );
    let mixed = [key("shop", "web-2", "prod"), key("shop", "web", "prod")];
    let found = store.get_instances(&mixed).await.expect("read");
    let keys: Vec<Option<InstanceKey>> = found.into_iter().map(|r| r.map(|r| r.key)).collect();
    assert_eq!(keys, vec![Some(mixed[0].clone()), Some(mixed[1].clone())]);
    assert!(store.get_instances(&[]).await.expect("read").is_empty());
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

/// A step that ran a job inline records its result with the next
/// decision, in one write: the result is kept once, and a commit carrying a
/// result for a job that already has one writes nothing at all (someone
/// else's report came first; the step decides again from what was kept).
pub async fn a_commit_records_a_job_result_once_with_the_instance(store: Arc<dyn StateStore>) {
    let k = key("shop", "web", "staging");
    let mut create = put(record(&k, None), None);
    create.new_jobs.push(job("job-1", &k));
    let r1 = store.commit(create).await.expect("create");
    let id = JobId("job-1".into());
    assert!(store.claim_job(&id, t(1)).await.expect("claim"));
    let exited = JobResult::without_output(JobOutcome::Exited, t(5));
    let mut finish = put(record(&k, Some(t(9))), Some(r1));
    finish.finished_jobs.push((id.clone(), exited.clone()));
    let r2 = store.commit(finish).await.expect("commit with the result");
    assert_eq!(
        store
            .get_job(&id)
            .await
            .expect("get")
            .expect("job")
            .result(),
        Some(&exited)
    );
    assert!(
        !store.finish_job(&id, &exited).await.expect("finish again"),
        "the commit recorded it"
    );

    let late = JobResult::without_output(JobOutcome::TimedOut, t(7));
    let mut again = put(record(&k, Some(t(11))), Some(r2));
    again.finished_jobs.push((id.clone(), late));
    assert!(is_conflict(&store.commit(again).await), "a second result");
    let kept = store
        .get_instance(&k)
        .await
        .expect("get")
        .expect("instance");
    assert_eq!(kept.revision, r2, "the instance was not written either");
    assert_eq!(kept.next_check_at, Some(t(9)));
    assert_eq!(
        store
            .get_job(&id)
            .await
            .expect("get")
            .expect("job")
            .result(),
        Some(&exited),
        "the first result is kept"
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
            .get_job(&JobId(format!("job-{i}").into()))
            .await
            .expect("get");
        assert_eq!(
            stored.is_some(),
            i == winner,
            "only the winner's job is recorded"
        );
    }
}

/// A check of a converged instance that found nothing.
fn quiet_check(at: i64, job_seq: u64) -> QuietCheck {
    QuietCheck {
        at: t(at),
        last_fetch: FetchObservation {
            at: t(at),
            seq: job_seq,
            version: "v1".parse().expect("version"),
            verdict: FetchVerdict::Converged,
            summary: "nothing to do".into(),
            takeovers: Vec::new(),
            traffic_percent: None,
        },
        job: JobSummary {
            job_id: JobId(format!("fetch-{job_seq}").into()),
            kind: JobKind::Fetch,
            version: "v1".parse().expect("version"),
            attempt: 1,
            outcome: JobOutcome::Exited,
            exit_code: Some(0),
            finished_at: t(at),
            duration_ms: 5,
            stderr_tail: String::new(),
        },
        job_seq,
        next_check_at: t(at + 300),
    }
}

pub async fn a_quiet_check_is_read_back_until_the_instance_is_written_again(
    store: Arc<dyn StateStore>,
) {
    let k = key("shop", "web", "prod");
    let other = key("shop", "web", "prod-eu");
    store
        .commit(put(record(&other, None), None))
        .await
        .expect("create the neighbour");
    store
        .commit(put(record(&k, Some(t(10))), None))
        .await
        .expect("create");
    let read = store.get_instance(&k).await.expect("get").expect("exists");

    assert!(
        store
            .record_check(&read, &quiet_check(20, 1))
            .await
            .expect("check")
    );
    let checked = store.get_instance(&k).await.expect("get").expect("exists");
    let mut expected = read.clone();
    expected.take_check(&quiet_check(20, 1));
    assert_eq!(checked.state, expected.state, "the check is read back");
    assert_eq!(checked.next_check_at, Some(t(320)));
    let listed = store
        .list_instances(&InstanceFilter::default())
        .await
        .expect("list");
    assert_eq!(listed.len(), 2, "a check is no instance of its own");
    let listed = listed.iter().find(|r| r.key == k).expect("listed");
    assert_eq!(listed.state, checked.state, "listed with its check");
    let neighbour = store
        .get_instance(&other)
        .await
        .expect("get")
        .expect("exists");
    assert!(neighbour.state.last_fetch.is_none(), "not the neighbour's");

    // A duplicate of the same check, made from the same read, loses.
    assert!(
        !store
            .record_check(&read, &quiet_check(21, 1))
            .await
            .expect("duplicate")
    );
    // The next one, made from the read that has the first, is recorded.
    assert!(
        store
            .record_check(&checked, &quiet_check(320, 2))
            .await
            .expect("next check")
    );
    let checked = store.get_instance(&k).await.expect("get").expect("exists");
    assert_eq!(checked.state.job_seq, 2);

    // A full write of the instance, from a read with the check, carries it
    // on; a check made from the read before that write is not taken up.
    let mut changed = checked.clone();
    changed.state.reason = "written again".into();
    store
        .commit(put(changed, Some(checked.revision)))
        .await
        .expect("write again");
    let stale = store
        .record_check(&checked, &quiet_check(620, 3))
        .await
        .expect("stale");
    let read = store.get_instance(&k).await.expect("get").expect("exists");
    assert_eq!(read.state.reason, "written again");
    assert_eq!(
        read.state.job_seq, 2,
        "the stale check is not taken up (recorded: {stale})"
    );
    assert_eq!(read.next_check_at, Some(t(620)));
}

pub async fn a_deleted_instance_added_again_has_none_of_its_old_checks(store: Arc<dyn StateStore>) {
    let k = key("shop", "web", "prod");
    store
        .commit(put(record(&k, Some(t(10))), None))
        .await
        .expect("create");
    let read = store.get_instance(&k).await.expect("get").expect("exists");
    assert!(
        store
            .record_check(&read, &quiet_check(20, 1))
            .await
            .expect("check")
    );
    let read = store.get_instance(&k).await.expect("get").expect("exists");
    store
        .commit(InstanceCommit {
            change: InstanceChange::Delete(k.clone()),
            expected_revision: Some(read.revision),
            new_jobs: Vec::new(),
            finished_jobs: Vec::new(),
            events: Vec::new(),
        })
        .await
        .expect("delete");
    store
        .commit(put(record(&k, None), None))
        .await
        .expect("add again");
    let fresh = store.get_instance(&k).await.expect("get").expect("exists");
    assert!(fresh.state.last_fetch.is_none(), "no old check: {fresh:?}");
}
