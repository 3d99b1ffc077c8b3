//! Jobs end to end through the real client: the Job controller's pods, the
//! kubelet stand-in running real processes (or canned runs), pod status and
//! logs, env from Secrets, deadlines, backoff, TTL and image pull failures.

use std::time::Duration;

use crate::common::{eventually, job, typed, within};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod, Secret};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use vergence_fake_kube::{Canned, FakeCluster, FnExecutor, NeverFinishes};

async fn the_pod(pods: &Api<Pod>, job: &str) -> Pod {
    let selector = format!("job-name={job}");
    eventually(|| async {
        pods.list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .next()
    })
    .await
}

/// Waits until the pod's container terminated and answers its state.
async fn terminated(pods: &Api<Pod>, name: &str) -> ContainerStateTerminated {
    eventually(|| async {
        let pod = pods.get(name).await.unwrap();
        let status = pod.status?.container_statuses?.into_iter().next()?;
        status.state?.terminated
    })
    .await
}

async fn finished_job(jobs: &Api<Job>, name: &str) -> Job {
    eventually(|| async {
        let job = jobs.get(name).await.unwrap();
        let conditions = job.status.as_ref()?.conditions.clone()?;
        conditions
            .iter()
            .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            .then_some(job)
    })
    .await
}

fn api<K>(cluster: &FakeCluster) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    Api::namespaced(cluster.client(), "default")
}

#[tokio::test]
async fn a_job_runs_its_command_and_reports_the_exit_code_in_the_pod_status() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    jobs.create(
        &PostParams::default(),
        &job("migrate", &["sh", "-c", "exit 3"]),
    )
    .await
    .unwrap();
    let name = the_pod(&pods, "migrate").await.metadata.name.unwrap();
    let state = terminated(&pods, &name).await;
    assert_eq!(
        (state.exit_code, state.reason.as_deref()),
        (3, Some("Error"))
    );
    assert!(state.started_at.is_some() && state.finished_at.is_some());
    assert_eq!(
        pods.get(&name)
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Failed")
    );

    let job = finished_job(&jobs, "migrate").await;
    let status = job.status.unwrap();
    assert_eq!(
        (status.failed, status.succeeded, status.active),
        (Some(1), None, None)
    );
    let failed = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    let pod_count = pods
        .list(&ListParams::default().labels("job-name=migrate"))
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(pod_count, 1, "backoffLimit 0: no retry pod");
}

#[tokio::test]
async fn a_jobs_pod_is_named_labelled_and_owned_like_the_real_controllers() {
    let cluster = FakeCluster::builder()
        .executor(NeverFinishes)
        .start()
        .await
        .unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    let created = jobs
        .create(&PostParams::default(), &job("migrate", &["true"]))
        .await
        .unwrap();
    let pod = the_pod(&pods, "migrate").await;
    let name = pod.metadata.name.clone().unwrap();
    assert!(
        name.starts_with("migrate-") && name.len() == "migrate-".len() + 5,
        "{name}"
    );
    let labels = pod.metadata.labels.clone().unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert_eq!(
        (
            labels["job-name"].as_str(),
            labels["controller-uid"].as_str()
        ),
        ("migrate", uid.as_str())
    );
    assert_eq!(labels["batch.kubernetes.io/job-name"], "migrate");
    let owner = &pod.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Job", uid.as_str(), Some(true))
    );
    let spec = pod.spec.unwrap();
    assert_eq!(spec.containers[0].image.as_deref(), Some("busybox:1.36"));
    let node = eventually(|| async { pods.get(&name).await.unwrap().spec?.node_name }).await;
    assert_eq!(node, "fake-node", "the kubelet stand-in binds its pods");
}

#[tokio::test]
async fn a_successful_job_completes_as_the_runtime_waiter_expects() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    jobs.create(&PostParams::default(), &job("ok", &["true"]))
        .await
        .unwrap();
    let done = within(
        10,
        await_condition(jobs.clone(), "ok", conditions::is_job_completed()),
    )
    .await
    .unwrap()
    .unwrap();
    let status = done.status.unwrap();
    assert_eq!(status.succeeded, Some(1));
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let pod = the_pod(&pods, "ok").await;
    let state = terminated(&pods, pod.metadata.name.as_deref().unwrap()).await;
    assert_eq!(
        (state.exit_code, state.reason.as_deref()),
        (0, Some("Completed"))
    );
}

