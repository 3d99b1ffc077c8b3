//! The container protocol against an in-memory artifact store.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use vergence_model::ports::{ArtifactStore, UrlAccess};
use vergence_model::{
    Artifact, InstanceIds, InstanceKey, JobId, JobKind, JobOutcome, JobRecord, JobSpec, JobState,
    RunnerSpec,
};

use super::*;

/// Keeps artifacts in memory; hands out `mem://` URLs when `urls`.
#[derive(Default)]
struct Memory {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    urls: bool,
}

#[async_trait]
impl ArtifactStore for Memory {
    async fn put(&self, key: &str, content: &[u8]) -> vergence_model::Result<()> {
        self.objects
            .lock()
            .unwrap()
            .insert(key.to_owned(), content.to_vec());
        Ok(())
    }

    async fn get(&self, key: &str) -> vergence_model::Result<Option<Vec<u8>>> {
        Ok(self.objects.lock().unwrap().get(key).cloned())
    }

    async fn presign(
        &self,
        key: &str,
        access: UrlAccess,
        _ttl: SignedDuration,
    ) -> vergence_model::Result<Option<String>> {
        Ok(self.urls.then(|| format!("mem://{key}?{access:?}")))
    }
}

fn job(image: Option<&str>) -> JobRecord {
    let key: InstanceKey = InstanceKey::parse_storage_id("shop/web/prod").unwrap();
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    JobRecord {
        id: JobId("apply-1".into()),
        ids: InstanceIds::of(&key),
        instance: key,
        kind: JobKind::Apply,
        version: "v7".parse().unwrap(),
        attempt: 1,
        spec: JobSpec {
            runner: RunnerSpec::Local,
            image: image.map(str::to_owned),
            cmd: vec!["deploy".into(), "--fast".into()],
            env: BTreeMap::from([("LOG".to_owned(), "debug".to_owned())]),
            secret_env: BTreeMap::from([(
                "TOKEN".to_owned(),
                SecretRef::AwsSecretsManager("arn:aws:secretsmanager:x".into()),
            )]),
            working_dir: String::new(),
            timeout: SignedDuration::from_mins(5),
            outputs: vec!["plan".into()],
            builtin: None,
        }
        .into(),
        workspace_root: None,
        inputs: vec![Artifact::of("plan", "jobs/fetch-1/outputs/plan", b"p")],
        created_at: now,
        deadline: now,
        state: JobState::Created,
    }
}

#[tokio::test]
async fn a_launch_carries_the_context_the_files_and_the_secret_sources() {
    let store = Memory {
        urls: true,
        ..Memory::default()
    };
    let launch = Launch::prepare(
        &job(Some("registry/deploy:1")),
        &store,
        SignedDuration::from_hours(1),
    )
    .await
    .unwrap();
    assert_eq!(launch.image, "registry/deploy:1");
    assert_eq!(launch.command, ["deploy", "--fast"]);
    assert_eq!(launch.env["LOG"], "debug");
    assert_eq!(launch.env["VERGENCE_SERVICE_VERSION"], "v7");
    assert_eq!(launch.env["PVN_JOB_ID"], "apply-1");
    assert_eq!(launch.env[env::OUTPUT_DIR], CONTAINER_OUTPUT_DIR);
    let inputs: serde_json::Value = serde_json::from_str(&launch.env[env::INPUT_URLS]).unwrap();
    assert_eq!(inputs["plan"], "mem://jobs/fetch-1/outputs/plan?Read");
    let outputs: serde_json::Value = serde_json::from_str(&launch.env[env::OUTPUT_URLS]).unwrap();
    assert_eq!(outputs["plan"], "mem://jobs/apply-1/outputs/plan?Write");
    assert_eq!(
        launch.env[env::STDOUT_URL],
        "mem://jobs/apply-1/stdout?Write"
    );
    assert!(
        !launch.env.contains_key("TOKEN"),
        "secrets are never plain env"
    );
    assert!(matches!(
        launch.secrets["TOKEN"],
        SecretRef::AwsSecretsManager(_)
    ));
    assert!(
        !format!("{launch:?}").contains("mem://"),
        "URLs are not logged"
    );
}

#[tokio::test]
async fn a_job_without_an_image_or_a_store_without_urls_cannot_launch() {
    let urls = Memory {
        urls: true,
        ..Memory::default()
    };
    let err = Launch::prepare(&job(None), &urls, SignedDuration::from_hours(1))
        .await
        .unwrap_err();
    assert!(err.contains("has no image"), "{err}");
    let no_urls = Memory::default();
    let err = Launch::prepare(&job(Some("i")), &no_urls, SignedDuration::from_hours(1))
        .await
        .unwrap_err();
    assert!(err.contains("cannot hand out URLs"), "{err}");
}

#[tokio::test]
async fn the_result_prefers_what_the_wrapper_captured_and_finds_the_outputs() {
    let store = Memory::default();
    let j = job(Some("i"));
    assert_eq!(captured_streams(&j, &store).await.unwrap(), None);
    store
        .put("jobs/apply-1/stdout", b"{\"objects\":[]}")
        .await
        .unwrap();
    store
        .put("jobs/apply-1/stderr", b"warning\n")
        .await
        .unwrap();
    store
        .put("jobs/apply-1/outputs/plan", b"plan bytes")
        .await
        .unwrap();
    let logs = captured_streams(&j, &store).await.unwrap().unwrap();
    assert_eq!(logs.stdout, "{\"objects\":[]}");
    let found = outputs(&j, &store).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].size, 10);
    let started = Timestamp::from_second(100).unwrap();
    let finished = Timestamp::from_second(103).unwrap();
    let result = result(Ended::Exited(2), logs, found, Some(started), finished);
    assert!(result.exited_with(2));
    assert_eq!(result.duration_ms, 3000);
    assert_eq!(result.stderr_tail, "warning\n");
    let failed = super::result(
        Ended::PlatformFailed("CannotPullContainerError: pull access denied".into()),
        PlatformLogs::default(),
        Vec::new(),
        None,
        finished,
    );
    assert!(matches!(failed.outcome, JobOutcome::PlatformFailed { .. }));
    assert!(failed.describe().contains("CannotPullContainerError"));
}

#[test]
fn streams_are_bounded_at_character_boundaries() {
    assert_eq!(head("héllo", 2), "h");
    assert_eq!(tail("héllo", 4), "llo");
    assert_eq!(head("abc", 10), "abc");
}
