//! Jobs, runs with overrides, executions, tasks and the executors.

use std::time::{Duration, Instant};

use google_cloud_gax::error::rpc::Code;
use google_cloud_lro::Poller;
use google_cloud_run_v2::client::Executions;
use google_cloud_run_v2::model::condition::{ExecutionReason, State};
use google_cloud_run_v2::model::run_job_request::Overrides;
use google_cloud_run_v2::model::run_job_request::overrides::ContainerOverride;
use google_cloud_run_v2::model::{EnvVar, Execution, Job, Task, TaskTemplate};
use vergence_fake_cloud_run::{CannedExecutor, FakeCloudRun, NeverEndingExecutor, TaskOutcome};

use crate::{PARENT, code_of, job_name, job_with, shell_job};

async fn create_job(fake: &FakeCloudRun, id: &str, job: Job) {
    let jobs = fake.jobs_client().await.unwrap();
    jobs.create_job()
        .set_parent(PARENT)
        .set_job_id(id)
        .set_job(job)
        .poller()
        .until_done()
        .await
        .unwrap();
}

/// Runs the job and waits for its execution through the run's operation.
async fn run_to_end(fake: &FakeCloudRun, id: &str, overrides: Option<Overrides>) -> String {
    let jobs = fake.jobs_client().await.unwrap();
    let started = jobs
        .run_job()
        .set_name(job_name(id))
        .set_or_clear_overrides(overrides)
        .send()
        .await
        .unwrap();
    // Read the outcome from the execution, as a runner that keeps only the
    // execution's name between steps would.
    let execution: Execution = started.metadata.unwrap().to_msg().unwrap();
    wait_until_complete(&fake.executions_client().await.unwrap(), &execution.name).await
}

async fn wait_until_complete(executions: &Executions, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let execution = executions
            .get_execution()
            .set_name(name)
            .send()
            .await
            .unwrap();
        if execution.completion_time.is_some() {
            return execution.name;
        }
        assert!(Instant::now() < deadline, "{name} did not complete");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn only_task(fake: &FakeCloudRun, execution: &str) -> Task {
    let tasks = fake.tasks_client().await.unwrap();
    let listed = tasks
        .list_tasks()
        .set_parent(execution)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.tasks.len(), 1);
    listed.tasks.into_iter().next().unwrap()
}

