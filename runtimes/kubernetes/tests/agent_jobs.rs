//! The Vergence side of the agent protocol over a real SQLite store: what
//! dispatch queues, what a poll hands out, how reports become results, and
//! what an instance is told while its agent is silent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::SignedDuration;
use vergence_embedded::{DirArtifactStore, SqliteStore};
use vergence_model::agent::protocol::{AgentReport, JobEnd, JobFinished, PollRequest, TaskDetails};
use vergence_model::conformance::{job, record, t};
use vergence_model::ports::{
    AgentDesk, Availability, InstanceChange, InstanceCommit, JobProgress, JobResultSink,
    ManualClock, Runner, StateStore, WorkItem, WorkQueue,
};
use vergence_model::{
    AgentWork, InstanceKey, JobOutcome, JobRecord, JobResult, KubernetesRunnerSpec, RunnerSpec,
    SecretRef,
};
use vergence_runner_kubernetes::{AgentJobs, AgentRunner};

/// Results as `JobCompletion` records them: once, in the job record.
struct Recorded {
    store: Arc<dyn StateStore>,
    results: Mutex<Vec<JobResult>>,
}

#[async_trait]
impl JobResultSink for Recorded {
    async fn job_finished(&self, job: &JobRecord, result: JobResult) -> vergence_model::Result<()> {
        if self.store.finish_job(&job.id, &result).await? {
            self.results.lock().unwrap().push(result);
        }
        Ok(())
    }
}

/// What was asked to be stepped.
#[derive(Default)]
struct Woken(Mutex<Vec<WorkItem>>);

#[async_trait]
impl WorkQueue for Woken {
    async fn enqueue(&self, items: &[WorkItem]) -> vergence_model::Result<()> {
        self.0.lock().unwrap().extend_from_slice(items);
        Ok(())
    }
}

struct Setup {
    store: Arc<dyn StateStore>,
    clock: Arc<ManualClock>,
    runner: AgentRunner,
    desk: AgentJobs,
    sink: Arc<Recorded>,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory().unwrap());
    let clock = Arc::new(ManualClock::new(t(1000)));
    let sink = Arc::new(Recorded {
        store: store.clone(),
        results: Mutex::default(),
    });
    let artifacts = Arc::new(DirArtifactStore::new(dir.path().join("artifacts")));
    Setup {
        runner: AgentRunner::new(store.clone(), clock.clone()),
        desk: AgentJobs::new(
            store.clone(),
            artifacts,
            sink.clone(),
            Arc::new(Woken::default()),
            clock.clone(),
        ),
        store,
        clock,
        sink,
        _dir: dir,
    }
}

fn spec(agent: &str) -> RunnerSpec {
    RunnerSpec::Kubernetes(KubernetesRunnerSpec {
        agent: agent.into(),
        namespace: Some("jobs".into()),
        service_account: Some("deployer".into()),
    })
}

/// A dispatched job of the prod-eu agent, stored as the engine stores it
/// (the first of its service's prod instance).
async fn stored_job(store: &dyn StateStore, service: &str, id: &str) -> JobRecord {
    let key = InstanceKey::new(
        "shop".parse().unwrap(),
        service.parse().unwrap(),
        "prod".parse().unwrap(),
    );
    let mut job = job(id, &key);
    Arc::make_mut(&mut job.spec).runner = spec("prod-eu");
    Arc::make_mut(&mut job.spec).image = Some("registry.example/deployer:1".into());
    Arc::make_mut(&mut job.spec).secret_env = BTreeMap::from([(
        "TOKEN".to_owned(),
        SecretRef::KubernetesSecret {
            name: "deploy".into(),
            key: "token".into(),
        },
    )]);
    store
        .commit(InstanceCommit {
            change: InstanceChange::Put(Box::new(record(&key, None))),
            expected_revision: None,
            new_jobs: vec![job.clone()],
            finished_jobs: Vec::new(),
            events: Vec::new(),
        })
        .await
        .unwrap();
    store.claim_job(&job.id, t(1000)).await.unwrap();
    job
}

fn poll() -> PollRequest {
    PollRequest {
        version: "0.1.0".into(),
        namespace: Some("vergence".into()),
        ..PollRequest::default()
    }
}

