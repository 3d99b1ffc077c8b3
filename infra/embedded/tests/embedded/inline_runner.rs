//! The engine with a runner that runs jobs inline and hands their results
//! back (as the Lambda worker's local runner does), over the real SQLite
//! store: the step that starts a job records its result and decides on it
//! at once, so one step takes a release to CONVERGED and asks for no
//! deadline check of a job that already ended.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::Timestamp;
use vergence_compiler::YamlCompiler;
use vergence_embedded::{LocalQueue, SqliteStore};
use vergence_engine::control::Control;
use vergence_engine::{Engine, RunnerRouter};
use vergence_model::ports::{Clock, JobStore, ManualClock, Runner, Started};
use vergence_model::{
    ConfigBundle, InstanceKey, JobHandle, JobKind, JobOutcome, JobRecord, JobResult, RunnerKind,
    Status,
};

/// Runs every job at once with exit code 0, remembering what it ran.
struct Inline {
    clock: Arc<ManualClock>,
    ran: Mutex<Vec<JobRecord>>,
}

#[async_trait]
impl Runner for Inline {
    async fn dispatch(&self, _: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        panic!("an inline runner's jobs are started, not dispatched")
    }

    async fn start(&self, job: &JobRecord) -> vergence_model::Result<Started> {
        self.ran.lock().unwrap().push(job.clone());
        let mut result = JobResult::without_output(JobOutcome::Exited, self.clock.now());
        result.exit_code = Some(0);
        Ok(Started::Finished(result))
    }
}

const CONFIG: &str = r#"
runtime:
  name: touch
  apply:
    taskConfig: {program: {cmd: [touch, applied]}}
---
application:
  name: shop
  releaseChannels: [{name: staging, runtimes: [{runtime: touch}]}]
---
service:
  name: web
  runtime: touch
"#;

#[tokio::test]
async fn a_job_run_inline_is_decided_on_in_the_step_that_started_it() {
    let clock = Arc::new(ManualClock::new(
        Timestamp::from_second(1_900_000_000).unwrap(),
    ));
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let queue = Arc::new(LocalQueue::new(clock.clone()));
    let runner = Arc::new(Inline {
        clock: clock.clone(),
        ran: Mutex::default(),
    });
    let runners = RunnerRouter::new("test").with(RunnerKind::Local, runner.clone());
    let engine = Engine::new(store.clone(), queue.clone(), runners, clock.clone());
    let control = Control::new(
        store.clone(),
        queue.clone(),
        clock.clone(),
        Arc::new(YamlCompiler),
    );
    let bundle = ConfigBundle::from_files([("c.yaml".to_owned(), CONFIG.to_owned())].into());
    control.apply_config(bundle, "test").await.unwrap();
    while queue.pop_due().is_some() {}
    let key = InstanceKey::parse_storage_id("shop/web/staging").unwrap();

    let report = engine.step(&key).await.unwrap();

    assert_eq!(report.status, Some(Status::Converged));
    let ran = runner.ran.lock().unwrap().clone();
    assert_eq!(ran.len(), 1, "applied once");
    assert_eq!(ran[0].kind, JobKind::Apply);
    assert_eq!(report.dispatched, vec![ran[0].id.clone()]);
    let job = store.get_job(&ran[0].id).await.unwrap().unwrap();
    assert_eq!(job.result().and_then(|r| r.exit_code), Some(0));
    assert!(
        queue.is_empty(),
        "nothing left to check: the apply ended in the step"
    );

    // A second delivery of the same message starts nothing.
    let again = engine.step(&key).await.unwrap();
    assert_eq!(again.status, Some(Status::Converged));
    assert!(again.dispatched.is_empty());
    assert_eq!(runner.ran.lock().unwrap().len(), 1);
}