fn completed(execution: &Execution) -> &google_cloud_run_v2::model::Condition {
    execution
        .conditions
        .iter()
        .find(|c| c.r#type == "Completed")
        .unwrap()
}

#[tokio::test]
async fn running_a_job_with_overrides_runs_the_command_with_the_env() {
    let fake = FakeCloudRun::start().await.unwrap();
    create_job(&fake, "migrate", shell_job("echo not overridden")).await;
    let jobs = fake.jobs_client().await.unwrap();
    let overrides = Overrides::new().set_container_overrides([ContainerOverride::new()
        .set_name("main")
        .set_args(["echo \"$GREETING from $CLOUD_RUN_JOB/$CLOUD_RUN_EXECUTION task $CLOUD_RUN_TASK_INDEX\"; env"])
        .set_env([EnvVar::new().set_name("GREETING").set_value("hello")])]);

    let execution = jobs
        .run_job()
        .set_name(job_name("migrate"))
        .set_overrides(overrides)
        .poller()
        .until_done()
        .await
        .unwrap();

    assert_eq!(execution.succeeded_count, 1);
    assert_eq!(completed(&execution).state, State::ConditionSucceeded);
    assert_eq!(execution.job, "migrate");
    assert_eq!(execution.labels["vergence-job"], "j-1");
    assert!(execution.start_time.is_some() && execution.completion_time.is_some());
    let id = execution.name.rsplit('/').next().unwrap();
    assert!(
        id.starts_with("migrate-") && id.len() == "migrate-abcde".len(),
        "{id}"
    );
    let lines: Vec<String> = fake
        .log_entries()
        .iter()
        .filter_map(|e| e["textPayload"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(lines[0], format!("hello from migrate/{id} task 0"));
    assert!(lines.iter().any(|l| l == "CLOUD_RUN_TASK_COUNT=1"));
    assert!(
        lines.iter().all(|l| !l.starts_with("CARGO")),
        "the test's env leaked: {lines:?}"
    );
    let run = &fake.task_runs()[0];
    assert_eq!(run.env_var("GREETING"), Some("hello"));
    assert_eq!(run.command, ["sh", "-c"]);
}

#[tokio::test]
async fn a_failing_task_reports_its_exit_code() {
    let fake = FakeCloudRun::start().await.unwrap();
    create_job(&fake, "migrate", shell_job("echo failing >&2; exit 2")).await;

    let error = fake
        .jobs_client()
        .await
        .unwrap()
        .run_job()
        .set_name(job_name("migrate"))
        .poller()
        .until_done()
        .await
        .unwrap_err();

    assert_eq!(code_of(&error), Some(Code::FailedPrecondition));
    let executions = fake.executions_client().await.unwrap();
    let listed = executions
        .list_executions()
        .set_parent(job_name("migrate"))
        .send()
        .await
        .unwrap();
    let execution = &listed.executions[0];
    assert_eq!((execution.failed_count, execution.succeeded_count), (1, 0));
    assert_eq!(completed(execution).state, State::ConditionFailed);
    assert!(
        completed(execution)
            .message
            .contains("Task exited with exit code 2.")
    );
    let reason = completed(execution).execution_reason();
    assert_eq!(reason, Some(&ExecutionReason::NonZeroExitCode));
    let result = only_task(&fake, &execution.name)
        .await
        .last_attempt_result
        .unwrap();
    assert_eq!(result.exit_code, 2);
    assert_eq!(
        result.status.unwrap().message,
        "Task exited with exit code 2."
    );
}

#[tokio::test]
async fn a_task_past_its_timeout_is_failed_as_timed_out() {
    let fake = FakeCloudRun::start().await.unwrap();
    let template = TaskTemplate::new()
        .set_max_retries(0)
        .set_timeout(google_cloud_wkt::Duration::clamp(0, 300_000_000));
    create_job(
        &fake,
        "migrate",
        job_with(template, "echo started; sleep 30"),
    )
    .await;
    let began = Instant::now();

    let execution = run_to_end(&fake, "migrate", None).await;

    assert!(
        began.elapsed() < Duration::from_secs(10),
        "the timeout did not stop the task"
    );
    let task = only_task(&fake, &execution).await;
    let status = task.last_attempt_result.unwrap().status.unwrap();
    assert_eq!(status.code, Code::DeadlineExceeded as i32);
    assert!(status.message.contains("timed out"), "{}", status.message);
    let executions = fake.executions_client().await.unwrap();
    let execution = executions
        .get_execution()
        .set_name(&execution)
        .send()
        .await
        .unwrap();
    assert_eq!(execution.failed_count, 1);
    assert!(completed(&execution).message.contains("timed out"));
}

#[tokio::test]
async fn cancelling_a_never_ending_execution_marks_it_cancelled() {
    let fake = FakeCloudRun::builder()
        .executor(NeverEndingExecutor)
        .start()
        .await
        .unwrap();
    create_job(&fake, "migrate", shell_job("true")).await;
    let jobs = fake.jobs_client().await.unwrap();
    let executions = fake.executions_client().await.unwrap();
    let run = jobs
        .run_job()
        .set_name(job_name("migrate"))
        .send()
        .await
        .unwrap();
    let started: Execution = run.metadata.unwrap().to_msg().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while executions
        .get_execution()
        .set_name(&started.name)
        .send()
        .await
        .unwrap()
        .running_count
        != 1
    {
        assert!(Instant::now() < deadline, "the task never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let cancelled = executions
        .cancel_execution()
        .set_name(&started.name)
        .poller()
        .until_done()
        .await
        .unwrap();

    assert_eq!((cancelled.cancelled_count, cancelled.running_count), (1, 0));
    assert_eq!(
        completed(&cancelled).execution_reason(),
        Some(&ExecutionReason::Cancelled)
    );
    let run = jobs
        .get_operation()
        .set_name(&run.name)
        .send()
        .await
        .unwrap();
    assert!(run.done);
    assert_eq!(run.error().unwrap().code, Code::Cancelled as i32);
    let again = executions
        .cancel_execution()
        .set_name(&started.name)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&again), Some(Code::FailedPrecondition));
}

#[tokio::test]
async fn a_failed_attempt_is_retried_up_to_max_retries() {
    let executor =
        CannedExecutor::per_attempt(vec![TaskOutcome::Exited(1), TaskOutcome::Exited(0)]);
    let fake = FakeCloudRun::builder()
        .executor(executor)
        .start()
        .await
        .unwrap();
    create_job(
        &fake,
        "migrate",
        job_with(TaskTemplate::new().set_max_retries(1), "true"),
    )
    .await;

    let execution = run_to_end(&fake, "migrate", None).await;

    let task = only_task(&fake, &execution).await;
    assert_eq!(task.retried, 1);
    assert_eq!(task.last_attempt_result.unwrap().exit_code, 0);
    let attempts: Vec<u32> = fake.task_runs().iter().map(|r| r.task_attempt).collect();
    assert_eq!(attempts, [0, 1]);
}

#[tokio::test]
async fn no_retries_means_one_attempt_and_task_counts_come_from_overrides() {
    let fake = FakeCloudRun::builder()
        .executor(CannedExecutor::new(TaskOutcome::Exited(3)))
        .start()
        .await
        .unwrap();
    create_job(&fake, "migrate", shell_job("true")).await;

    run_to_end(&fake, "migrate", Some(Overrides::new().set_task_count(3))).await;

    let runs = fake.task_runs();
    let mut indexes: Vec<u32> = runs.iter().map(|r| r.task_index).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, [0, 1, 2]);
    assert!(
        runs.iter()
            .all(|r| r.task_attempt == 0 && r.task_count == 3)
    );
}

#[tokio::test]
async fn a_missing_image_fails_the_execution_without_an_exit_code() {
    let fake = FakeCloudRun::start().await.unwrap();
    let mut job = shell_job("true");
    let task = job.template.as_mut().unwrap().template.as_mut().unwrap();
    task.containers[0].image = "missing/tool:1".into();
    create_job(&fake, "migrate", job).await;

    let execution = run_to_end(&fake, "migrate", None).await;

    let executions = fake.executions_client().await.unwrap();
    let execution = executions
        .get_execution()
        .set_name(&execution)
        .send()
        .await
        .unwrap();
    assert_eq!(
        completed(&execution).message,
        "Image 'missing/tool:1' not found."
    );
    assert_eq!(execution.failed_count, 1);
    let result = only_task(&fake, &execution.name)
        .await
        .last_attempt_result
        .unwrap();
    assert_eq!(result.exit_code, 0);
    assert_eq!(result.status.unwrap().code, Code::NotFound as i32);
    assert!(fake.task_runs().is_empty());
}

#[tokio::test]
async fn jobs_report_their_latest_execution_and_missing_ones_are_not_found() {
    let fake = FakeCloudRun::builder()
        .executor(CannedExecutor::new(TaskOutcome::Exited(0)))
        .start()
        .await
        .unwrap();
    create_job(&fake, "migrate", shell_job("true")).await;
    let jobs = fake.jobs_client().await.unwrap();

    let execution = run_to_end(&fake, "migrate", None).await;

    let job = jobs
        .get_job()
        .set_name(job_name("migrate"))
        .send()
        .await
        .unwrap();
    assert_eq!(job.execution_count, 1);
    assert_eq!(job.latest_created_execution.unwrap().name, execution);
    assert_eq!(
        job.terminal_condition.unwrap().state,
        State::ConditionSucceeded
    );
    let duplicate = jobs
        .create_job()
        .set_parent(PARENT)
        .set_job_id("migrate")
        .set_job(shell_job("true"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&duplicate), Some(Code::AlreadyExists));
    let missing = jobs
        .run_job()
        .set_name(job_name("nope"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&missing), Some(Code::NotFound));
}

#[tokio::test]
async fn updating_a_job_changes_what_its_next_run_runs() {
    let fake = FakeCloudRun::builder()
        .executor(CannedExecutor::new(TaskOutcome::Exited(0)))
        .start()
        .await
        .unwrap();
    create_job(&fake, "migrate", shell_job("echo v1")).await;
    let jobs = fake.jobs_client().await.unwrap();

    let updated = jobs
        .update_job()
        .set_job(shell_job("echo v2").set_name(job_name("migrate")))
        .poller()
        .until_done()
        .await
        .unwrap();
    run_to_end(&fake, "migrate", None).await;

    assert_eq!(updated.generation, 2);
    assert_eq!(updated.observed_generation, 2);
    assert_eq!(fake.task_runs()[0].args, ["echo v2"]);
}

#[tokio::test]
async fn a_task_runs_in_its_working_dir_when_that_exists_here() {
    let fake = FakeCloudRun::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir
        .path()
        .canonicalize()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    for (id, working_dir) in [("here", dir.as_str()), ("elsewhere", "/workspace/not/here")] {
        let mut job = shell_job("pwd");
        let task = job.template.as_mut().unwrap().template.as_mut().unwrap();
        task.containers[0].working_dir = working_dir.into();
        create_job(&fake, id, job).await;
        run_to_end(&fake, id, None).await;
    }

    let lines: Vec<String> = fake
        .log_entries()
        .iter()
        .map(|e| e["textPayload"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(lines[0], dir);
    assert_ne!(lines[1], "/workspace/not/here");
    assert!(std::path::Path::new(&lines[1]).is_absolute());
}
