//! Jobs for the ECS runner's tests, on the moto testbed of
//! `vergence_runner_ecs::testing`.

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use std::sync::Arc;
use vergence_model::ports::{JobProgress, Runner};
use vergence_model::{
    InstanceIds, InstanceKey, JobHandle, JobId, JobKind, JobRecord, JobResult, JobSpec, JobState,
    RunnerSpec,
};

use vergence_aws::S3ArtifactStore;
use vergence_aws::testing::{SQS_URL, endpoint, fresh_bucket, sdk_config};
use vergence_runner_ecs::EcsRunner;
pub use vergence_runner_ecs::testing::{EXECUTION_ROLE, Moto, StoppedAs, TASK_ROLE};

/// The moto testbed in us-east-1; `None` (the test skips) without moto.
pub async fn moto() -> Option<Moto> {
    let url = endpoint(SQS_URL)?;
    Some(moto_in(&url, "us-east-1").await)
}

/// The moto testbed at `url` in `region`, with jobs' files in a fresh
/// bucket through the S3 artifact store, as the serverless worker has them.
pub async fn moto_in(url: &str, region: &str) -> Moto {
    let config = sdk_config(url)
        .await
        .into_builder()
        .region(aws_config::Region::new(region.to_owned()))
        .build();
    let (s3, bucket) = fresh_bucket(url).await;
    let artifacts = Arc::new(S3ArtifactStore::new(s3, bucket, "artifacts/"));
    Moto::new(url, config, artifacts).await
}

/// A `kind` job running `cmd` in `image` on the testbed's cluster.
pub trait JobOn {
    fn job(&self, kind: JobKind, image: &str, cmd: &[&str]) -> JobRecord;
}

impl JobOn for Moto {
    fn job(&self, kind: JobKind, image: &str, cmd: &[&str]) -> JobRecord {
        job(RunnerSpec::Ecs(self.runner_spec()), kind, image, cmd)
    }
}

/// A job on `runner`, created now.
pub fn job(runner: RunnerSpec, kind: JobKind, image: &str, cmd: &[&str]) -> JobRecord {
    let key = InstanceKey::parse_storage_id("shop/web/prod").unwrap();
    let now = Timestamp::now();
    JobRecord {
        // A kind and 20 hex digits, like the engine's ids.
        id: JobId(
            format!(
                "{}-{:020x}",
                kind.as_str().to_lowercase(),
                fastrand::u128(..1 << 80)
            )
            .into(),
        ),
        ids: InstanceIds::of(&key),
        instance: key,
        kind,
        version: "v42".parse().unwrap(),
        attempt: 1,
        spec: JobSpec {
            runner,
            image: Some(image.to_owned()),
            cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
            env: BTreeMap::from([("LOG_LEVEL".to_owned(), "debug".to_owned())]),
            secret_env: BTreeMap::new(),
            working_dir: String::new(),
            timeout: SignedDuration::from_mins(10),
            outputs: Vec::new(),
            builtin: None,
        }
        .into(),
        workspace_root: None,
        inputs: Vec::new(),
        created_at: now,
        deadline: now + SignedDuration::from_mins(15),
        state: JobState::Created,
    }
}

/// The job as the store keeps it once dispatched to `handle`.
pub fn dispatched(job: &JobRecord, handle: &JobHandle) -> JobRecord {
    JobRecord {
        state: JobState::Dispatched {
            at: Timestamp::now(),
            handle: Some(handle.clone()),
        },
        ..job.clone()
    }
}

/// Dispatches `job` and returns it as dispatched.
pub async fn dispatch(runner: &EcsRunner, job: &JobRecord) -> (JobRecord, JobHandle) {
    let handle = runner
        .dispatch(job)
        .await
        .expect("dispatch")
        .expect("a task ARN");
    (dispatched(job, &handle), handle)
}

/// Polls until the task stopped (moto moves a task one state per
/// DescribeTasks: RUNNING, DEACTIVATING, STOPPING, DEPROVISIONING, STOPPED).
pub async fn finished(runner: &EcsRunner, job: &JobRecord) -> JobResult {
    for _ in 0..10 {
        match runner.poll(job).await.expect("poll") {
            JobProgress::Finished(result) => return result,
            JobProgress::Running => {}
            JobProgress::Unknown => panic!("ECS does not know the task of {}", job.id),
        }
    }
    panic!("the task of {} did not stop", job.id)
}

/// What vergence-wrapper does at the end of a job: PUT each stream and
/// output to the URL the task's environment names for it.
pub async fn act_as_wrapper(
    env: &BTreeMap<String, String>,
    stdout: &str,
    stderr: &str,
    outputs: &[(&str, &[u8])],
) {
    let http = reqwest::Client::new();
    let put = |url: String, body: Vec<u8>| {
        let request = http.put(url).body(body);
        async move {
            let response = request.send().await.expect("PUT to a presigned URL");
            assert!(response.status().is_success(), "{}", response.status());
        }
    };
    put(env["VERGENCE_STDOUT_URL"].clone(), stdout.into()).await;
    put(env["VERGENCE_STDERR_URL"].clone(), stderr.into()).await;
    if outputs.is_empty() {
        return;
    }
    let urls: HashMap<String, String> =
        serde_json::from_str(&env["VERGENCE_OUTPUT_URLS"]).expect("output URLs");
    for (name, content) in outputs {
        put(urls[*name].clone(), content.to_vec()).await;
    }
}
