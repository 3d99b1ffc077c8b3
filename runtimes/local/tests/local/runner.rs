//! `LocalRunner` as the engine uses it: results reach the sink, the
//! concurrency limit holds, jobs for other runners are refused, and jobs
//! in hand are polled, stopped and adopted.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    CollectingSink, artifacts, job, read, running_in_group, script, wait_for_file,
};
use vergence_model::Error;
use vergence_model::ports::{JobProgress, Runner};
use vergence_model::{JobId, JobOutcome, JobRecord, KubernetesRunnerSpec, RunnerSpec};
use vergence_runner_local::LocalRunner;

/// Records when it starts and ends (ns since the epoch) in files named after
/// `$NAME`, sleeping in between.
const TIMED: &str = "date +%s%N > \"$NAME.start\"\nsleep 1\ndate +%s%N > \"$NAME.end\"";

fn timed_job(root: &Path, name: &str) -> JobRecord {
    let mut job = job(root, &["./timed.sh"]);
    job.id = JobId(format!("job-{name}").into());
    Arc::make_mut(&mut job.spec)
        .env
        .insert("NAME".into(), name.into());
    job
}

fn span(root: &Path, name: &str) -> (u128, u128) {
    let at = |end: &str| {
        read(root.join(format!("{name}.{end}")))
            .trim()
            .parse()
            .unwrap()
    };
    (at("start"), at("end"))
}

/// Runs jobs `a` and `b` through a runner limited to `max_concurrent` and
/// returns their (start, end) times.
async fn run_two(max_concurrent: usize) -> ((u128, u128), (u128, u128)) {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "timed.sh", TIMED);
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::new(sink.clone(), artifacts(), max_concurrent);

    runner.dispatch(&timed_job(root.path(), "a")).await.unwrap();
    runner.dispatch(&timed_job(root.path(), "b")).await.unwrap();
    let results = sink.wait_for(2, Duration::from_secs(20)).await;

    for (id, result) in &results {
        assert!(result.exited_with(0), "{id}: {result:?}");
    }
    (span(root.path(), "a"), span(root.path(), "b"))
}

#[tokio::test]
async fn background_jobs_report_to_the_sink() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "slow.sh", "sleep 0.5\necho finished");
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::new(sink.clone(), artifacts(), 4);

    runner
        .dispatch(&job(root.path(), &["./slow.sh"]))
        .await
        .unwrap();
    assert_eq!(sink.count(), 0, "dispatch does not wait for the job");

    let results = sink.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(results[0].0, JobId("job-1".into()));
    assert!(results[0].1.exited_with(0), "{:?}", results[0].1);
    assert_eq!(results[0].1.stdout, "finished\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_permit_runs_jobs_one_after_the_other() {
    let ((a_start, a_end), (b_start, b_end)) = run_two(1).await;
    assert!(
        a_end <= b_start || b_end <= a_start,
        "jobs overlapped: a {a_start}..{a_end}, b {b_start}..{b_end}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permits_run_jobs_at_the_same_time() {
    let ((a_start, a_end), (b_start, b_end)) = run_two(2).await;
    assert!(
        a_start < b_end && b_start < a_end,
        "jobs did not overlap: a {a_start}..{a_end}, b {b_start}..{b_end}"
    );
}

#[tokio::test]
async fn inline_dispatch_returns_after_the_result_was_delivered() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "quick.sh", "echo inline");
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::inline(sink.clone(), artifacts());

    runner
        .dispatch(&job(root.path(), &["./quick.sh"]))
        .await
        .unwrap();

    let results = sink.results.lock().unwrap().clone();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].1.stdout, "inline\n");
}

#[tokio::test]
async fn a_failing_sink_does_not_fail_the_dispatch() {
    let root = tempfile::tempdir().unwrap();
    let sink = Arc::new(CollectingSink {
        fail: true,
        ..CollectingSink::default()
    });
    let runner = LocalRunner::inline(sink.clone(), artifacts());
    runner.dispatch(&job(root.path(), &["true"])).await.unwrap();
    assert_eq!(sink.count(), 1);
}

#[tokio::test]
async fn a_result_the_store_refuses_for_a_while_is_recorded_on_a_later_try() {
    let root = tempfile::tempdir().unwrap();
    let sink = Arc::new(CollectingSink {
        busy_for: 3,
        ..CollectingSink::default()
    });
    let runner = LocalRunner::inline(sink.clone(), artifacts());
    let job = job(root.path(), &["true"]);
    runner.dispatch(&job).await.unwrap();
    assert_eq!(sink.count(), 4, "three refusals, then recorded");
    // Recorded: nothing kept back for the engine.
    assert!(matches!(
        runner.poll(&job).await.unwrap(),
        JobProgress::Unknown
    ));
}