#[tokio::test]
async fn pod_log_returns_what_the_command_printed() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    let script = "echo one; echo oops >&2; sleep 0.05; echo two; printf three";
    jobs.create(&PostParams::default(), &job("talk", &["sh", "-c", script]))
        .await
        .unwrap();
    let name = the_pod(&pods, "talk").await.metadata.name.unwrap();
    terminated(&pods, &name).await;
    let all = pods.logs(&name, &LogParams::default()).await.unwrap();
    assert_eq!(all, "one\noops\ntwo\nthree");
    let tail = pods
        .logs(
            &name,
            &LogParams {
                tail_lines: Some(2),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(tail, "two\nthree");
    let limited = pods
        .logs(
            &name,
            &LogParams {
                limit_bytes: Some(6),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(limited, "one\noo");
    let stamped = pods
        .logs(
            &name,
            &LogParams {
                timestamps: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    let first = stamped.lines().next().unwrap();
    let (time, text) = first.split_once(' ').unwrap();
    assert!(time.ends_with('Z') && time.contains('T'), "{first}");
    assert_eq!(text, "one");
    let separate = cluster.pod_logs("default", &name).unwrap();
    assert_eq!(
        (separate.stdout.as_str(), separate.stderr.as_str()),
        ("one\ntwo\nthree", "oops\n")
    );
}

#[tokio::test]
async fn a_followed_log_streams_until_the_container_ends() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    jobs.create(
        &PostParams::default(),
        &job("slow", &["sh", "-c", "echo a; sleep 0.3; echo b"]),
    )
    .await
    .unwrap();
    let name = the_pod(&pods, "slow").await.metadata.name.unwrap();
    let stream = eventually(|| async {
        pods.log_stream(
            &name,
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .ok()
    })
    .await;
    use futures::AsyncBufReadExt as _;
    use futures::TryStreamExt as _;
    let lines: Vec<String> = within(10, stream.lines().try_collect()).await.unwrap();
    assert_eq!(lines, ["a", "b"]);
}

#[tokio::test]
async fn secret_env_is_resolved_from_a_secret() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods, secrets): (Api<Job>, Api<Pod>, Api<Secret>) =
        (api(&cluster), api(&cluster), api(&cluster));
    secrets
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "db"}, "stringData": {"password": "s3cret"}})),
        )
        .await
        .unwrap();
    let mut env_job = job("env", &["sh", "-c", "echo $PASSWORD $POD $GREETING"]);
    env_job
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .env = Some(typed(json!([
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GREETING", "value": "hi-$(POD)"}
    ])));
    jobs.create(&PostParams::default(), &env_job).await.unwrap();
    let name = the_pod(&pods, "env").await.metadata.name.unwrap();
    assert_eq!(terminated(&pods, &name).await.exit_code, 0);
    assert_eq!(
        pods.logs(&name, &LogParams::default()).await.unwrap(),
        format!("s3cret {name} hi-{name}\n")
    );
}

