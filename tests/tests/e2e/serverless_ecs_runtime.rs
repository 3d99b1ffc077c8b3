//! The first-class ECS runtime in the serverless deployment, against
//! DynamoDB Local and moto (ECS, SQS) with the real clients: the worker
//! registers task definitions and creates and updates the ECS service
//! itself, and the engine's own rules do the rest — a new release rolls
//! out, a task definition changed by hand is drift the engine heals, and a
//! release whose rollout FAILS (injected at the wire: moto does not roll
//! out) is retried, then rolled back to the last good version.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ecs::types::{ContainerDefinition, TaskDefinitionField};
use jiff::Timestamp;
use vergence_aws::testing::unique_name;
use vergence_e2e::{Harness, endpoints};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::ManualClock;
use vergence_model::{EventKind, InstanceRecord, Status};
use vergence_runner_ecs::testing::{Moto, Rollout};

/// One channel whose service runs on the ECS runtime: a task definition
/// templated with the release's image, and the service's settings.
fn write_config(dir: &std::path::Path, moto: &Moto, name: &str) {
    let files = [
        (
            "application.yaml",
            "application:\n  name: shop\n  releaseChannels:\n    - {name: prod, runtimes: [{runtime: fargate}]}\n".to_owned(),
        ),
        (
            "runtime.yaml",
            format!(
                "runtime:\n  name: fargate\n  ecs: {{cluster: {}, pollInterval: 5s, steadyStatePollInterval: 1m}}\n",
                moto.cluster
            ),
        ),
        (
            "web.yaml",
            "service:\n  name: web\n  ecs: {taskDefinition: ecs/task.json, service: ecs/service.json}\n  parameters: [{name: image, dockerImage: {}, required: true}]\n".to_owned(),
        ),
        (
            "ecs/task.json",
            format!(
                r#"{{"family": "{name}", "networkMode": "awsvpc", "requiresCompatibilities": ["FARGATE"], "cpu": "256", "memory": "512",
  "containerDefinitions": [{{"name": "web", "image": "{{{{.Params.image}}}}", "essential": true}}]}}
"#
            ),
        ),
        (
            "ecs/service.json",
            format!(
                r#"{{"serviceName": "{name}", "desiredCount": 2, "launchType": "FARGATE",
  "networkConfiguration": {{"awsvpcConfiguration": {{"subnets": ["{}"], "securityGroups": ["{}"]}}}}}}
"#,
                moto.subnet, moto.security_group
            ),
        ),
    ];
    std::fs::create_dir_all(dir.join("ecs")).unwrap();
    for (file, content) in files {
        std::fs::write(dir.join(file), content).unwrap();
    }
}

struct Bed {
    h: Harness,
    worker: Worker,
    moto: Moto,
    clock: Arc<ManualClock>,
    name: String,
}

async fn bed() -> Option<Bed> {
    let (dynamodb, sqs) = endpoints()?;
    let moto = vergence_e2e::ecs_testbed(&sqs).await;
    let clock = Arc::new(ManualClock::new(Timestamp::now()));
    let h = Harness::start_on_ecs(&dynamodb, &sqs, Some(clock.clone()), moto.ecs.clone()).await;
    let name = unique_name("web");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &moto, &name);
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    moto.injector.rollout(&name, None, Rollout::Completed);
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    Some(Bed {
        h,
        worker,
        moto,
        clock,
        name,
    })
}

impl Bed {
    async fn release(&self, version: &str) {
        let params = BTreeMap::from([(
            "image".to_owned(),
            format!("registry.example.com/web:{version}"),
        )]);
        self.h
            .control()
            .push_release(
                None,
                &"web".parse().unwrap(),
                &version.parse().unwrap(),
                &params,
                "ci",
            )
            .await
            .unwrap();
    }

    async fn instance(&self) -> InstanceRecord {
        self.h.instances().await.remove(0)
    }

    /// One round of the deployment: the worker takes what is queued, or,
    /// with nothing queued, time moves on and the scheduler runs.
    async fn step(&mut self) {
        let event = self.h.receive(Duration::from_secs(1)).await;
        if event.records.is_empty() {
            self.clock.advance(jiff::SignedDuration::from_secs(20));
            self.h.schedule().await;
        } else {
            self.h.deliver(&self.worker, event).await;
        }
    }

