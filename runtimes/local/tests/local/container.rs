//! Jobs whose program has an image, through a stand-in `docker` on a PATH
//! of its own (see `crate::common::docker`): the command line the engine gets,
//! secrets kept off it, files and output through the mounts, timeouts and
//! stops through `docker kill`, and the engine's own failures.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::docker::StandIn;
use crate::common::{CollectingSink, artifacts, content, job, read, script, stored};
use jiff::SignedDuration;
use vergence_model::ports::{JobProgress, Runner};
use vergence_model::{JobOutcome, JobRecord, JobResult, SecretRef};
use vergence_runner_local::{ContainerEngine, LocalRunner};

const IMAGE: &str = "registry.example/deploy:1";

/// A runner that finds only the stand-ins' engines.
fn runner(stand_in: &StandIn, sink: Arc<CollectingSink>) -> LocalRunner {
    LocalRunner::inline(sink, artifacts()).with_engine_search_path(stand_in.path())
}

/// Runs `job` inline and returns its result.
async fn run(runner: &LocalRunner, sink: &CollectingSink, job: &JobRecord) -> JobResult {
    runner.dispatch(job).await.unwrap();
    let results = sink.results.lock().unwrap();
    assert_eq!(results.len(), 1, "{results:?}");
    results[0].1.clone()
}

fn image_job(root: &Path, cmd: &[&str]) -> JobRecord {
    let mut job = job(root, cmd);
    Arc::make_mut(&mut job.spec).image = Some(IMAGE.into());
    job
}

fn not_started(result: &JobResult) -> &str {
    match &result.outcome {
        JobOutcome::NotStarted { message, .. } => message,
        other => panic!("expected NotStarted, got {other:?}: {result:?}"),
    }
}

/// `arg` with the host part of a `-v host:container` replaced by `name`.
fn mount_named(arg: &str, container_dir: &str, name: &str) -> Option<String> {
    let (host, container) = arg.split_once(':')?;
    container.starts_with(container_dir).then(|| {
        assert!(Path::new(host).is_absolute(), "{arg}");
        format!("<{name}>:{container}")
    })
}