#[tokio::test]
async fn a_result_the_store_never_takes_is_handed_to_the_engine_when_it_asks() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "quick.sh", "echo ran");
    let sink = Arc::new(CollectingSink {
        fail: true,
        ..CollectingSink::default()
    });
    let runner = LocalRunner::inline(sink.clone(), artifacts());
    let job = job(root.path(), &["./quick.sh"]);
    runner.dispatch(&job).await.unwrap();
    assert_eq!(sink.count(), 1, "a permanent error is not retried");
    let JobProgress::Finished(result) = runner.poll(&job).await.unwrap() else {
        panic!("the result was not kept");
    };
    assert_eq!(result.stdout, "ran\n");
}

#[tokio::test]
async fn jobs_for_other_runners_are_refused_without_running() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "deploy.sh", "touch ran");
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::new(sink.clone(), artifacts(), 1);
    let mut job = job(root.path(), &["./deploy.sh"]);
    Arc::make_mut(&mut job.spec).runner = RunnerSpec::Kubernetes(KubernetesRunnerSpec {
        agent: "prod".into(),
        namespace: None,
        service_account: None,
    });

    let error = runner.dispatch(&job).await.unwrap_err();

    match error {
        Error::Runner { runner, message } => {
            assert_eq!(runner, "local");
            assert!(message.contains("no kubernetes runner"), "{message}");
        }
        other => panic!("expected a runner error, got {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.count(), 0);
    assert!(!root.path().join("ran").exists());
}

fn stopped(reason: &str) -> JobOutcome {
    JobOutcome::Stopped {
        reason: reason.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_polled_as_running_and_stopped_with_its_whole_group() {
    let root = tempfile::tempdir().unwrap();
    script(
        root.path(),
        "hang.sh",
        // The leader file appears, whole, once the job has printed: the
        // test stops it from then on and expects what it printed.
        "sleep 1000 &\necho started\necho $$ > leader.tmp && mv leader.tmp leader\nsleep 1000",
    );
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::new(sink.clone(), artifacts(), 2);
    let job = job(root.path(), &["./hang.sh"]);
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Unknown);

    runner.dispatch(&job).await.unwrap();
    wait_for_file(&root.path().join("leader"), Duration::from_secs(10)).await;
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Running);
    runner.stop(&job, "superseded by v43").await.unwrap();

    // `stop` returns once the result was delivered.
    let results = sink.results.lock().unwrap().clone();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].1.outcome, stopped("superseded by v43"));
    assert_eq!(results[0].1.stdout, "started\n");
    let leader = read(root.path().join("leader")).trim().parse().unwrap();
    assert_eq!(running_in_group(leader), Vec::<i32>::new());
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Unknown);
    // Stopping again, or a job never seen, does nothing.
    runner.stop(&job, "again").await.unwrap();
    assert_eq!(sink.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stopped_while_it_waits_for_its_turn_never_starts() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "first.sh", "touch first\nsleep 1000");
    script(root.path(), "second.sh", "touch second");
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::new(sink.clone(), artifacts(), 1);
    let first = job(root.path(), &["./first.sh"]);
    let mut second = job(root.path(), &["./second.sh"]);
    second.id = JobId("job-2".into());

    runner.dispatch(&first).await.unwrap();
    runner.dispatch(&second).await.unwrap();
    wait_for_file(&root.path().join("first"), Duration::from_secs(10)).await;
    assert_eq!(runner.poll(&second).await.unwrap(), JobProgress::Running);
    runner.stop(&second, "rolled back").await.unwrap();
    runner.stop(&first, "rolled back").await.unwrap();

    let results = sink.wait_for(2, Duration::from_secs(1)).await;
    assert_eq!(results[0].0, JobId("job-2".into()));
    assert_eq!(results[0].1.outcome, stopped("rolled back"));
    assert_eq!(results[1].1.outcome, stopped("rolled back"));
    assert!(!root.path().join("second").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_jobs_start_in_the_order_they_were_dispatched() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "mark.sh", "echo \"$1\" >> order");
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::new(sink.clone(), artifacts(), 1);
    let mut expected = String::new();
    for n in 0..12 {
        let mut job = job(root.path(), &["./mark.sh", &n.to_string()]);
        job.id = JobId(format!("job-{n}").into());
        runner.dispatch(&job).await.unwrap();
        expected.push_str(&format!("{n}\n"));
    }
    sink.wait_for(12, Duration::from_secs(20)).await;
    assert_eq!(read(root.path().join("order")), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatching_a_job_already_in_hand_adopts_it() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "count.sh", "echo run >> runs\nsleep 0.5");
    let sink = Arc::new(CollectingSink::default());
    let runner = LocalRunner::new(sink.clone(), artifacts(), 2);
    let job = job(root.path(), &["./count.sh"]);

    runner.dispatch(&job).await.unwrap();
    runner.dispatch(&job).await.unwrap();
    sink.wait_for(1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    assert_eq!(sink.count(), 1);
    assert_eq!(read(root.path().join("runs")), "run\n");
}