#[tokio::test]
async fn an_agent_that_never_called_or_went_silent_makes_its_jobs_wait_with_a_reason() {
    let s = setup();
    let Availability::Unavailable(reason) = s.runner.availability(&spec("prod-eu")).await else {
        panic!("no agent yet");
    };
    assert!(
        reason.contains("agent prod-eu has never connected"),
        "{reason}"
    );
    assert!(
        reason.contains("vergence token create --agent prod-eu"),
        "{reason}"
    );

    s.desk
        .check_in(&"prod-eu".parse().unwrap(), &poll())
        .await
        .unwrap();
    assert_eq!(
        s.runner.availability(&spec("prod-eu")).await,
        Availability::Ready
    );

    s.clock.advance(SignedDuration::from_mins(6));
    let Availability::Unavailable(reason) = s.runner.availability(&spec("prod-eu")).await else {
        panic!("silent for 6 minutes");
    };
    assert!(
        reason.starts_with("agent prod-eu last seen 6m ago"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_dispatched_job_is_queued_once_and_handed_out_with_its_whole_launch() {
    let s = setup();
    let job = stored_job(s.store.as_ref(), "web", "apply-0123456789abcdef0123").await;
    s.runner.dispatch(&job).await.unwrap();
    s.runner.dispatch(&job).await.unwrap();
    assert_eq!(s.runner.poll(&job).await.unwrap(), JobProgress::Running);

    let agent = "prod-eu".parse().unwrap();
    let other = s
        .desk
        .hand_out(&"prod-us".parse().unwrap(), 10)
        .await
        .unwrap();
    assert!(other.is_empty(), "another agent's queue is its own");
    let tasks = s.desk.hand_out(&agent, 10).await.unwrap();
    assert_eq!(tasks.len(), 1, "dispatched twice, queued once");
    let TaskDetails::RunJob(run) = &tasks[0].details else {
        panic!("a run task: {:?}", tasks[0]);
    };
    assert_eq!(run.job_name, "vergence-apply-0123456789abcdef0123");
    assert_eq!(run.namespace.as_deref(), Some("jobs"));
    assert_eq!(run.service_account.as_deref(), Some("deployer"));
    assert_eq!(run.image, "registry.example/deployer:1");
    assert_eq!(run.active_deadline_seconds, 60);
    assert_eq!(run.env["VERGENCE_SERVICE"], "web");
    assert_eq!(run.env["PVN_RELEASE_CHANNEL"], "prod");
    assert_eq!(run.secret_env["TOKEN"].name, "deploy");
    assert!(
        s.desk.hand_out(&agent, 10).await.unwrap().is_empty(),
        "leased: not handed out again while the agent has it"
    );

    // The agent died with it: the lease runs out and the task comes back.
    s.clock.advance(SignedDuration::from_secs(61));
    let again = s.desk.hand_out(&agent, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    let item = s
        .store
        .get_agent_work(&agent, &AgentWork::run_id(&job.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item.deliveries, 2);
}

#[tokio::test]
async fn a_report_is_recorded_once_and_only_from_the_jobs_own_agent() {
    let s = setup();
    let job = stored_job(s.store.as_ref(), "web", "apply-0123456789abcdef0123").await;
    s.runner.dispatch(&job).await.unwrap();
    let agent = "prod-eu".parse().unwrap();
    s.desk.hand_out(&agent, 10).await.unwrap();
    let report = || {
        AgentReport::JobFinished(JobFinished {
            job_id: job.id.clone(),
            ended: JobEnd::Exited { exit_code: 3 },
            log: "out\n".into(),
            log_tail: "boom\n".into(),
            started_at: Some(t(1001)),
            finished_at: t(1004),
        })
    };
    let stranger = s
        .desk
        .take_report(&"prod-us".parse().unwrap(), report())
        .await
        .unwrap();
    assert_eq!(stranger, None, "another agent cannot report this job");
    assert!(s.sink.results.lock().unwrap().is_empty());

    let first = s.desk.take_report(&agent, report()).await.unwrap().unwrap();
    assert!(first.recorded);
    let second = s.desk.take_report(&agent, report()).await.unwrap().unwrap();
    assert!(!second.recorded, "a repeated report changes nothing");
    let results = s.sink.results.lock().unwrap().clone();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].outcome, JobOutcome::Exited);
    assert_eq!(results[0].exit_code, Some(3));
    assert_eq!(results[0].stdout, "out\n");
    assert_eq!(results[0].stderr_tail, "boom\n");
    assert_eq!(results[0].duration_ms, 3000);
    assert_eq!(
        s.store
            .get_agent_work(&agent, &AgentWork::run_id(&job.id))
            .await
            .unwrap(),
        None,
        "done: off the queue"
    );
}

#[tokio::test]
async fn stopping_a_job_no_agent_took_yet_takes_it_back_and_a_taken_one_is_stopped_by_the_agent() {
    let s = setup();
    let agent = "prod-eu".parse().unwrap();
    let waiting = stored_job(s.store.as_ref(), "web", "apply-aaaaaaaaaaaaaaaaaaaa").await;
    s.runner.dispatch(&waiting).await.unwrap();
    s.runner.stop(&waiting, "superseded").await.unwrap();
    assert!(s.desk.hand_out(&agent, 10).await.unwrap().is_empty());

    let taken = stored_job(s.store.as_ref(), "api", "apply-bbbbbbbbbbbbbbbbbbbb").await;
    s.runner.dispatch(&taken).await.unwrap();
    s.desk.hand_out(&agent, 10).await.unwrap();
    s.runner.stop(&taken, "past its deadline").await.unwrap();
    let tasks = s.desk.hand_out(&agent, 10).await.unwrap();
    let TaskDetails::StopJob(stop) = &tasks[0].details else {
        panic!("a stop task: {tasks:?}");
    };
    assert_eq!(stop.job_name, "vergence-apply-bbbbbbbbbbbbbbbbbbbb");
    assert_eq!(stop.reason, "past its deadline");
}
