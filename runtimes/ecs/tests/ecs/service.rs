//! The first-class ECS runtime against moto's ECS with the real client:
//! apply creates the service, then updates it to a new release's task
//! definition (a retried apply registers nothing new); fetch reports the
//! version tagged on the PRIMARY deployment's task definition and its
//! rollout state (injected at the wire, as moto does not roll out), which
//! the engine's own reading of structured fetches turns into converged,
//! in progress, drift or failure.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_ecs::types::{ContainerDefinition, TaskDefinitionField};
use serde_json::{Value, json};
use vergence_engine::fetch::structured;
use vergence_model::ports::{JobResultSink, Runner};
use vergence_model::{
    BuiltinJob, EcsService, FetchVerdict, JobKind, JobRecord, JobResult, RunnerSpec,
};
use vergence_runner_ecs::testing::{Moto, Rollout};
use vergence_runner_ecs::{EcsClients, EcsServices};

/// Results reported to the engine, in order.
#[derive(Default)]
struct Reported(Mutex<Vec<JobResult>>);

#[async_trait]
impl JobResultSink for Reported {
    async fn job_finished(
        &self,
        _job: &JobRecord,
        result: JobResult,
    ) -> vergence_model::Result<()> {
        self.0.lock().unwrap().push(result);
        Ok(())
    }
}

struct Bed {
    moto: Moto,
    services: EcsServices,
    reported: Arc<Reported>,
    /// The ECS service's (and task definition family's) name.
    name: String,
}

async fn bed() -> Option<Bed> {
    let moto = crate::common::moto().await?;
    let reported = Arc::new(Reported::default());
    let services = EcsServices::new(
        EcsClients::new(moto.ecs.clone(), moto.logs.clone()),
        reported.clone(),
    );
    let name = vergence_aws::testing::unique_name("web");
    Some(Bed {
        moto,
        services,
        reported,
        name,
    })
}

impl Bed {
    /// The instance's ECS service at `version`, running `image`.
    fn service(&self, version: &str, image: &str) -> EcsService {
        let task = json!({
            "family": self.name,
            "networkMode": "awsvpc",
            "requiresCompatibilities": ["FARGATE"],
            "cpu": "256",
            "memory": "512",
            "containerDefinitions": [{"name": "web", "image": image, "essential": true}],
            "tags": [{"key": "team", "value": "shop"}],
        });
        let settings = json!({
            "serviceName": self.name,
            "desiredCount": 2,
            "launchType": "FARGATE",
            "networkConfiguration": {"awsvpcConfiguration": {
                "subnets": [self.moto.subnet],
                "securityGroups": [self.moto.security_group],
            }},
        });
        EcsService {
            cluster: self.moto.cluster.clone(),
            region: None,
            service_name: self.name.clone(),
            task_definition: task.to_string(),
            settings: settings.to_string(),
            service_id: "svc-0123456789".into(),
            version: version.into(),
            task_definition_file: "ecs/task.json".into(),
            service_file: "ecs/service.json".into(),
            adopt: Default::default(),
        }
    }

    fn job(&self, kind: JobKind, service: &EcsService) -> JobRecord {
        let mut job = crate::common::job(
            RunnerSpec::Ecs(self.moto.runner_spec()),
            kind,
            "unused",
            &[],
        );
        Arc::make_mut(&mut job.spec).image = None;
        Arc::make_mut(&mut job.spec).builtin = Some(match kind {
            JobKind::Apply => BuiltinJob::EcsApply(service.clone()),
            _ => BuiltinJob::EcsFetch(service.clone()),
        });
        job
    }

    async fn apply(&self, service: &EcsService) -> String {
        let result = self
            .services
            .carry_out(&self.job(JobKind::Apply, service))
            .await;
        assert!(result.exited_with(0), "{}", result.describe());
        result.stdout
    }

    /// The fetch's output and what the engine makes of it.
    async fn fetch(&self, service: &EcsService) -> (Value, FetchVerdict, String) {
        let result = self
            .services
            .carry_out(&self.job(JobKind::Fetch, service))
            .await;
        assert!(result.exited_with(0), "{}", result.describe());
        let (verdict, summary) = structured(&result.stdout, &service.version);
        (
            serde_json::from_str(&result.stdout).unwrap(),
            verdict,
            summary,
        )
    }

    /// The task definition the ECS service runs, with its tags.
    async fn running(&self) -> (String, Vec<(String, String)>) {
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
        let tags = definition
            .tags()
            .iter()
            .map(|t| (t.key().unwrap().to_owned(), t.value().unwrap().to_owned()))
            .collect();
        (arn, tags)
    }
}

