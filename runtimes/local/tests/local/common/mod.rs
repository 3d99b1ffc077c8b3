//! Helpers shared by the local runner's tests: job records, scripts on disk,
//! a sink that collects results, and process checks through /proc.

// Each test crate uses only some of these helpers.
#![allow(dead_code)]

pub mod docker;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use vergence_embedded::DirArtifactStore;
use vergence_model::ports::{ArtifactStore, JobResultSink};
use vergence_model::{
    Artifact, InstanceIds, InstanceKey, JobId, JobKind, JobRecord, JobResult, JobSpec, JobState,
    RunnerSpec,
};

/// The artifact store of this test binary: a real directory.
pub fn artifacts() -> Arc<DirArtifactStore> {
    static STORE: OnceLock<(tempfile::TempDir, Arc<DirArtifactStore>)> = OnceLock::new();
    STORE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(DirArtifactStore::new(dir.path().join("artifacts")));
            (dir, store)
        })
        .1
        .clone()
}

/// An artifact whose content is in [`artifacts`].
pub async fn stored(name: &str, content: &[u8]) -> Artifact {
    let key = format!("test/{}/{name}", fastrand_id());
    artifacts().put(&key, content).await.unwrap();
    Artifact::of(name, key, content)
}

/// The content of an artifact in [`artifacts`].
pub async fn content(artifact: &Artifact) -> Vec<u8> {
    artifacts().get(&artifact.key).await.unwrap().unwrap()
}

fn fastrand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// A local job running `cmd` in `root` with a 30 s timeout.
pub fn job(root: &Path, cmd: &[&str]) -> JobRecord {
    let key = InstanceKey::new(
        "shop".parse().unwrap(),
        "api".parse().unwrap(),
        "staging".parse().unwrap(),
    );
    let now = Timestamp::now();
    JobRecord {
        id: JobId("job-1".into()),
        instance: key,
        ids: InstanceIds {
            application_id: "app-id-1".into(),
            release_channel_id: "rc-id-1".into(),
            service_id: "svc-id-1".into(),
        }
        .into(),
        kind: JobKind::Apply,
        version: "v42".parse().unwrap(),
        attempt: 1,
        spec: JobSpec {
            runner: RunnerSpec::Local,
            image: None,
            cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            working_dir: String::new(),
            timeout: SignedDuration::from_secs(30),
            outputs: Vec::new(),
            builtin: None,
        }
        .into(),
        workspace_root: Some(root.to_str().unwrap().to_owned()),
        inputs: Vec::new(),
        created_at: now,
        deadline: now.checked_add(SignedDuration::from_mins(1)).unwrap(),
        state: JobState::Created,
    }
}

/// Writes an executable `sh` script (`set -e` first) at `dir/name`.
pub fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Collects the results a runner reports.
#[derive(Debug, Default)]
pub struct CollectingSink {
    pub results: Mutex<Vec<(JobId, JobResult)>>,
    /// Every call fails, as a store that cannot take the result would.
    pub fail: bool,
    /// The first calls fail with a retryable error (a throttled store).
    pub busy_for: usize,
}

#[async_trait]
impl JobResultSink for CollectingSink {
    async fn job_finished(&self, job: &JobRecord, result: JobResult) -> vergence_model::Result<()> {
        let calls = {
            let mut results = self.results.lock().unwrap();
            results.push((job.id.clone(), result));
            results.len()
        };
        if calls <= self.busy_for {
            return Err(vergence_model::Error::Conflict {
                what: "the job (busy)".into(),
            });
        }
        if self.fail {
            return Err(vergence_model::Error::not_found("the job"));
        }
        Ok(())
    }
}

impl CollectingSink {
    pub fn count(&self) -> usize {
        self.results.lock().unwrap().len()
    }

    /// Waits until `n` results arrived; panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<(JobId, JobResult)> {
        let deadline = tokio::time::Instant::now() + within;
        while self.count() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of {n} results after {within:?}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.results.lock().unwrap().clone()
    }
}

/// The state letter and process group of a process, from /proc; `None` when
/// it does not exist.
fn stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _parent = fields.next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// Whether a process runs. Zombies do not count: they are dead, and this
/// machine's init may never reap them.
pub fn is_running(pid: i32) -> bool {
    stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// The running processes of a process group.
pub fn running_in_group(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            stat(*pid).is_some_and(|(state, group)| group == pgid && !matches!(state, 'Z' | 'X'))
        })
        .collect()
}

/// Waits until `path` exists; panics after `within`.
pub async fn wait_for_file(path: &Path, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while !path.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} did not appear within {within:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