#[tokio::test]
async fn an_image_runs_through_docker_with_the_workspace_files_and_environment() {
    let stand_in = StandIn::new(&["docker", "podman"]);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("services/api");
    std::fs::create_dir_all(&dir).unwrap();
    script(
        &dir,
        "fetch.sh",
        r#"printf '%s' "$DEPLOY_TOKEN" > token
echo "$REGION $VERGENCE_SERVICE $PVN_JOB_ID $1" > seen
cp "$VERGENCE_INPUT_DIR/plan.bin" "$VERGENCE_OUTPUT_DIR/plan-copy"
echo "checked" >&2
printf '{"version": "%s", "replicas": 3}\n' "$VERGENCE_SERVICE_VERSION""#,
    );
    let plan = stored("plan.bin", &[0, 1, 2, 255]).await;
    let mut job = image_job(root.path(), &["./fetch.sh", "--check"]);
    Arc::make_mut(&mut job.spec).working_dir = "services/api".into();
    Arc::make_mut(&mut job.spec)
        .env
        .insert("REGION".into(), "eu-west-1".into());
    let secret = std::env::var("PATH").unwrap();
    Arc::make_mut(&mut job.spec)
        .secret_env
        .insert("DEPLOY_TOKEN".into(), SecretRef::FromEnv("PATH".into()));
    Arc::make_mut(&mut job.spec).outputs = vec!["plan-copy".into()];
    job.inputs = vec![plan.clone()];
    let sink = Arc::new(CollectingSink::default());

    let result = run(&runner(&stand_in, sink.clone()), &sink, &job).await;

    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout, "{\"version\": \"v42\", \"replicas\": 3}\n");
    assert_eq!(result.stderr_tail, "checked\n");
    assert_eq!(result.outputs.len(), 1);
    assert_eq!(result.outputs[0].sha256, plan.sha256);
    assert_eq!(content(&result.outputs[0]).await, [0, 1, 2, 255]);
    assert_eq!(
        read(dir.join("token")),
        secret,
        "the secret reached the command"
    );
    assert_eq!(read(dir.join("seen")), "eu-west-1 api job-1 --check\n");

    let calls = stand_in.calls("docker", "run");
    assert_eq!(calls.len(), 1);
    assert!(
        stand_in.calls("podman", "run").is_empty(),
        "docker comes first"
    );
    let argv: Vec<String> = calls[0]
        .iter()
        .map(|arg| {
            mount_named(arg, "/tmp/vergence/input", "input")
                .or_else(|| mount_named(arg, "/tmp/vergence/output", "output"))
                .unwrap_or_else(|| arg.clone())
        })
        .collect();
    let workspace = format!("{}:/workspace", root.path().display());
    #[rustfmt::skip]
    let expected = [
        "run", "--rm", "--name", "vergence-job-1",
        "-v", &workspace,
        "-v", "<input>:/tmp/vergence/input:ro",
        "-v", "<output>:/tmp/vergence/output",
        "-w", "/workspace/services/api",
        "-e", "DEPLOY_TOKEN",
        "-e", "PVN_APPLICATION=shop",
        "-e", "PVN_APPLICATION_ID=app-id-1",
        "-e", "PVN_JOB_ID=job-1",
        "-e", "PVN_RELEASE_CHANNEL=staging",
        "-e", "PVN_RELEASE_CHANNEL_ID=rc-id-1",
        "-e", "PVN_SERVICE=api",
        "-e", "PVN_SERVICE_ID=svc-id-1",
        "-e", "PVN_SERVICE_VERSION=v42",
        "-e", "REGION=eu-west-1",
        "-e", "VERGENCE_APPLICATION=shop",
        "-e", "VERGENCE_APPLICATION_ID=app-id-1",
        "-e", "VERGENCE_INPUT_DIR=/tmp/vergence/input",
        "-e", "VERGENCE_JOB_ID=job-1",
        "-e", "VERGENCE_OUTPUT_DIR=/tmp/vergence/output",
        "-e", "VERGENCE_RELEASE_CHANNEL=staging",
        "-e", "VERGENCE_RELEASE_CHANNEL_ID=rc-id-1",
        "-e", "VERGENCE_SERVICE=api",
        "-e", "VERGENCE_SERVICE_ID=svc-id-1",
        "-e", "VERGENCE_SERVICE_VERSION=v42",
        "--entrypoint", "./fetch.sh",
        IMAGE, "--check",
    ];
    assert_eq!(argv, expected);
    assert!(
        calls[0].iter().all(|arg| !arg.contains(&secret)),
        "a secret value is on docker's command line: {:?}",
        calls[0]
    );
    let docker_env = &stand_in.environments("docker", "run")[0];
    assert!(docker_env.contains(&format!("DEPLOY_TOKEN={secret}")));

    // The mounted directories go with the job.
    let output_mount = calls[0]
        .iter()
        .find(|a| a.ends_with(":/tmp/vergence/output"))
        .unwrap();
    assert!(!Path::new(output_mount.split_once(':').unwrap().0).exists());
}

#[tokio::test]
async fn podman_runs_the_image_when_it_is_the_chosen_engine() {
    let stand_in = StandIn::new(&["docker", "podman"]);
    let root = tempfile::tempdir().unwrap();
    let sink = Arc::new(CollectingSink::default());
    let runner = runner(&stand_in, sink.clone()).with_container_engine(ContainerEngine::Podman);

    let result = run(
        &runner,
        &sink,
        &image_job(root.path(), &["sh", "-c", "echo in podman"]),
    )
    .await;

    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout, "in podman\n");
    assert_eq!(stand_in.calls("podman", "run").len(), 1);
    assert!(stand_in.calls("docker", "run").is_empty());
}