fn tag<'t>(tags: &'t [(String, String)], key: &str) -> Option<&'t str> {
    tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_the_service_then_updates_it_to_a_new_release() {
    let Some(bed) = bed().await else { return };
    bed.moto
        .injector
        .rollout(&bed.name, None, Rollout::Completed);
    let v1 = bed.service("v1", "registry.example.com/web:1");

    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply, "{summary}");
    assert!(
        output["objects"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("there is no ECS service"),
        "{output}"
    );
    // The design's object type, for a missing service as for a running one.
    assert_eq!(output["objects"][0]["objectType"], "ECSService", "{output}");

    let done = bed.apply(&v1).await;
    assert!(
        done.contains(&format!("created service {}", bed.name)),
        "{done}"
    );
    let (first, tags) = bed.running().await;
    assert!(first.ends_with(&format!("{}:1", bed.name)), "{first}");
    assert_eq!(tag(&tags, "vergence:version"), Some("v1"));
    assert_eq!(tag(&tags, "vergence:service-id"), Some("svc-0123456789"));
    assert_eq!(tag(&tags, "team"), Some("shop"), "the file's own tags stay");
    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}: {output}");
    assert_eq!(output["objects"][0]["objectType"], "ECSService", "{output}");
    let version = &output["objects"][0]["versions"][0];
    assert_eq!(
        (
            version["version"].clone(),
            version["replicas"].clone(),
            version["targetReplicas"].clone()
        ),
        (json!("v1"), json!(2), json!(2))
    );

    let v2 = bed.service("v2", "registry.example.com/web:2");
    let (_, verdict, summary) = bed.fetch(&v2).await;
    assert_eq!(
        (verdict, summary.as_str()),
        (
            FetchVerdict::NeedsApply,
            format!("{} runs v1 (desired v2)", bed.name).as_str()
        )
    );
    let done = bed.apply(&v2).await;
    assert!(
        done.contains(&format!("updated service {}", bed.name)),
        "{done}"
    );
    let (second, tags) = bed.running().await;
    assert!(second.ends_with(&format!("{}:2", bed.name)), "{second}");
    assert_eq!(tag(&tags, "vergence:version"), Some("v2"));
    assert_eq!(bed.fetch(&v2).await.1, FetchVerdict::Converged);

    // Until ECS says the rollout completed, the version is in progress.
    bed.moto
        .injector
        .rollout(&bed.name, None, Rollout::InProgress);
    let (_, verdict, summary) = bed.fetch(&v2).await;
    assert_eq!(verdict, FetchVerdict::InProgress, "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_size_written_with_units_is_not_drift_once_applied() {
    let Some(bed) = bed().await else { return };
    bed.moto
        .injector
        .rollout(&bed.name, None, Rollout::Completed);
    // ECS keeps the sizes in units ("256", "512"); moto, once told.
    bed.moto.injector.task_size_in_units();
    let mut v1 = bed.service("v1", "registry.example.com/web:1");
    let mut task: Value = serde_json::from_str(&v1.task_definition).unwrap();
    task["cpu"] = json!("0.25 vCPU");
    task["memory"] = json!("0.5 GB");
    v1.task_definition = task.to_string();

    bed.apply(&v1).await;
    let (output, verdict, summary) = bed.fetch(&v1).await;

    assert_eq!(verdict, FetchVerdict::Converged, "{summary}: {output}");
    assert_eq!(output["objects"][0]["versions"][0]["drifted"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_apply_registers_nothing_new_and_reports_through_the_sink() {
    let Some(bed) = bed().await else { return };
    let v1 = bed.service("v1", "registry.example.com/web:1");
    bed.apply(&v1).await;
    let (first, _) = bed.running().await;
    // The same job dispatched again (a redelivered message): the result
    // goes to the engine's sink, and ECS gets no second revision.
    let job = bed.job(JobKind::Apply, &v1);
    assert_eq!(bed.services.dispatch(&job).await.unwrap(), None);
    let reported = bed.reported.0.lock().unwrap().clone();
    assert_eq!(reported.len(), 1);
    assert!(
        reported[0].stdout.contains(&format!(
            "task definition {first} is already registered for v1"
        )),
        "{}",
        reported[0].stdout
    );
    let (again, _) = bed.running().await;
    assert_eq!(again, first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_definition_changed_out_of_band_is_drift_and_the_next_apply_heals_it() {
    let Some(bed) = bed().await else { return };
    bed.moto
        .injector
        .rollout(&bed.name, None, Rollout::Completed);
    let v1 = bed.service("v1", "registry.example.com/web:1");
    bed.apply(&v1).await;

    // Someone deploys their own revision by hand.
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
        .unwrap();
    bed.moto
        .plain_ecs
        .update_service()
        .cluster(&bed.moto.cluster)
        .service(&bed.name)
        .task_definition(by_hand)
        .send()
        .await
        .unwrap();
    let (_, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply);
    assert_eq!(
        summary,
        format!(
            "{} runs {}:2, not registered by Vergence (desired v1)",
            bed.name, bed.name
        )
    );

    // The apply (drift remediation) puts v1 back.
    bed.apply(&v1).await;
    let (arn, tags) = bed.running().await;
    assert_ne!(arn, by_hand);
    assert_eq!(tag(&tags, "vergence:version"), Some("v1"));
    assert_eq!(bed.fetch(&v1).await.1, FetchVerdict::Converged);

    // A revision with Vergence's tags copied onto other content is drift too.
    let (_, tags) = bed.running().await;
    let forged = bed
        .moto
        .plain_ecs
        .register_task_definition()
        .family(&bed.name)
        .container_definitions(
            ContainerDefinition::builder()
                .name("web")
                .image("registry.example.com/web:other")
                .memory(512)
                .build(),
        )
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| aws_sdk_ecs::types::Tag::builder().key(k).value(v).build())
                .collect(),
        ))
        .send()
        .await
        .unwrap();
    bed.moto
        .plain_ecs
        .update_service()
        .cluster(&bed.moto.cluster)
        .service(&bed.name)
        .task_definition(
            forged
                .task_definition()
                .unwrap()
                .task_definition_arn()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let (_, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply);
    assert!(
        summary.starts_with(&format!("{} drifted from v1", bed.name)),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollout_is_failed_and_a_retried_apply_starts_a_new_deployment() {
    let Some(bed) = bed().await else { return };
    bed.moto.injector.rollout(&bed.name, None, Rollout::Failed);
    let v1 = bed.service("v1", "registry.example.com/web:1");
    bed.apply(&v1).await;
    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::Failed, "{summary}");
    assert_eq!(output["objects"][0]["status"], "FAILED");
    let done = bed.apply(&v1).await;
    assert!(
        done.contains("(a new deployment: the last one of it failed)"),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_ecs_refuses_is_a_failed_job_naming_the_call_and_the_service() {
    let Some(bed) = bed().await else { return };
    let mut v1 = bed.service("v1", "registry.example.com/web:1");
    v1.cluster = "no-such-cluster".into();
    let result = bed.services.carry_out(&bed.job(JobKind::Apply, &v1)).await;
    assert!(result.exited_with(1), "{result:?}");
    assert!(
        result.stderr_tail.starts_with(&format!(
            "DescribeServices of service {} in cluster no-such-cluster failed: ClusterNotFoundException",
            bed.name
        )),
        "{}",
        result.stderr_tail
    );
    // A fetch that cannot read ECS is a fetch error, never drift.
    let fetch = bed.services.carry_out(&bed.job(JobKind::Fetch, &v1)).await;
    let (verdict, _) = vergence_engine::fetch::interpret(
        vergence_model::FetchMode::Structured,
        &fetch,
        &"v1".parse().unwrap(),
    );
    assert_eq!(verdict, FetchVerdict::Error);
}

impl Bed {
    /// An ECS service someone else made (brownfield): the file's task
    /// definition running `image`, registered and started without
    /// Vergence, so without its tags.
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
        let arn = registered
            .task_definition()
            .unwrap()
            .task_definition_arn()
            .unwrap();
        self.moto
            .plain_ecs
            .create_service()
            .cluster(&self.moto.cluster)
            .service_name(&self.name)
            .task_definition(arn)
            .desired_count(2)
            .send()
            .await
            .unwrap();
    }

    /// The mutating ECS calls the runtime made so far.
    fn mutations(&self) -> Vec<(&'static str, usize)> {
        [
            "RegisterTaskDefinition",
            "CreateService",
            "UpdateService",
            "TagResource",
        ]
        .into_iter()
        .map(|op| (op, self.moto.injector.calls(op)))
        .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_someone_else_made_that_runs_the_file_is_adopted_without_applying() {
    let Some(bed) = bed().await else { return };
    bed.moto
        .injector
        .rollout(&bed.name, None, Rollout::Completed);
    bed.made_by_someone_else("registry.example.com/web:1").await;
    let v1 = bed.service("v1", "registry.example.com/web:1");

    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}: {output}");
    assert_eq!(output["objects"][0]["adopted"], json!(true), "{output}");
    assert_eq!(
        bed.mutations(),
        [
            ("RegisterTaskDefinition", 0),
            ("CreateService", 0),
            ("UpdateService", 0),
            ("TagResource", 2)
        ],
        "only the marks are written"
    );
    let (arn, tags) = bed.running().await;
    assert!(arn.ends_with(&format!("{}:1", bed.name)), "{arn}");
    assert_eq!(tag(&tags, "vergence:version"), Some("v1"));
    assert_eq!(tag(&tags, "vergence:service-id"), Some("svc-0123456789"));

    // From now on it is Vergence's: nothing more is adopted or written.
    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}");
    assert_eq!(output["objects"][0]["adopted"], json!(false), "{output}");
    assert_eq!(bed.moto.injector.calls("TagResource"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_someone_else_made_that_differs_is_a_takeover_unless_adopt_apply() {
    let Some(bed) = bed().await else { return };
    bed.moto
        .injector
        .rollout(&bed.name, None, Rollout::Completed);
    bed.made_by_someone_else("registry.example.com/web:0").await;
    let mut v1 = bed.service("v1", "registry.example.com/web:1");

    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply, "{summary}");
    assert_eq!(
        output["objects"][0]["takeover"],
        json!({
            "object": format!("ECS service {}", bed.name),
            "differences": ["containerDefinitions[web].image: registry.example.com/web:0 live, registry.example.com/web:1 wanted"],
        }),
        "{output}"
    );
    assert_eq!(output["objects"][0]["adopted"], json!(false));
    assert_eq!(
        bed.moto.injector.calls("TagResource"),
        0,
        "nothing is marked"
    );

    // `adopt: apply`: the same service is drift to apply, no takeover.
    v1.adopt = vergence_model::adoption::Adopt::Apply;
    let (output, verdict, _) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::NeedsApply);
    assert_eq!(output["objects"][0]["takeover"], Value::Null, "{output}");

    // One apply takes it over; it is Vergence's after that, the service
    // tagged as its creates are.
    bed.apply(&v1).await;
    let described = bed
        .moto
        .plain_ecs
        .describe_services()
        .cluster(&bed.moto.cluster)
        .services(&bed.name)
        .include(aws_sdk_ecs::types::ServiceField::Tags)
        .send()
        .await
        .unwrap();
    assert!(
        described.services()[0]
            .tags()
            .iter()
            .any(|t| t.key() == Some("vergence:service-id") && t.value() == Some("svc-0123456789")),
        "{described:?}"
    );
    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::Converged, "{summary}");
    assert_eq!(output["objects"][0]["takeover"], Value::Null);
    assert_eq!(bed.moto.injector.calls("UpdateService"), 1);
}

/// A service deployed with ECS's own CANARY strategy: the fetch reads the
/// current service deployment (its lifecycle stage while it shifts
/// traffic and bakes) and reports ECS's own rollback, on an alarm, as the
/// rollout failing, with ECS's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecs_own_canary_deployment_is_read_back_stage_by_stage_and_its_rollback_fails_the_rollout()
{
    let Some(bed) = bed().await else { return };
    bed.moto
        .injector
        .rollout(&bed.name, None, Rollout::InProgress);
    let v1 = bed.service("v1", "registry.example.com/web:1");
    bed.apply(&v1).await;
    let canary = json!({
        "strategy": "CANARY",
        "bakeTimeInMinutes": 5,
        "canaryConfiguration": {"canaryPercent": 10.0, "canaryBakeTimeInMinutes": 3},
        "alarms": {"alarmNames": ["web-5xx"], "enable": true, "rollback": true},
    });
    bed.moto.injector.service_deployment(
        &bed.name,
        canary.clone(),
        json!({"status": "IN_PROGRESS", "lifecycleStage": "BAKE_TIME"}),
    );
    let (output, verdict, _) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::InProgress);
    assert_eq!(output["objects"][0]["status"], "PENDING");
    let message = output["objects"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("ECS CANARY deployment of 10% first: BAKE_TIME"),
        "{message}"
    );

    bed.moto.injector.service_deployment(
        &bed.name,
        canary,
        json!({
            "status": "ROLLBACK_SUCCESSFUL",
            "lifecycleStage": "CLEAN_UP",
            "alarms": {"status": "TRIGGERED", "alarmNames": ["web-5xx"], "triggeredAlarmNames": ["web-5xx"]},
            "rollback": {"reason": "Rolled back because alarm web-5xx went into ALARM"},
        }),
    );
    let (output, verdict, summary) = bed.fetch(&v1).await;
    assert_eq!(verdict, FetchVerdict::Failed, "{summary}");
    let message = output["objects"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "ECS rolled the CANARY deployment back (ROLLBACK_SUCCESSFUL) (alarms in ALARM: web-5xx): Rolled back because alarm web-5xx went into ALARM"
        ),
        "{message}"
    );
}
