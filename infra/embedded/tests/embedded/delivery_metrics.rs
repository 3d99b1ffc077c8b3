//! Delivery metrics from events the engine really records: releases
//! pushed through the control operations, applies dispatched to a
//! platform stand-in and finished when the test says, on a manual clock,
//! over the real SQLite store. Every number is checked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use vergence_compiler::YamlCompiler;
use vergence_embedded::{LocalQueue, SqliteStore};
use vergence_engine::control::Control;
use vergence_engine::metrics::{DeliveryMetrics, LeadTime, Lookback, TimeToRestore};
use vergence_engine::{Engine, RunnerRouter, StepReport};
use vergence_model::ports::{Clock, JobProgress, ManualClock, Runner};
use vergence_model::{
    ConfigBundle, InstanceKey, JobHandle, JobId, JobOutcome, JobRecord, JobResult, RunnerKind,
    Status,
};

const T0: i64 = 1_900_000_000;
const MIN: i64 = 60;
const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

/// Applies are started elsewhere and end when the test finishes them.
#[derive(Default)]
struct Platform {
    results: Mutex<BTreeMap<JobId, JobResult>>,
}

#[async_trait]
impl Runner for Platform {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        Ok(Some(JobHandle(format!("task-{}", job.id))))
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(match self.results.lock().unwrap().get(&job.id) {
            Some(result) => JobProgress::Finished(result.clone()),
            None => JobProgress::Running,
        })
    }
}

/// staging → prod (once staging is converged on the version); one attempt
/// per apply, so a failed apply fails its version and rolls back.
const CONFIG: &str = r#"
runtime:
  name: task
  runner: {ecs: {cluster: jobs, subnets: [subnet-1]}}
  apply:
    taskConfig: {program: {image: deploy:1, cmd: [deploy]}}
    retryPolicy: {maxAttempts: 1}
---
application:
  name: shop
  releaseChannels:
    - {name: staging, runtimes: [{runtime: task}]}
    - name: prod
      runtimes: [{runtime: task}]
      preconditions: [{releaseChannelStable: {releaseChannel: staging}}]
---
service:
  name: web
  runtime: task
"#;

struct World {
    clock: Arc<ManualClock>,
    platform: Arc<Platform>,
    engine: Engine,
    control: Control,
}

impl World {
    async fn new() -> Self {
        let clock = Arc::new(ManualClock::new(Timestamp::from_second(T0).unwrap()));
        let store = Arc::new(SqliteStore::in_memory().unwrap());
        let queue = Arc::new(LocalQueue::new(clock.clone()));
        let platform = Arc::new(Platform::default());
        let runners = RunnerRouter::new("test").with(RunnerKind::Ecs, platform.clone());
        let engine = Engine::new(store.clone(), queue.clone(), runners, clock.clone());
        let control = Control::new(store, queue, clock.clone(), Arc::new(YamlCompiler));
        let bundle = ConfigBundle::from_files([("c.yaml".to_owned(), CONFIG.to_owned())].into());
        control.apply_config(bundle, "test").await.unwrap();
        Self {
            clock,
            platform,
            engine,
            control,
        }
    }

    /// The clock at `offset` seconds after T0.
    fn at(&self, offset: i64) {
        self.clock.set(Timestamp::from_second(T0 + offset).unwrap());
    }

    async fn release(&self, version: &str) {
        let web = "web".parse().unwrap();
        let version = version.parse().unwrap();
        let params = BTreeMap::new();
        self.control
            .push_release(None, &web, &version, &params, "ci")
            .await
            .unwrap();
    }

    async fn step(&self, channel: &str) -> StepReport {
        let key = InstanceKey::parse_storage_id(&format!("shop/web/{channel}")).unwrap();
        self.engine.step(&key).await.unwrap()
    }

    /// Steps the instance in `channel`, which dispatches an apply.
    async fn apply(&self, channel: &str) -> JobId {
        let report = self.step(channel).await;
        assert_eq!(report.dispatched.len(), 1, "{channel}: {report:?}");
        report.dispatched[0].clone()
    }

    /// Finishes `job` now with `exit_code` and steps its instance.
    async fn finish(&self, channel: &str, job: &JobId, exit_code: i32) -> StepReport {
        let mut result = JobResult::without_output(JobOutcome::Exited, self.clock.now());
        result.exit_code = Some(exit_code);
        self.platform
            .results
            .lock()
            .unwrap()
            .insert(job.clone(), result);
        self.step(channel).await
    }

    /// `version` applied in `channel` from `start` for `took` seconds, and
    /// converged.
    async fn deploy(&self, channel: &str, start: i64, took: i64) {
        self.at(start);
        let job = self.apply(channel).await;
        self.at(start + took);
        let report = self.finish(channel, &job, 0).await;
        assert_eq!(report.status, Some(Status::Converged), "{report:?}");
    }