    /// Steps until `done` holds for the instance.
    async fn run_until(&mut self, what: &str, done: impl Fn(&InstanceRecord) -> bool) {
        let start = Instant::now();
        loop {
            let record = self.instance().await;
            if done(&record) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{what}: still {} ({})",
                record.state.status,
                record.state.reason
            );
            self.step().await;
        }
    }

    async fn converged_on(&mut self, version: &str) {
        let version = version.to_owned();
        self.run_until(&format!("converged on {version}"), |r| {
            r.state.status == Status::Converged
                && r.state.current_version.as_ref().map(ToString::to_string)
                    == Some(version.clone())
        })
        .await;
    }

    /// The ECS service's task definition and its version tag.
    async fn running(&self) -> (String, Option<String>) {
        let described = self
            .moto
            .plain_ecs
            .describe_services()
            .cluster(&self.moto.cluster)
            .services(&self.name)
            .send()
            .await
            .unwrap();
        let arn = described.services()[0]
            .task_definition()
            .unwrap()
            .to_owned();
        let definition = self
            .moto
            .plain_ecs
            .describe_task_definition()
            .task_definition(&arn)
            .include(TaskDefinitionField::Tags)
            .send()
            .await
            .unwrap();
        let version = definition
            .tags()
            .iter()
            .find(|t| t.key() == Some("vergence:version"))
            .and_then(|t| t.value())
            .map(str::to_owned);
        (arn, version)
    }

    /// The ARN ECS gives the family's next revision.
    async fn next_revision(&self) -> String {
        let (arn, _) = self.running().await;
        let listed = self
            .moto
            .plain_ecs
            .list_task_definitions()
            .family_prefix(&self.name)
            .send()
            .await
            .unwrap();
        let prefix = arn.rsplit_once(':').unwrap().0;
        format!("{prefix}:{}", listed.task_definition_arns().len() + 1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_rolls_out_releases_heals_drift_and_rolls_back_a_failed_rollout() {
    let Some(mut bed) = bed().await else { return };

    // A first release creates the ECS service; a second updates it.
    bed.release("v1").await;
    bed.converged_on("v1").await;
    assert_eq!(bed.running().await.1.as_deref(), Some("v1"));
    bed.release("v2").await;
    bed.converged_on("v2").await;
    let (v2_arn, version) = bed.running().await;
    assert_eq!(version.as_deref(), Some("v2"));
    let events = bed.h.events().await;
    assert!(
        events.iter().any(|e| e.message.contains(
            "the same by hand: aws ecs register-task-definition --cli-input-json file://<ecs/task.json rendered for v2>"
        )),
        "the apply says how to do it by hand"
    );

    // Someone points the service at their own task definition: the
    // steady-state fetch sees drift and the engine applies v2 again.
    let by_hand = bed
        .moto
        .plain_ecs
        .register_task_definition()
        .family(&bed.name)
        .container_definitions(
            ContainerDefinition::builder()
                .name("web")
                .image("registry.example.com/web:hotfix")
                .memory(512)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let by_hand = by_hand
        .task_definition()
        .unwrap()
        .task_definition_arn()
        .unwrap()
        .to_owned();
    bed.moto
        .plain_ecs
        .update_service()
        .cluster(&bed.moto.cluster)
        .service(&bed.name)
        .task_definition(&by_hand)
        .send()
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        let (arn, version) = bed.running().await;
        if arn != by_hand && version.as_deref() == Some("v2") {
            assert_ne!(arn, v2_arn, "v2 is registered again");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "drift was not healed"
        );
        bed.step().await;
    }
    let events = bed.h.events().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::DriftDetected { .. })
                && e.message
                    .contains("not registered by Vergence (desired v2)")),
        "{:#?}",
        events.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    bed.converged_on("v2").await;

    // v3's rollout fails every time: retried, then rolled back to v2.
    let v3_arn = bed.next_revision().await;
    bed.moto
        .injector
        .rollout(&bed.name, Some(&v3_arn), Rollout::Failed);
    bed.release("v3").await;
    bed.run_until("rolled back", |r| r.state.status == Status::RolledBack)
        .await;
    let (arn, version) = bed.running().await;
    assert_eq!(version.as_deref(), Some("v2"), "{arn}");
    let events = bed.h.events().await;
    assert!(
        events
            .iter()
            .any(|e| e.message.contains(&format!("fetch: {} FAILED", bed.name))),
        "{:#?}",
        events.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::RolledBack { .. }))
    );
}

