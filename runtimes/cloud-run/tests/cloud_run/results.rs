//! How results come back: exit codes from the task's last attempt, output
//! from Cloud Logging (or from the wrapper's uploads), the platform's
//! reasons, timeouts, cancellation, and executions that are gone.

use std::time::{Duration, Instant};

use vergence_fake_cloud_run::{FakeCloudRun, NeverEndingExecutor};
use vergence_model::JobOutcome;

use crate::*;

#[tokio::test]
async fn exit_codes_0_2_and_1_come_back_from_the_task_attempt() {
    let h = Harness::start().await;

    for code in [0, 2, 1] {
        let result = h
            .run(&shell_job(
                &format!("fetch-{code}"),
                &format!("exit {code}"),
            ))
            .await;

        assert_eq!(
            result.outcome,
            JobOutcome::Exited,
            "exit {code}: {result:?}"
        );
        assert_eq!(result.exit_code, Some(code));
    }
    // Success is read from the execution alone; a failure's code from its task.
    assert_eq!(h.requests_ending("GET", "/tasks").len(), 2);
}

#[tokio::test]
async fn stdout_and_stderr_are_read_from_cloud_logging_by_execution() {
    let h = Harness::start().await;
    // Two runs of one Cloud Run job at once: each reads only its own lines.
    let a = dispatch(
        &h.runner,
        &shell_job("fetch-a", "echo a1; echo 'oops a' >&2; sleep 0.2; echo a2"),
    )
    .await;
    let b = dispatch(
        &h.runner,
        &shell_job("fetch-b", "echo b1; sleep 0.1; echo b2 >&2"),
    )
    .await;
    assert_eq!(
        cloud_run_job_of(&handle_of(&a)),
        cloud_run_job_of(&handle_of(&b))
    );

    let a = finish(&h.runner, &a).await;
    let b = finish(&h.runner, &b).await;

    assert_eq!(
        (a.stdout.as_str(), a.stderr_tail.as_str()),
        ("a1\na2\n", "oops a\n")
    );
    assert_eq!(
        (b.stdout.as_str(), b.stderr_tail.as_str()),
        ("b1\n", "b2\n")
    );
    assert!(a.duration_ms >= 200, "{}", a.duration_ms);
    let listed = h.requests_ending("POST", "/entries:list");
    assert_eq!(listed.len(), 4, "one list per stream and job");
    let filter = listed[0].body.as_ref().unwrap()["filter"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        filter.contains(r#"labels."run.googleapis.com/execution_name"="#),
        "{filter}"
    );
}

#[tokio::test]
async fn output_is_read_up_to_the_stdout_head_and_the_stderr_tail() {
    let h = Harness::start().await;
    // 11,000 lines of 101 bytes: more than 1 MiB of stdout.
    let script = "yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789 | head -n 11000; seq 1 3000 >&2";

    let result = h.run(&shell_job("fetch-1", script)).await;

    assert!(result.exited_with(0));
    assert_eq!(result.stdout.len(), JobResult::MAX_STDOUT);
    assert!(result.stdout.starts_with("0123456789"));
    assert_eq!(result.stderr_tail.len(), JobResult::STDERR_TAIL);
    assert!(result.stderr_tail.ends_with("2999\n3000\n"));
    // Stdout stops at its bound (11 of 11 pages), stderr after one page.
    let pages = h.requests_ending("POST", "/entries:list").len();
    assert!(pages <= 12, "{pages} pages read");
}

#[tokio::test]
async fn a_failed_execution_without_exit_code_is_a_platform_failure_with_the_message() {
    let h = Harness::start().await;

    let result = h
        .run(&job("fetch-1", "missing/deploy:1", &["deploy"]))
        .await;

    assert_eq!(result.exit_code, None);
    let JobOutcome::PlatformFailed { message } = &result.outcome else {
        panic!("{result:?}");
    };
    assert!(
        message.contains("Image 'missing/deploy:1' not found."),
        "{message}"
    );
    assert!(
        result.describe().contains("not found"),
        "{}",
        result.describe()
    );
}

#[tokio::test]
async fn a_job_that_never_finishes_times_out_on_the_platform() {
    let never = FakeCloudRun::builder().executor(NeverEndingExecutor);
    let h = Harness::with(never, settings()).await;
    let mut stuck = shell_job("apply-1", "sleep 600");
    Arc::make_mut(&mut stuck.spec).timeout = SignedDuration::from_secs(1);
    let began = Instant::now();

    let result = h.run(&stuck).await;

    assert_eq!(result.outcome, JobOutcome::TimedOut, "{result:?}");
    assert!(began.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn stop_cancels_a_running_execution() {
    let never = FakeCloudRun::builder().executor(NeverEndingExecutor);
    let h = Harness::with(never, settings()).await;
    let apply = dispatch(&h.runner, &shell_job("apply-1", "sleep 600")).await;
    let execution = handle_of(&apply);
    until_running(&h.fake, &execution).await;
    assert_eq!(h.runner.poll(&apply).await.unwrap(), JobProgress::Running);

    h.runner.stop(&apply, "superseded by v8").await.unwrap();

    let result = finish(&h.runner, &apply).await;
    let JobOutcome::Stopped { reason } = &result.outcome else {
        panic!("{result:?}");
    };
    assert!(reason.starts_with("cancelled on Cloud Run"), "{reason}");
    assert_eq!(h.requests_ending("POST", ":cancel").len(), 1);
    // Stopping again, or stopping what no longer exists, is fine.
    h.runner.stop(&apply, "again").await.unwrap();
    h.fake
        .executions_client()
        .await
        .unwrap()
        .delete_execution()
        .set_name(&execution)
        .send()
        .await
        .unwrap();
    h.runner.stop(&apply, "once more").await.unwrap();
}

#[tokio::test]
async fn an_execution_that_no_longer_exists_is_unknown() {
    let h = Harness::start().await;
    let apply = dispatch(&h.runner, &shell_job("apply-1", "true")).await;
    finish(&h.runner, &apply).await;

    h.fake
        .executions_client()
        .await
        .unwrap()
        .delete_execution()
        .set_name(handle_of(&apply))
        .send()
        .await
        .unwrap();

    assert_eq!(h.runner.poll(&apply).await.unwrap(), JobProgress::Unknown);
}

#[tokio::test]
async fn output_that_reaches_cloud_logging_after_the_end_is_waited_for() {
    let lagging = FakeCloudRun::builder().log_delay(Duration::from_millis(1500));
    let h = Harness::with(lagging, settings()).await;
    let patient = h
        .another_runner(CloudRunSettings {
            log_grace: Duration::from_secs(3),
            ..settings()
        })
        .await;
    let fetch = dispatch(&h.runner, &shell_job("fetch-1", "echo late line")).await;
    let execution = handle_of(&fetch);
    let deadline = Instant::now() + Duration::from_secs(10);
    while h
        .fake
        .execution(&execution)
        .unwrap()
        .get("completionTime")
        .is_none()
    {
        assert!(Instant::now() < deadline, "{execution} never completed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Without a grace, the result is read before the lines have arrived.
    let hasty = finish(&h.runner, &fetch).await;
    assert_eq!(patient.poll(&fetch).await.unwrap(), JobProgress::Running);
    // Never past the deadline: the engine would take it for a stuck job.
    let due = JobRecord {
        deadline: Timestamp::now(),
        ..fetch.clone()
    };
    assert!(matches!(
        patient.poll(&due).await.unwrap(),
        JobProgress::Finished(_)
    ));
    let waited = finish(&patient, &fetch).await;

    assert!(hasty.exited_with(0) && hasty.stdout.is_empty(), "{hasty:?}");
    assert_eq!(waited.stdout, "late line\n");
}

#[tokio::test]
async fn streams_the_wrapper_uploaded_win_over_cloud_logging() {
    let h = Harness::start().await;
    let script = r#"echo 'progress noise'
printf '{"objects":[]}' > out
printf 'exact stderr\n' > err
curl -sf -T out "$VERGENCE_STDOUT_URL" && curl -sf -T err "$VERGENCE_STDERR_URL""#;

    let result = h.run(&shell_job("fetch-1", script)).await;

    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout, r#"{"objects":[]}"#);
    assert_eq!(result.stderr_tail, "exact stderr\n");
    assert!(h.requests_ending("POST", "/entries:list").is_empty());
}
