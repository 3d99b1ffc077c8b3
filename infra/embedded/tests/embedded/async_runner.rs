//! The engine with a runner that starts jobs elsewhere and is asked for
//! their results later (as the ECS and Cloud Run runners are), over the
//! real SQLite store: dispatched once, polled on later steps, stopped when
//! past their deadline or superseded by a newer version.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use vergence_compiler::YamlCompiler;
use vergence_embedded::{LocalQueue, SqliteStore};
use vergence_engine::control::Control;
use vergence_engine::{Engine, RunnerRouter};
use vergence_model::ports::{Clock, InstanceStore, JobProgress, JobStore, ManualClock, Runner};
use vergence_model::{
    ConfigBundle, InstanceKey, JobHandle, JobId, JobKind, JobOutcome, JobRecord, JobResult,
    JobState, RunnerKind, Status,
};

/// A platform stand-in: remembers what was started and stopped, and
/// answers polls with what the test says.
#[derive(Default)]
struct Platform {
    started: Mutex<Vec<JobRecord>>,
    stopped: Mutex<Vec<(JobId, String)>>,
    results: Mutex<BTreeMap<JobId, JobResult>>,
}

#[async_trait]
impl Runner for Platform {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        let mut started = self.started.lock().unwrap();
        started.push(job.clone());
        Ok(Some(JobHandle(format!("task-{}", started.len()))))
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(match self.results.lock().unwrap().get(&job.id) {
            Some(result) => JobProgress::Finished(result.clone()),
            None => JobProgress::Running,
        })
    }

    async fn stop(&self, job: &JobRecord, reason: &str) -> vergence_model::Result<()> {
        self.stopped
            .lock()
            .unwrap()
            .push((job.id.clone(), reason.to_owned()));
        Ok(())
    }
}

const CONFIG: &str = r#"
runtime:
  name: task
  runner: {ecs: {cluster: jobs, subnets: [subnet-1]}}
  apply:
    taskConfig: {program: {image: deploy:1, cmd: [deploy]}}
---
application:
  name: shop
  releaseChannels: [{name: staging, runtimes: [{runtime: task}]}]
---
service:
  name: web
  runtime: task
"#;

struct World {
    clock: Arc<ManualClock>,
    store: Arc<SqliteStore>,
    platform: Arc<Platform>,
    engine: Engine,
    control: Control,
    key: InstanceKey,
}

impl World {
    async fn new() -> Self {
        let clock = Arc::new(ManualClock::new(
            Timestamp::from_second(1_900_000_000).unwrap(),
        ));
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let queue = Arc::new(LocalQueue::new(clock.clone()));
        let platform = Arc::new(Platform::default());
        let runners = RunnerRouter::new("test").with(RunnerKind::Ecs, platform.clone());
        let engine = Engine::new(store.clone(), queue.clone(), runners, clock.clone());
        let control = Control::new(store.clone(), queue, clock.clone(), Arc::new(YamlCompiler));
        let bundle = ConfigBundle::from_files([("c.yaml".to_owned(), CONFIG.to_owned())].into());
        control.apply_config(bundle, "test").await.unwrap();
        Self {
            clock,
            store,
            platform,
            engine,
            control,
            key: InstanceKey::parse_storage_id("shop/web/staging").unwrap(),
        }
    }

    async fn step(&self) -> Status {
        self.engine.step(&self.key).await.unwrap().status.unwrap()
    }

    fn started(&self) -> Vec<JobRecord> {
        self.platform.started.lock().unwrap().clone()
    }

    fn finish(&self, id: &JobId, exit_code: i32) {
        let mut result = JobResult::without_output(JobOutcome::Exited, self.clock.now());
        result.exit_code = Some(exit_code);
        self.platform
            .results
            .lock()
            .unwrap()
            .insert(id.clone(), result);
    }

    async fn job(&self, id: &JobId) -> JobRecord {
        self.store.get_job(id).await.unwrap().unwrap()
    }
}

#[tokio::test]
async fn an_asynchronous_job_is_dispatched_once_and_its_result_polled_on_a_later_step() {
    let w = World::new().await;
    assert_eq!(w.step().await, Status::Applying);
    let started = w.started();
    assert_eq!(started.len(), 1);
    let id = started[0].id.clone();
    assert_eq!(
        w.job(&id).await.state,
        JobState::Dispatched {
            at: w.clock.now(),
            handle: Some(JobHandle("task-1".into()))
        },
        "the platform's handle is recorded with the job"
    );
    let record = w.store.get_instance(&w.key).await.unwrap().unwrap();
    assert_eq!(
        record.next_check_at,
        Some(w.clock.now() + SignedDuration::from_secs(60)),
        "asked again within a minute even if no event comes"
    );
    w.clock.advance(SignedDuration::from_secs(60));
    assert_eq!(w.step().await, Status::Applying, "still running");
    assert_eq!(w.started().len(), 1, "a later step starts nothing again");
    w.finish(&id, 0);
    w.clock.advance(SignedDuration::from_secs(60));
    assert_eq!(w.step().await, Status::Converged);
    assert!(w.job(&id).await.result().unwrap().exited_with(0));
}

#[tokio::test]
async fn a_job_running_past_its_deadline_is_stopped_and_recorded_as_timed_out() {
    let w = World::new().await;
    w.step().await;
    let job = w.started()[0].clone();
    w.clock.set(job.deadline);
    w.step().await;
    let stopped = w.platform.stopped.lock().unwrap().clone();
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].0, job.id);
    assert_eq!(
        w.job(&job.id).await.result().unwrap().outcome,
        JobOutcome::TimedOut
    );
    let record = w.store.get_instance(&w.key).await.unwrap().unwrap();
    let last = &record.state.last_jobs[0];
    assert_eq!(
        last.outcome,
        JobOutcome::TimedOut,
        "counted as a failed attempt"
    );
    assert_eq!(record.state.target.unwrap().apply_failures, 1);
}

#[tokio::test]
async fn a_superseded_job_is_stopped_and_the_new_version_dispatched_in_the_same_step() {
    let w = World::new().await;
    w.step().await;
    let old = w.started()[0].clone();
    w.control
        .push_release(
            None,
            &"web".parse().unwrap(),
            &"v2".parse().unwrap(),
            &BTreeMap::new(),
            "ci",
        )
        .await
        .unwrap();
    let report = w.engine.step(&w.key).await.unwrap();
    let stopped = w.platform.stopped.lock().unwrap().clone();
    assert_eq!(
        stopped,
        vec![(old.id.clone(), "v2 superseded it".to_owned())]
    );
    assert!(matches!(
        w.job(&old.id).await.result().unwrap().outcome,
        JobOutcome::Stopped { .. }
    ));
    let started = w.started();
    assert_eq!(started.len(), 2, "{report:?}");
    assert_eq!(started[1].version, "v2");
    assert_eq!(started[1].kind, JobKind::Apply);
    let kinds: Vec<&str> = report.events.iter().map(|e| e.kind.name()).collect();
    assert!(kinds.contains(&"jobStopRequested"), "{kinds:?}");
    // The old job's late result is not taken for anything.
    w.finish(&old.id, 0);
    assert!(matches!(
        w.job(&old.id).await.result().unwrap().outcome,
        JobOutcome::Stopped { .. }
    ));
}