    /// The apply in `channel` from `start` fails after `took` seconds; the
    /// rollback that starts then converges `restore` seconds later.
    async fn fail_and_roll_back(&self, channel: &str, start: i64, took: i64, restore: i64) {
        self.at(start);
        let job = self.apply(channel).await;
        self.at(start + took);
        let failed = self.finish(channel, &job, 1).await;
        assert_eq!(failed.status, Some(Status::RollingBack), "{failed:?}");
        assert_eq!(
            failed.dispatched.len(),
            1,
            "the rollback's apply: {failed:?}"
        );
        self.at(start + took + restore);
        let back = self.finish(channel, &failed.dispatched[0], 0).await;
        assert_eq!(back.status, Some(Status::RolledBack), "{back:?}");
    }
}

#[tokio::test]
async fn four_days_of_releases_measure_as_their_events_say() {
    let w = World::new().await;
    // v1: pushed at T0, in prod 30 minutes later.
    w.release("v1").await;
    w.deploy("staging", 0, 10 * MIN).await;
    w.deploy("prod", 10 * MIN, 20 * MIN).await;
    // v2: an hour from push to prod.
    w.at(DAY);
    w.release("v2").await;
    w.deploy("staging", DAY, 10 * MIN).await;
    w.deploy("prod", DAY + 10 * MIN, 50 * MIN).await;
    // v3 fails in staging 5 minutes in; back on v2 10 minutes later.
    w.at(2 * DAY);
    w.release("v3").await;
    w.fail_and_roll_back("staging", 2 * DAY, 5 * MIN, 10 * MIN)
        .await;
    // v4, two hours after v3: 30 minutes to prod.
    w.at(2 * DAY + 2 * HOUR);
    w.release("v4").await;
    w.deploy("staging", 2 * DAY + 2 * HOUR, 10 * MIN).await;
    w.deploy("prod", 2 * DAY + 2 * HOUR + 10 * MIN, 20 * MIN)
        .await;
    // v5 fails in prod 10 minutes in; back on v4 30 minutes later.
    w.at(3 * DAY);
    w.release("v5").await;
    w.deploy("staging", 3 * DAY, 10 * MIN).await;
    w.fail_and_roll_back("prod", 3 * DAY + 10 * MIN, 10 * MIN, 30 * MIN)
        .await;

    w.at(4 * DAY);
    let shop = "shop".parse().unwrap();
    let metrics = w
        .control
        .metrics(Some(&shop), Lookback::days(4).unwrap())
        .await
        .unwrap();

    let expected = DeliveryMetrics {
        application: Some(shop),
        since: Timestamp::from_second(T0).unwrap(),
        until: Timestamp::from_second(T0 + 4 * DAY).unwrap(),
        window_days: 4.0,
        last_release_channels: [("shop".parse().unwrap(), "prod".parse().unwrap())].into(),
        // v1, v2 and v4 converged in prod (v4 twice: once deployed).
        deployment_frequency_per_day: 0.75,
        deployments: 3,
        // 1800, 3600, 1800 s: the p90 is the 3rd of 3.
        lead_time_seconds: LeadTime {
            median: Some(1800.0),
            p90: Some(3600.0),
            count: 3,
        },
        // v3 and v5 of five releases.
        change_failure_rate: Some(0.4),
        releases: 5,
        failed_releases: 2,
        // 600 s in staging, 1800 s in prod.
        time_to_restore_seconds: TimeToRestore {
            median: Some(1200.0),
            count: 2,
        },
    };
    assert_eq!(metrics, expected);

    // Every application (shop is the only one) measures the same.
    let all = w
        .control
        .metrics(None, Lookback::days(4).unwrap())
        .await
        .unwrap();
    assert_eq!(all.application, None);
    assert_eq!(
        DeliveryMetrics {
            application: expected.application.clone(),
            ..all
        },
        expected
    );

    // A day's window, from the end of day 3: v5's rollback restored prod
    // within it; nothing reached prod for the first time.
    let day = w
        .control
        .metrics(None, Lookback::of(SignedDuration::from_hours(24)).unwrap())
        .await
        .unwrap();
    assert_eq!(
        (day.deployments, day.deployment_frequency_per_day),
        (0, 0.0)
    );
    assert_eq!(day.lead_time_seconds.median, None);
    assert_eq!((day.releases, day.failed_releases), (1, 1), "v5");
    assert_eq!(day.time_to_restore_seconds.median, Some(1800.0));
}

#[tokio::test]
async fn an_application_not_in_the_config_is_not_found() {
    let w = World::new().await;
    let blog = "blog".parse().unwrap();
    let error = w
        .control
        .metrics(Some(&blog), Lookback::DEFAULT)
        .await
        .unwrap_err();
    assert!(
        matches!(error, vergence_model::Error::NotFound { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("application blog"), "{error}");
}
