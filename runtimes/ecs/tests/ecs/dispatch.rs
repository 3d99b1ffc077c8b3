//! Dispatching jobs as ECS tasks against moto: the task definition per
//! image and settings, what RunTask carries, one task per job however
//! often it is dispatched, and what ECS refuses.

use std::collections::BTreeMap;

use crate::common::{EXECUTION_ROLE, JobOn, Moto, TASK_ROLE, dispatch};
use aws_sdk_ecs::types::{Compatibility, LogDriver, NetworkMode};
use vergence_model::ports::Runner;
use vergence_model::{JobKind, JobRecord, SecretRef};
use vergence_runner_ecs::EcsRunner;

/// Dispatches `job` and answers the task definition its task runs.
async fn definition_of(moto: &Moto, runner: &EcsRunner, job: &JobRecord) -> Option<String> {
    let (_, handle) = dispatch(runner, job).await;
    moto.task(&handle)
        .await
        .task_definition_arn()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_definition_is_registered_once_and_reused_across_jobs() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    // One program (the definition's entrypoint), other arguments.
    let fetch = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["deploy", "check"]);
    let apply = moto.job(JobKind::Apply, "deploy-tools:1.4.0", &["deploy", "apply"]);
    let definition = definition_of(&moto, &runner, &fetch).await.unwrap();
    assert_eq!(
        definition_of(&moto, &runner, &apply).await,
        Some(definition.clone())
    );
    let family = definition
        .rsplit('/')
        .next()
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .to_owned();
    assert!(family.starts_with("vergence-"), "{family}");

    // A runner that starts afresh (another Lambda) finds it instead of
    // registering a second revision.
    let fresh = moto.runner();
    let info = moto.job(JobKind::GetInfo, "deploy-tools:1.4.0", &["deploy", "info"]);
    assert_eq!(
        definition_of(&moto, &fresh, &info).await,
        Some(definition.clone())
    );
    let revisions = moto
        .plain_ecs
        .list_task_definitions()
        .family_prefix(&family)
        .send()
        .await
        .unwrap();
    assert_eq!(revisions.task_definition_arns(), [definition.as_str()]);

    // Another image is another task definition.
    let other = moto.job(JobKind::Fetch, "deploy-tools:1.5.0", &["deploy", "check"]);
    assert_ne!(
        definition_of(&moto, &runner, &other).await,
        Some(definition.clone())
    );
    // So is another program: RunTask cannot override an entrypoint.
    let script = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./check.sh"]);
    assert_ne!(
        definition_of(&moto, &runner, &script).await,
        Some(definition.clone())
    );

    // The runner made the log group awslogs writes to.
    let groups = moto
        .logs
        .describe_log_groups()
        .log_group_name_prefix(&moto.log_group)
        .send()
        .await
        .unwrap();
    assert_eq!(groups.log_groups().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_task_carries_the_command_env_and_secrets_as_valuefrom() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let mut job = moto.job(
        JobKind::Apply,
        "deploy-tools:1.4.0",
        &["./deploy.sh", "--env", "prod"],
    );
    std::sync::Arc::make_mut(&mut job.spec).secret_env = BTreeMap::from([
        (
            "DEPLOY_TOKEN".to_owned(),
            SecretRef::AwsSecretsManager(
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:deploy-token-AbCdEf".into(),
            ),
        ),
        (
            "DB_PASSWORD".to_owned(),
            SecretRef::AwsSsmParameter("/shop/prod/db-password".into()),
        ),
    ]);
    let (_, handle) = dispatch(&runner, &job).await;

    let task = moto.task(&handle).await;
    assert_eq!(task.started_by(), Some(job.id.as_str()));
    assert_eq!(task.launch_type().map(|l| l.as_str()), Some("FARGATE"));
    let tags: BTreeMap<_, _> = task
        .tags()
        .iter()
        .map(|t| (t.key().unwrap(), t.value().unwrap()))
        .collect();
    assert_eq!(tags["vergence:job-id"], job.id.as_str());
    assert_eq!(tags["vergence:instance"], "shop/web/prod");
    let subnet = task.attachments()[0]
        .details()
        .iter()
        .find(|d| d.name() == Some("subnetId"))
        .and_then(|d| d.value());
    assert_eq!(subnet, Some(moto.subnet.as_str()));
    let container = &task.overrides().unwrap().container_overrides()[0];
    assert_eq!(container.name(), Some("job"));
    // `cmd` replaces the image's entrypoint, as on every runner: its
    // program is the definition's entrypoint, its arguments the command.
    assert_eq!(container.command(), ["--env", "prod"]);

    let env = moto.task_env(&handle).await;
    assert_eq!(env["LOG_LEVEL"], "debug");
    assert_eq!(env["VERGENCE_JOB_ID"], job.id.as_str());
    assert_eq!(env["PVN_SERVICE_VERSION"], "v42");
    assert_eq!(env["VERGENCE_OUTPUT_DIR"], "/tmp/vergence/output");
    assert!(env["VERGENCE_STDOUT_URL"].starts_with(&moto.url));
    assert!(
        !env.contains_key("DEPLOY_TOKEN") && !env.contains_key("DB_PASSWORD"),
        "secrets are never plain environment"
    );

    let definition = moto
        .plain_ecs
        .describe_task_definition()
        .task_definition(task.task_definition_arn().unwrap())
        .send()
        .await
        .unwrap();
    let definition = definition.task_definition().unwrap();
    assert_eq!(
        definition.requires_compatibilities(),
        [Compatibility::Fargate]
    );
    assert_eq!(definition.network_mode(), Some(&NetworkMode::Awsvpc));
    assert_eq!(
        (definition.cpu(), definition.memory()),
        (Some("256"), Some("512"))
    );
    assert_eq!(definition.execution_role_arn(), Some(EXECUTION_ROLE));
    assert_eq!(definition.task_role_arn(), Some(TASK_ROLE));
    let container = &definition.container_definitions()[0];
    assert_eq!(container.name(), Some("job"));
    assert_eq!(container.image(), Some("deploy-tools:1.4.0"));
    assert_eq!(container.entry_point(), ["./deploy.sh"]);
    let secrets: Vec<_> = container
        .secrets()
        .iter()
        .map(|s| (s.name(), s.value_from()))
        .collect();
    assert_eq!(
        secrets,
        [
            ("DB_PASSWORD", "/shop/prod/db-password"),
            (
                "DEPLOY_TOKEN",
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:deploy-token-AbCdEf"
            ),
        ]
    );
    let log = container.log_configuration().unwrap();
    assert_eq!(log.log_driver(), &LogDriver::Awslogs);
    let options = log.options().unwrap();
    assert_eq!(options["awslogs-group"], moto.log_group);
    assert_eq!(options["awslogs-region"], "us-east-1");
    assert_eq!(options["awslogs-stream-prefix"], "vergence");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_ecs_cannot_read_is_refused_before_a_task_starts() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let mut job = moto.job(JobKind::Apply, "deploy-tools:1.4.0", &["./deploy.sh"]);
    std::sync::Arc::make_mut(&mut job.spec).secret_env = BTreeMap::from([(
        "DEPLOY_TOKEN".to_owned(),
        SecretRef::FromEnv("CI_DEPLOY_TOKEN".into()),
    )]);
    let err = moto.runner().dispatch(&job).await.unwrap_err().to_string();
    assert!(
        err.contains("runner ecs: secret variable DEPLOY_TOKEN comes from environment variable CI_DEPLOY_TOKEN"),
        "{err}"
    );
    assert!(moto.tasks_of(&job).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_dispatch_starts_no_second_task() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let job = moto.job(JobKind::Apply, "deploy-tools:1.4.0", &["./deploy.sh"]);
    let (_, first) = dispatch(&moto.runner(), &job).await;
    // Another worker (fresh caches) gets the same message again.
    let (_, again) = dispatch(&moto.runner(), &job).await;
    assert_eq!(again, first);
    // And once more after the task stopped.
    crate::common::finished(&moto.runner(), &crate::common::dispatched(&job, &first)).await;
    let (_, late) = dispatch(&moto.runner(), &job).await;
    assert_eq!(late, first);
    assert_eq!(moto.tasks_of(&job).await, [first.as_str().to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_token_conflict_adopts_the_task_ecs_names() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    let runner = moto.runner();
    let (_, earlier) = dispatch(
        &runner,
        &moto.job(JobKind::Apply, "deploy-tools:1.4.0", &["./deploy.sh"]),
    )
    .await;
    // ECS says this job's client token already started `earlier` (a
    // retry within 24 hours whose presigned URLs differ), though ListTasks
    // did not show it yet.
    moto.injector.run_task_conflict(earlier.as_str());
    let job = moto.job(JobKind::Apply, "deploy-tools:1.4.0", &["./deploy.sh"]);
    let (_, handle) = dispatch(&runner, &job).await;
    assert_eq!(handle, earlier);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_task_failures_are_an_error_with_ecs_reason() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    moto.injector.run_task_failure("RESOURCE:ENI");
    let job = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./check.sh"]);
    let err = moto.runner().dispatch(&job).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("in cluster {} started no task", moto.cluster)),
        "{err}"
    );
    assert!(err.contains("RESOURCE:ENI"), "{err}");

    let mut missing = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./check.sh"]);
    if let vergence_model::RunnerSpec::Ecs(spec) =
        &mut std::sync::Arc::make_mut(&mut missing.spec).runner
    {
        spec.cluster = "no-such-cluster".into();
    }
    let err = moto
        .runner()
        .dispatch(&missing)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cluster no-such-cluster"), "{err}");
    assert!(err.contains("ClusterNotFoundException"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_error_without_an_aws_message_says_its_status_and_body() {
    let Some(moto) = crate::common::moto().await else {
        return;
    };
    // A load balancer's error page: no AWS error code or message in it.
    let page = format!(
        "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>{}</body></html>",
        "x".repeat(300)
    );
    moto.injector.raw("RunTask", 502, &page);
    let job = moto.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./check.sh"]);
    let err = moto.runner().dispatch(&job).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "in cluster {} failed: error: HTTP 502 without an error message; body \"<html>\\r\\n<head><title>502 Bad Gateway</title></head>",
            moto.cluster
        )),
        "{err}"
    );
    assert!(
        err.ends_with(&format!("(first 200 of {} bytes)", page.len())),
        "{err}"
    );
    assert!(!err.contains("(no message)"), "{err}");
    assert!(
        !err.contains('\r') && !err.contains('\n'),
        "one line: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_in_another_region_runs_its_tasks_there() {
    let Some(url) = vergence_aws::testing::endpoint(vergence_aws::testing::SQS_URL) else {
        return;
    };
    let home = crate::common::moto_in(&url, "us-east-1").await;
    let away = crate::common::moto_in(&url, "eu-west-1").await;
    let mut job = away.job(JobKind::Fetch, "deploy-tools:1.4.0", &["./check.sh"]);
    if let vergence_model::RunnerSpec::Ecs(spec) =
        &mut std::sync::Arc::make_mut(&mut job.spec).runner
    {
        spec.region = Some("eu-west-1".into());
    }
    // The runner's own clients are in us-east-1.
    let (_, handle) = dispatch(&home.runner(), &job).await;
    assert!(
        handle.as_str().starts_with("arn:aws:ecs:eu-west-1:"),
        "{handle}"
    );
    let task = away.task(&handle).await;
    let definition = away
        .plain_ecs
        .describe_task_definition()
        .task_definition(task.task_definition_arn().unwrap())
        .send()
        .await
        .unwrap();
    let options = definition
        .task_definition()
        .unwrap()
        .container_definitions()[0]
        .log_configuration()
        .unwrap()
        .options()
        .unwrap()
        .clone();
    assert_eq!(options["awslogs-region"], "eu-west-1");
}
