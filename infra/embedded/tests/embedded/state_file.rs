//! The state file's faults: an emptied file is never taken for a fresh
//! start.

use vergence_embedded::SqliteStore;

#[test]
fn an_empty_state_file_is_refused_not_opened_as_a_fresh_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    std::fs::write(&path, b"").unwrap();
    let Err(error) = SqliteStore::open(&path) else {
        panic!("an empty file must not open");
    };
    let message = error.to_string();
    assert!(message.contains("is empty (0 bytes)"), "{message}");
    assert!(message.contains("delete it to start over"), "{message}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "nothing written"
    );
}

#[test]
fn a_missing_state_file_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deeper/state.db");
    SqliteStore::open(&path).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
}

/// A fetch polled every few seconds finishes a job each time; each keeps
/// up to 1 MiB of output. Only the newest few per instance are kept.
#[tokio::test]
async fn finished_jobs_are_kept_to_the_newest_few_per_instance() {
    use std::sync::Arc;
    use vergence_embedded::FINISHED_JOBS_KEPT;
    use vergence_model::conformance::{job, record, t};
    use vergence_model::ports::{InstanceChange, InstanceCommit, StateStore};
    use vergence_model::{InstanceKey, JobId, JobOutcome, JobResult};

    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> =
        Arc::new(SqliteStore::open(&dir.path().join("state.db")).unwrap());
    let key = |service: &str| {
        InstanceKey::new(
            "shop".parse().unwrap(),
            service.parse().unwrap(),
            "prod".parse().unwrap(),
        )
    };
    let (busy, quiet) = (key("web"), key("api"));
    let mut revision = None;
    for (key, jobs) in [(&busy, 25_i64), (&quiet, 3)] {
        for n in 0..jobs {
            let id = format!("{}-{n}", key.service);
            let commit = InstanceCommit {
                change: InstanceChange::Put(Box::new(record(key, None))),
                expected_revision: if n == 0 { None } else { revision },
                new_jobs: vec![job(&id, key)],
                finished_jobs: Vec::new(),
                events: Vec::new(),
            };
            revision = Some(store.commit(commit).await.unwrap());
            let id = JobId(id.into());
            assert!(store.claim_job(&id, t(n)).await.unwrap());
            let result = JobResult::without_output(JobOutcome::Exited, t(n));
            assert!(store.finish_job(&id, &result).await.unwrap());
        }
    }
    let kept = |service: &str, n: usize| {
        let store = store.clone();
        let id = JobId(format!("{service}-{n}").into());
        async move { store.get_job(&id).await.unwrap().is_some() }
    };
    for n in 0..25 {
        assert_eq!(
            kept("web", n).await,
            n >= 25 - FINISHED_JOBS_KEPT,
            "job web-{n} of 25"
        );
    }
    for n in 0..3 {
        assert!(kept("api", n).await, "another instance's jobs are its own");
    }
}

/// A state with one instance in it, closed; the file's bytes.
async fn a_written_state(path: &std::path::Path) -> Vec<u8> {
    use vergence_model::InstanceKey;
    use vergence_model::conformance::record;
    use vergence_model::ports::{InstanceChange, InstanceCommit, InstanceStore};
    let store = SqliteStore::open(path).unwrap();
    let key = InstanceKey::new(
        "shop".parse().unwrap(),
        "web".parse().unwrap(),
        "prod".parse().unwrap(),
    );
    let commit = InstanceCommit {
        change: InstanceChange::Put(Box::new(record(&key, None))),
        expected_revision: None,
        new_jobs: Vec::new(),
        finished_jobs: Vec::new(),
        events: Vec::new(),
    };
    store.commit(commit).await.unwrap();
    drop(store);
    std::fs::read(path).unwrap()
}

