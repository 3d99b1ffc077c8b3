//! The Cloud Run runner against the in-repo fake Cloud Run API, through the
//! real `google-cloud-run-v2` and `google-cloud-logging-v2` clients. Tasks
//! run as local processes (the fake's process executor) unless a test says
//! otherwise; artifacts travel through real URLs of a local HTTP store.
//! The first-class Cloud Run runtime (`services`) against the same fake.
//! One test binary, so the clients are linked once.

// Helpers unwrap like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod artifacts;
mod handoff;
mod jobs;
mod results;
mod runs;
mod services;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_auth::credentials::anonymous;
use jiff::{SignedDuration, Timestamp};
use vergence_fake_cloud_run::{FakeCloudRun, FakeCloudRunBuilder, RecordedRequest};
use vergence_model::ports::{JobProgress, Runner};
use vergence_model::{
    CloudRunRunnerSpec, InstanceIds, InstanceKey, JobHandle, JobId, JobKind, JobRecord, JobResult,
    JobSpec, JobState, RunnerSpec,
};
use vergence_runner_cloud_run::{CloudRunClients, CloudRunRunner, CloudRunSettings};

use crate::artifacts::HttpArtifacts;

pub const PROJECT: &str = "test-project";
pub const REGION: &str = "europe-west1";
pub const IMAGE: &str = "europe-docker.pkg.dev/test-project/tools/deploy:1";

/// A fake Cloud Run, an artifact store with URLs, and a runner on both.
#[derive(Debug)]
pub struct Harness {
    pub fake: FakeCloudRun,
    pub artifacts: Arc<HttpArtifacts>,
    pub runner: CloudRunRunner,
}

impl Harness {
    /// A fake with its defaults (jobs settle on the second look).
    pub async fn start() -> Self {
        Self::with(FakeCloudRun::builder(), settings()).await
    }

    pub async fn with(fake: FakeCloudRunBuilder, settings: CloudRunSettings) -> Self {
        let fake = fake.start().await.unwrap();
        let artifacts = Arc::new(HttpArtifacts::start().await);
        let runner = runner_for(&fake, &artifacts, settings).await;
        Self {
            fake,
            artifacts,
            runner,
        }
    }

    /// Another runner on the same fake and store, as a fresh worker process
    /// would be: it has seen no Cloud Run job yet.
    pub async fn another_runner(&self, settings: CloudRunSettings) -> CloudRunRunner {
        runner_for(&self.fake, &self.artifacts, settings).await
    }

    /// Dispatches `job` and polls it until it has a result.
    pub async fn run(&self, job: &JobRecord) -> JobResult {
        let dispatched = dispatch(&self.runner, job).await;
        finish(&self.runner, &dispatched).await
    }

    /// The requests matching `method` whose path ends with `suffix`.
    pub fn requests_ending(&self, method: &str, suffix: &str) -> Vec<RecordedRequest> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .collect()
    }
}

async fn runner_for(
    fake: &FakeCloudRun,
    artifacts: &Arc<HttpArtifacts>,
    settings: CloudRunSettings,
) -> CloudRunRunner {
    let clients = CloudRunClients::at_endpoint(fake.url(), anonymous::Builder::new().build())
        .await
        .unwrap();
    CloudRunRunner::new(clients, artifacts.clone(), settings)
}

/// Settings for tests: quick looks at settling jobs, no wait for logs
/// (the fake's logs arrive at once unless a test delays them).
pub fn settings() -> CloudRunSettings {
    CloudRunSettings {
        log_grace: Duration::ZERO,
        settle_interval: Duration::from_millis(10),
        ..CloudRunSettings::default()
    }
}

/// The Cloud Run runner settings of every test job.
pub fn cloud_run() -> CloudRunRunnerSpec {
    CloudRunRunnerSpec {
        project: PROJECT.into(),
        region: REGION.into(),
        service_account: Some(format!("vergence-jobs@{PROJECT}.iam.gserviceaccount.com")),
        cpu: Some("1".into()),
        memory: Some("512Mi".into()),
    }
}

/// A job `id` running `cmd` in `image` on Cloud Run, with a 2-minute timeout.
pub fn job(id: &str, image: &str, cmd: &[&str]) -> JobRecord {
    let key: InstanceKey = InstanceKey::parse_storage_id("shop/web/prod").unwrap();
    let now = Timestamp::now();
    JobRecord {
        id: JobId(id.into()),
        ids: InstanceIds::of(&key),
        instance: key,
        kind: JobKind::Apply,
        version: "v7".parse().unwrap(),
        attempt: 1,
        spec: JobSpec {
            runner: RunnerSpec::CloudRun(cloud_run()),
            image: Some(image.into()),
            cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            working_dir: String::new(),
            timeout: SignedDuration::from_mins(2),
            outputs: Vec::new(),
            builtin: None,
        }
        .into(),
        workspace_root: None,
        inputs: Vec::new(),
        created_at: now,
        deadline: now + SignedDuration::from_hours(1),
        state: JobState::Created,
    }
}

/// A job running `script` with `sh -c` in [`IMAGE`].
pub fn shell_job(id: &str, script: &str) -> JobRecord {
    job(id, IMAGE, &["sh", "-c", script])
}

/// The job as the store keeps it once dispatched with `handle`.
pub fn dispatched(job: &JobRecord, handle: Option<JobHandle>) -> JobRecord {
    JobRecord {
        state: JobState::Dispatched {
            at: Timestamp::now(),
            handle,
        },
        ..job.clone()
    }
}

/// Dispatches `job` on `runner`; returns it as recorded afterwards.
pub async fn dispatch(runner: &CloudRunRunner, job: &JobRecord) -> JobRecord {
    let handle = runner.dispatch(job).await.unwrap();
    assert!(handle.is_some(), "a Cloud Run job always has a handle");
    dispatched(job, handle)
}

/// Polls a dispatched job until it has a result (at most 20 s).
pub async fn finish(runner: &CloudRunRunner, job: &JobRecord) -> JobResult {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match runner.poll(job).await.unwrap() {
            JobProgress::Finished(result) => return result,
            JobProgress::Running => {}
            JobProgress::Unknown => panic!("the runner lost job {}", job.id),
        }
        assert!(Instant::now() < deadline, "job {} did not finish", job.id);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The handle of a dispatched job.
pub fn handle_of(job: &JobRecord) -> String {
    match &job.state {
        JobState::Dispatched {
            handle: Some(handle),
            ..
        } => handle.as_str().to_owned(),
        other => panic!("not dispatched with a handle: {other:?}"),
    }
}

/// The Cloud Run job an execution belongs to, by full name.
pub fn cloud_run_job_of(execution: &str) -> String {
    execution
        .split_once("/executions/")
        .map(|(job, _)| job.to_owned())
        .unwrap_or_else(|| panic!("{execution} is not an execution"))
}

/// Waits until the fake says the execution's task is running.
pub async fn until_running(fake: &FakeCloudRun, execution: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.execution(execution).unwrap()["runningCount"] != 1 {
        assert!(Instant::now() < deadline, "{execution} never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