impl Bed {
    /// An ECS service someone else made (brownfield): the config's task
    /// definition running `image`, without Vergence's tags.
    async fn made_by_someone_else(&self, image: &str) {
        let registered = self
            .moto
            .plain_ecs
            .register_task_definition()
            .family(&self.name)
            .network_mode(aws_sdk_ecs::types::NetworkMode::Awsvpc)
            .requires_compatibilities(aws_sdk_ecs::types::Compatibility::Fargate)
            .cpu("256")
            .memory("512")
            .container_definitions(
                ContainerDefinition::builder()
                    .name("web")
                    .image(image)
                    .essential(true)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        self.moto
            .plain_ecs
            .create_service()
            .cluster(&self.moto.cluster)
            .service_name(&self.name)
            .task_definition(
                registered
                    .task_definition()
                    .unwrap()
                    .task_definition_arn()
                    .unwrap(),
            )
            .desired_count(2)
            .send()
            .await
            .unwrap();
    }

    /// Task definitions registered and services created or updated by
    /// the worker.
    fn applies(&self) -> usize {
        ["RegisterTaskDefinition", "CreateService", "UpdateService"]
            .into_iter()
            .map(|op| self.moto.injector.calls(op))
            .sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_service_that_runs_the_release_is_adopted_without_applying() {
    let Some(mut bed) = bed().await else { return };
    bed.made_by_someone_else("registry.example.com/web:v1")
        .await;
    bed.release("v1").await;
    bed.converged_on("v1").await;
    assert_eq!(
        bed.applies(),
        0,
        "nothing is registered, created or updated"
    );
    assert_eq!(
        bed.running().await.1.as_deref(),
        Some("v1"),
        "marked as Vergence's"
    );
    let events = bed.h.events().await;
    let adopted: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Adopted { .. }))
        .collect();
    assert_eq!(adopted.len(), 1, "{events:#?}");
    assert_eq!(adopted[0].kind.name(), "adopted");
    assert!(
        adopted[0]
            .message
            .contains(&format!("adopted {}", bed.name)),
        "{}",
        adopted[0].message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_service_that_differs_is_taken_over_once_approved() {
    let Some(mut bed) = bed().await else { return };
    bed.made_by_someone_else("registry.example.com/web:v0")
        .await;
    bed.release("v1").await;
    bed.run_until("waiting for approval", |r| {
        r.state.status == Status::WaitingApproval
    })
    .await;
    let record = bed.instance().await;
    let expected = format!(
        "waiting for approval to take over the existing ECS service {}: containerDefinitions[web].image: registry.example.com/web:v0 live, registry.example.com/web:v1 wanted",
        bed.name
    );
    assert!(
        record.state.reason.starts_with(&expected),
        "{}",
        record.state.reason
    );
    assert!(record.state.reason.contains("vergence approve"));
    for _ in 0..5 {
        bed.step().await;
    }
    assert_eq!(bed.instance().await.state.status, Status::WaitingApproval);
    assert_eq!(bed.applies(), 0, "nothing is applied before the approval");

    bed.h
        .control()
        .approve(&record.key, None, "alice")
        .await
        .unwrap();
    bed.converged_on("v1").await;
    assert_eq!(bed.moto.injector.calls("UpdateService"), 1, "one apply");
    assert_eq!(bed.moto.injector.calls("CreateService"), 0);
    assert_eq!(bed.running().await.1.as_deref(), Some("v1"));
    let events = bed.h.events().await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Adopted { .. })),
        "taken over, not adopted"
    );
}

/// A service ECS deploys with its own CANARY strategy, through the worker:
/// while ECS shifts and bakes, the instance is VERIFYING with ECS's stage;
/// ECS's success converges it; ECS's own rollback (an alarm) fails the
/// release here, and Vergence's rollback brings the version before back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecs_own_canary_deployment_is_followed_and_its_rollback_fails_the_release() {
    let Some(mut bed) = bed().await else { return };
    bed.release("v1").await;
    bed.converged_on("v1").await;

    let canary = serde_json::json!({
        "strategy": "CANARY",
        "bakeTimeInMinutes": 5,
        "canaryConfiguration": {"canaryPercent": 10.0, "canaryBakeTimeInMinutes": 3},
        "alarms": {"alarmNames": ["web-5xx"], "enable": true, "rollback": true},
    });
    let deployment = |bed: &Bed, body: serde_json::Value| {
        bed.moto
            .injector
            .service_deployment(&bed.name, canary.clone(), body);
    };
    deployment(
        &bed,
        serde_json::json!({"status": "IN_PROGRESS", "lifecycleStage": "BAKE_TIME"}),
    );
    bed.release("v2").await;
    bed.run_until("v2's canary bakes", |r| {
        r.state.status == Status::Verifying
            && r.state
                .reason
                .contains("ECS CANARY deployment of 10% first: BAKE_TIME")
    })
    .await;
    deployment(
        &bed,
        serde_json::json!({"status": "SUCCESSFUL", "lifecycleStage": "CLEAN_UP"}),
    );
    bed.converged_on("v2").await;

    // ECS rolls v3 back on its alarm: each attempt fails, then Vergence
    // rolls back to v2, which ECS deploys as it should.
    deployment(
        &bed,
        serde_json::json!({
            "status": "ROLLBACK_SUCCESSFUL",
            "lifecycleStage": "CLEAN_UP",
            "alarms": {"status": "TRIGGERED", "alarmNames": ["web-5xx"], "triggeredAlarmNames": ["web-5xx"]},
            "rollback": {"reason": "Rolled back because alarm web-5xx went into ALARM"},
        }),
    );
    bed.release("v3").await;
    bed.run_until("v3 failed", |r| r.state.rollback.is_some())
        .await;
    let events = bed.h.events().await;
    assert!(
        events.iter().any(|e| e.message.contains(
            "ECS rolled the CANARY deployment back (ROLLBACK_SUCCESSFUL) (alarms in ALARM: web-5xx)"
        )),
        "{:#?}",
        events.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    deployment(
        &bed,
        serde_json::json!({"status": "SUCCESSFUL", "lifecycleStage": "CLEAN_UP"}),
    );
    bed.run_until("rolled back", |r| r.state.status == Status::RolledBack)
        .await;
    assert_eq!(bed.running().await.1.as_deref(), Some("v2"));
}