#[tokio::test]
async fn a_missing_secret_holds_the_pod_in_create_container_config_error_until_it_exists() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    let mut env_job = job("waits", &["sh", "-c", "echo $TOKEN"]);
    env_job
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .env = Some(typed(
        json!([{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]),
    ));
    jobs.create(&PostParams::default(), &env_job).await.unwrap();
    let name = the_pod(&pods, "waits").await.metadata.name.unwrap();
    let waiting = eventually(|| async {
        let pod = pods.get(&name).await.unwrap();
        let status = pod.status?;
        let waiting = status
            .container_statuses?
            .into_iter()
            .next()?
            .state?
            .waiting?;
        Some((status.phase, waiting))
    })
    .await;
    assert_eq!(waiting.0.as_deref(), Some("Pending"));
    assert_eq!(
        waiting.1.reason.as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(
        waiting.1.message.as_deref(),
        Some("secret \"later\" not found")
    );
    let logs = Api::<Pod>::namespaced(cluster.client(), "default")
        .logs(&name, &LogParams::default())
        .await;
    assert_eq!(
        crate::common::api_error(logs).code,
        400,
        "no logs before the container starts"
    );

    cluster
        .create(
            "Secret",
            "default",
            json!({"metadata": {"name": "later"}, "stringData": {"token": "t0k"}}),
        )
        .unwrap();
    assert_eq!(terminated(&pods, &name).await.exit_code, 0);
    assert_eq!(cluster.pod_logs("default", &name).unwrap().stdout, "t0k\n");
}

#[tokio::test]
async fn active_deadline_fails_the_job_with_deadline_exceeded() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    let mut slow = job("slow", &["sleep", "30"]);
    slow.spec.as_mut().unwrap().active_deadline_seconds = Some(1);
    jobs.create(&PostParams::default(), &slow).await.unwrap();
    let job = within(10, finished_job(&jobs, "slow")).await;
    let conditions = job.status.unwrap().conditions.unwrap();
    let failed = conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
    let pod = the_pod(&pods, "slow").await;
    let state = terminated(&pods, pod.metadata.name.as_deref().unwrap()).await;
    assert_eq!(
        (state.reason.as_deref(), state.exit_code),
        (Some("DeadlineExceeded"), 137)
    );
    let pod = pods
        .get(pod.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Failed"));
}

#[tokio::test]
async fn a_failing_job_is_retried_up_to_its_backoff_limit() {
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = attempts.clone();
    let executor = FnExecutor::new(move |_| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Canned::exit(1).stderr("boom\n")
    });
    let cluster = FakeCluster::builder()
        .executor(executor)
        .job_retry_delay(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let jobs: Api<Job> = api(&cluster);
    let mut retried = job("flaky", &["ignored"]);
    retried.spec.as_mut().unwrap().backoff_limit = Some(2);
    jobs.create(&PostParams::default(), &retried).await.unwrap();
    let job = finished_job(&jobs, "flaky").await;
    assert_eq!(job.status.unwrap().failed, Some(3));
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_canned_executor_decides_output_and_exit_code() {
    let executor = FnExecutor::new(|run| {
        Canned::exit(0).stdout(&format!("ran {} in {}\n", run.command.join(" "), run.image))
    });
    let cluster = FakeCluster::builder()
        .executor(executor)
        .start()
        .await
        .unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    jobs.create(&PostParams::default(), &job("canned", &["deploy", "--now"]))
        .await
        .unwrap();
    let name = the_pod(&pods, "canned").await.metadata.name.unwrap();
    assert_eq!(terminated(&pods, &name).await.exit_code, 0);
    assert_eq!(
        pods.logs(&name, &LogParams::default()).await.unwrap(),
        "ran deploy --now in busybox:1.36\n"
    );
}

#[tokio::test]
async fn ttl_after_finished_deletes_the_job_and_its_pods() {
    let cluster = FakeCluster::start().await.unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    let mut short_lived = job("gone", &["true"]);
    short_lived
        .spec
        .as_mut()
        .unwrap()
        .ttl_seconds_after_finished = Some(1);
    jobs.create(&PostParams::default(), &short_lived)
        .await
        .unwrap();
    the_pod(&pods, "gone").await;
    let finished = finished_job(&jobs, "gone").await;
    assert_eq!(finished.status.unwrap().succeeded, Some(1));
    eventually(|| async { jobs.get_opt("gone").await.unwrap().is_none().then_some(()) }).await;
    eventually(|| async {
        pods.list(&ListParams::default().labels("job-name=gone"))
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_stays_pending_in_image_pull_back_off() {
    let cluster = FakeCluster::builder()
        .failing_image_prefix("missing.example/")
        .start()
        .await
        .unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    let mut unpullable = job("pull", &["true"]);
    unpullable
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("missing.example/app:1".into());
    jobs.create(&PostParams::default(), &unpullable)
        .await
        .unwrap();
    let name = the_pod(&pods, "pull").await.metadata.name.unwrap();
    let reason = eventually(|| async {
        let status = pods.get(&name).await.unwrap().status?;
        let reason = status
            .container_statuses?
            .into_iter()
            .next()?
            .state?
            .waiting?
            .reason?;
        (reason == "ImagePullBackOff").then_some(status.phase)
    })
    .await;
    assert_eq!(reason.as_deref(), Some("Pending"));
}

#[tokio::test]
async fn deleting_a_running_pod_stops_its_container() {
    let cluster = FakeCluster::builder()
        .executor(NeverFinishes)
        .start()
        .await
        .unwrap();
    let (jobs, pods): (Api<Job>, Api<Pod>) = (api(&cluster), api(&cluster));
    jobs.create(&PostParams::default(), &job("forever", &["sleep", "inf"]))
        .await
        .unwrap();
    let name = the_pod(&pods, "forever").await.metadata.name.unwrap();
    eventually(|| async {
        (pods.get(&name).await.unwrap().status?.phase? == "Running").then_some(())
    })
    .await;
    let active = jobs.get("forever").await.unwrap().status.unwrap().active;
    assert_eq!(active, Some(1));
    pods.delete(&name, &Default::default()).await.unwrap();
    // The Job controller counts the deleted pod as failed (backoffLimit 0).
    let job = finished_job(&jobs, "forever").await;
    assert_eq!(job.status.unwrap().failed, Some(1));
}