/// Opening, then listing what is there: either fails, with the file named
/// or SQLite's own words; neither may pass for an empty state.
async fn read_back(path: &std::path::Path) -> Result<usize, String> {
    use vergence_model::ports::{InstanceFilter, InstanceStore};
    let store = SqliteStore::open(path).map_err(|e| e.to_string())?;
    store
        .list_instances(&InstanceFilter::default())
        .await
        .map(|list| list.len())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_truncated_state_file_is_an_error_never_an_empty_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let bytes = a_written_state(&path).await;
    assert_eq!(read_back(&path).await, Ok(1));
    // Cut inside the first page, and after it: the schema names tables
    // whose pages are gone.
    assert!(bytes.len() > 4096);
    for keep in [100, 4096] {
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let read = read_back(&path).await;
        assert!(read.is_err(), "cut to {keep} bytes, read {read:?}");
    }
}

#[tokio::test]
async fn a_file_that_is_not_a_state_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let garbage: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(&path, &garbage).unwrap();
    let Err(error) = read_back(&path).await else {
        panic!("garbage opened as a state");
    };
    assert!(
        error.contains("state.db") || error.contains("not a database"),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), garbage, "nothing written");
}

/// Concurrent steps' writes share transactions: writes made while another
/// process holds the write lock are committed together once it lets go,
/// not in a transaction each. One that conflicts fails alone and leaves
/// nothing; the others stand.
#[tokio::test(flavor = "current_thread")]
async fn writes_made_together_are_committed_together_and_a_failing_one_fails_alone() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    use vergence_model::conformance::record;
    use vergence_model::ports::{InstanceChange, InstanceCommit, InstanceFilter, InstanceStore};
    use vergence_model::{Error, InstanceKey};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).unwrap();
    let key = |service: String| {
        InstanceKey::new(
            "shop".parse().unwrap(),
            service.parse().unwrap(),
            "prod".parse().unwrap(),
        )
    };
    let commit = |key: &InstanceKey, expected_revision| InstanceCommit {
        change: InstanceChange::Put(Box::new(record(key, None))),
        expected_revision,
        new_jobs: Vec::new(),
        finished_jobs: Vec::new(),
        events: Vec::new(),
    };
    // Another process (a `vergence release`) holds the write lock.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let before = store.transactions_committed();

    const WRITES: usize = 20;
    let mut writes: Vec<Pin<Box<dyn Future<Output = vergence_model::Result<u64>> + '_>>> = (0
        ..WRITES)
        .map(|n| {
            let c = commit(&key(format!("svc-{n}")), None);
            Box::pin(store.commit(c)) as Pin<Box<dyn Future<Output = _>>>
        })
        .collect();
    // The one that conflicts: it expects a revision the instance never had.
    writes.insert(
        WRITES / 2,
        Box::pin(store.commit(commit(&key("conflicting".into()), Some(7)))),
    );
    // Every write is made (polled once) while the lock is held.
    std::future::poll_fn(|cx| {
        for write in &mut writes {
            assert!(
                write.as_mut().poll(cx).is_pending(),
                "written under another's lock"
            );
        }
        Poll::Ready(())
    })
    .await;
    other.execute_batch("COMMIT").unwrap();

    let mut results = Vec::new();
    for write in writes {
        results.push(write.await);
    }
    let conflicts = results
        .iter()
        .filter(|r| matches!(r, Err(Error::Conflict { .. })))
        .count();
    assert_eq!(conflicts, 1, "{results:?}");
    assert_eq!(
        results.iter().filter(|r| matches!(r, Ok(1))).count(),
        WRITES,
        "{results:?}"
    );
    let transactions = store.transactions_committed() - before;
    // The first may have been taken alone before the others came.
    assert!(
        transactions <= 2,
        "{WRITES} writes made together took {transactions} transactions"
    );
    let stored = store
        .list_instances(&InstanceFilter::default())
        .await
        .unwrap();
    assert_eq!(stored.len(), WRITES, "the conflicting write left nothing");
    assert!(
        stored
            .iter()
            .all(|r| r.key.service.as_str() != "conflicting")
    );
}
