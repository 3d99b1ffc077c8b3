//! Reading jobs' results back from ECS against moto: exit codes and ECS's
//! reasons (injected at the wire, moto always says 0), output from the
//! awslogs stream or from the wrapper, files handed from one job to the
//! next, stopping, and tasks ECS no longer knows.

use crate::common::{JobOn, StoppedAs, act_as_wrapper, dispatch, dispatched, finished};
use vergence_engine::fetch::interpret;
use vergence_model::ports::{JobProgress, Runner};
use vergence_model::{Artifact, FetchMode, FetchVerdict, JobHandle, JobKind, JobOutcome};
use vergence_runner_ecs::EcsSettings;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_is_read_from_the_log_stream_and_feeds_a_structured_fetch() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let job = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./fetch.sh"]);
    let (job, handle) = dispatch(&runner, &job).await;
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Running);
    // awslogs: one event per line of the pretty-printed JSON.
    let printed = serde_json::to_string_pretty(&serde_json::json!({
        "objects": [{
            "name": "web",
            "objectType": "Deployment",
            "versions": [{ "version": "v42", "active": true, "replicas": 3, "availableReplicas": 3 }],
            "status": "SUCCEEDED"
        }]
    }))
    .unwrap();
    moto.write_log_stream(
        &handle,
        &printed.lines().map(str::to_owned).collect::<Vec<_>>(),
    )
    .await;
    moto.injector.stopped(job.id.as_str(), StoppedAs::exited(0));

    let result = finished(&runner, &job).await;
    assert!(result.exited_with(0), "{}", result.describe());
    assert_eq!(result.stdout, format!("{printed}\n"));
    let (verdict, reason) = interpret(FetchMode::Structured, &result, &job.version);
    assert_eq!(verdict, FetchVerdict::Converged, "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_log_stream_is_read_across_pages_up_to_the_limit() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let job = moto.job(JobKind::GetInfo, "deploy-tools:1.4.0", &["./info.sh"]);
    let (job, handle) = dispatch(&moto.runner(), &job).await;
    // More events than one GetLogEvents page holds (10,000).
    let lines: Vec<String> = (1..=12_000).map(|i| format!("line {i:05}")).collect();
    moto.write_log_stream(&handle, &lines).await;

    let whole = finished(&moto.runner(), &job).await;
    assert!(whole.stdout.starts_with("line 00001\n"));
    assert!(whole.stdout.ends_with("line 12000\n"), "every page is read");
    assert_eq!(whole.stdout.lines().count(), 12_000);
    assert!(whole.stderr_tail.ends_with("line 12000\n"));

    let bounded = moto.runner_with(EcsSettings {
        log_read_limit: 4096,
        ..EcsSettings::default()
    });
    let head = finished(&bounded, &job).await;
    assert_eq!(head.stdout.len(), 4096);
    assert!(head.stdout.starts_with("line 00001\n"));
    assert!(
        head.stderr_tail.ends_with("line 12000\n"),
        "the tail is the stream's end, not the end of what was read: {:?}",
        &head.stderr_tail[head.stderr_tail.len() - 40..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_0_2_and_1_come_back_as_the_fetch_exit_code() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let mut verdicts = Vec::new();
    for code in [0, 2, 1] {
        let job = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./check.sh"]);
        let (job, handle) = dispatch(&runner, &job).await;
        moto.write_log_stream(&handle, &[format!("check exits {code}")])
            .await;
        moto.injector
            .stopped(job.id.as_str(), StoppedAs::exited(code));
        let result = finished(&runner, &job).await;
        assert_eq!(result.outcome, JobOutcome::Exited);
        assert_eq!(result.exit_code, Some(code));
        verdicts.push(interpret(FetchMode::ExitCode, &result, &job.version).0);
    }
    assert_eq!(
        verdicts,
        [
            FetchVerdict::Converged,
            FetchVerdict::NeedsApply,
            FetchVerdict::Error
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_is_a_platform_failure_with_the_reason() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let job = moto.job(JobKind::Apply, "registry.example/nope:1", &["./deploy.sh"]);
    let (job, _) = dispatch(&runner, &job).await;
    let pull = "CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref registry.example/nope:1: not found";
    moto.injector.stopped(
        job.id.as_str(),
        StoppedAs {
            exit_code: None,
            stop_code: Some("TaskFailedToStart".into()),
            stopped_reason: Some("Task failed to start".into()),
            container_reason: Some(pull.into()),
        },
    );
    let result = finished(&runner, &job).await;
    assert_eq!(result.exit_code, None);
    let JobOutcome::PlatformFailed { message } = &result.outcome else {
        panic!("a platform failure, not {:?}", result.outcome);
    };
    assert_eq!(
        message,
        &format!("TaskFailedToStart: Task failed to start; container job: {pull}")
    );
    assert!(result.describe().contains("CannotPullContainerError"));
    assert_eq!(
        result.stdout, "",
        "a task that never started logged nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_written_by_the_job_is_an_output_and_handed_to_the_next_job_as_an_input_url() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let mut fetch = moto.job(JobKind::Fetch, "terraform:1.9", &["./plan.sh"]);
    std::sync::Arc::make_mut(&mut fetch.spec).outputs = vec!["plan".into()];
    let (fetch, handle) = dispatch(&runner, &fetch).await;
    let env = moto.task_env(&handle).await;
    let plan = b"terraform plan: 1 to add, 0 to change, 0 to destroy";
    act_as_wrapper(
        &env,
        "Plan: 1 to add\n",
        "Warning: deprecated\n",
        &[("plan", plan)],
    )
    .await;
    // awslogs saw both streams mixed; the wrapper's exact streams win.
    moto.write_log_stream(
        &handle,
        &["Plan: 1 to add".into(), "Warning: deprecated".into()],
    )
    .await;
    moto.injector
        .stopped(fetch.id.as_str(), StoppedAs::exited(2));

    let result = finished(&runner, &fetch).await;
    assert!(result.exited_with(2));
    assert_eq!(result.stdout, "Plan: 1 to add\n");
    assert_eq!(result.stderr_tail, "Warning: deprecated\n");
    assert_eq!(
        result.outputs,
        [Artifact::of(
            "plan",
            Artifact::output_key(&fetch.id, "plan"),
            plan
        )]
    );

    let mut apply = moto.job(JobKind::Apply, "terraform:1.9", &["./apply.sh"]);
    apply.inputs = result.outputs.clone();
    let (_, handle) = dispatch(&runner, &apply).await;
    let env = moto.task_env(&handle).await;
    let inputs: std::collections::HashMap<String, String> =
        serde_json::from_str(&env["VERGENCE_INPUT_URLS"]).unwrap();
    let fetched = reqwest::get(&inputs["plan"])
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(fetched.as_ref(), plan);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_stops_the_task_and_poll_reports_it_stopped() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let job = moto.job(JobKind::Apply, "deploy-tools:1.4.0", &["./deploy.sh"]);
    let (job, handle) = dispatch(&runner, &job).await;
    runner.stop(&job, "superseded by v43").await.unwrap();
    let task = moto.task(&handle).await;
    assert_eq!(task.last_status(), Some("STOPPED"));
    assert_eq!(
        task.stopped_reason(),
        Some("Stopped by Vergence: superseded by v43")
    );
    // moto gives the stopped container exit code 0; a stop is still a stop.
    let JobProgress::Finished(result) = runner.poll(&job).await.unwrap() else {
        panic!("the stopped task has a result");
    };
    assert_eq!(
        result.outcome,
        JobOutcome::Stopped {
            reason: "superseded by v43".into()
        }
    );
    assert_eq!(result.exit_code, None);

    // Stopping again, or a task ECS has forgotten, is fine.
    runner.stop(&job, "superseded by v43").await.unwrap();
    moto.injector.stop_task_not_found();
    runner.stop(&job, "superseded by v44").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_ecs_no_longer_knows_is_unknown() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let job = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./check.sh"]);
    let gone = JobHandle(format!(
        "arn:aws:ecs:us-east-1:123456789012:task/{}/0f3c6a6b2b8d4c4e9d1e2f3a4b5c6d7e",
        moto.cluster
    ));
    assert_eq!(
        runner.poll(&dispatched(&job, &gone)).await.unwrap(),
        JobProgress::Unknown
    );
    // A job whose handle was never recorded is found by its startedBy, or
    // is unknown when it has no task.
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Unknown);
    let (_, handle) = dispatch(&runner, &job).await;
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Running);
    assert_eq!(moto.tasks_of(&job).await, [handle.as_str().to_owned()]);
}