#[tokio::test]
async fn the_commands_exit_code_is_the_jobs_even_when_it_is_dockers_own() {
    let stand_in = StandIn::new(&["docker"]);
    let root = tempfile::tempdir().unwrap();
    let sink = Arc::new(CollectingSink::default());
    let cmd = ["sh", "-c", "echo 'no changes' >&2; exit 125"];

    let result = run(
        &runner(&stand_in, sink.clone()),
        &sink,
        &image_job(root.path(), &cmd),
    )
    .await;

    assert!(result.exited_with(125), "{result:?}");
    assert_eq!(result.stderr_tail, "no changes\n");
}

#[tokio::test]
async fn an_image_docker_cannot_find_is_not_started_with_dockers_reason() {
    let stand_in = StandIn::new(&["docker"]);
    let root = tempfile::tempdir().unwrap();
    let mut job = image_job(root.path(), &["terraform", "plan"]);
    Arc::make_mut(&mut job.spec).image = Some("missing/terraform:1.9".into());
    let sink = Arc::new(CollectingSink::default());

    let result = run(&runner(&stand_in, sink.clone()), &sink, &job).await;

    assert_eq!(result.exit_code, None);
    assert_eq!(
        not_started(&result),
        "docker could not run image missing/terraform:1.9 (exit 125): Unable to find image 'missing/terraform:1.9' locally / docker: Error response from daemon: pull access denied for missing/terraform, repository does not exist or may require 'docker login'"
    );
    assert!(
        result
            .describe()
            .starts_with("not started: docker could not run image"),
        "{}",
        result.describe()
    );
}

#[tokio::test]
async fn without_docker_or_podman_an_image_job_is_not_started_and_says_how_to_fix_it() {
    let empty = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "deploy.sh", "touch ran");
    let sink = Arc::new(CollectingSink::default());
    let runner =
        LocalRunner::inline(sink.clone(), artifacts()).with_engine_search_path(empty.path());

    let result = run(&runner, &sink, &image_job(root.path(), &["./deploy.sh"])).await;

    assert_eq!(
        not_started(&result),
        "the apply program has image registry.example/deploy:1, which runs in a container, but neither docker nor podman is on PATH; install one, or remove image: to run the command directly"
    );
    assert!(!root.path().join("ran").exists(), "image: is never ignored");
}

#[tokio::test]
async fn a_timeout_kills_the_container() {
    let stand_in = StandIn::new(&["docker"]);
    let root = tempfile::tempdir().unwrap();
    let mut job = image_job(root.path(), &["sh", "-c", "echo started; sleep 1000"]);
    Arc::make_mut(&mut job.spec).timeout = SignedDuration::from_secs(1);
    let sink = Arc::new(CollectingSink::default());

    let started = Instant::now();
    let result = run(&runner(&stand_in, sink.clone()), &sink, &job).await;
    let elapsed = started.elapsed();

    assert_eq!(result.outcome, JobOutcome::TimedOut, "{result:?}");
    assert_eq!(result.stdout, "started\n");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(stand_in.kills(), ["TERM vergence-job-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_container_job_kills_the_container_and_reports_why() {
    let stand_in = StandIn::new(&["docker"]);
    let root = tempfile::tempdir().unwrap();
    let job = image_job(root.path(), &["sh", "-c", "touch started; sleep 1000"]);
    let sink = Arc::new(CollectingSink::default());
    let runner =
        LocalRunner::new(sink.clone(), artifacts(), 2).with_engine_search_path(stand_in.path());

    runner.dispatch(&job).await.unwrap();
    crate::common::wait_for_file(&root.path().join("started"), Duration::from_secs(10)).await;
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Running);
    runner.stop(&job, "superseded by v43").await.unwrap();

    let results = sink.wait_for(1, Duration::from_secs(1)).await;
    assert_eq!(
        results[0].1.outcome,
        JobOutcome::Stopped {
            reason: "superseded by v43".into()
        }
    );
    assert_eq!(stand_in.kills(), ["TERM vergence-job-1"]);
    assert_eq!(runner.poll(&job).await.unwrap(), JobProgress::Unknown);
}
