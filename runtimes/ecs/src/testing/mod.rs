//! Test support for the ECS runner and deployments using it: the runner
//! against moto (ECS, EC2, CloudWatch Logs) with the real SDK clients: a
//! cluster and a log group per test, moto's default VPC subnet and security
//! group, and what the platform would do around a task (the awslogs driver
//! writing the stream). The artifact store is the caller's: this crate's
//! test support depends on no adapter (docs/architecture.md), so the tests
//! that combine the runner with the S3 store bring it themselves.
//!
//! moto always reports exit code 0 and never fails a task, so
//! [`Injector`] rewrites ECS responses at the wire for the paths
//! moto cannot reach.

// Test support unwraps: a panic here is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_debug_implementations
)]

mod inject;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::{EcsClients, EcsRunner, EcsSettings};
use aws_config::SdkConfig;
use aws_sdk_ecs::types::Task;
use jiff::Timestamp;
use vergence_model::ports::ArtifactStore;
use vergence_model::{EcsRunnerSpec, JobHandle, JobRecord};
use vergence_testkit::unique_name;

pub use inject::{Injector, Rollout, StoppedAs};

pub const EXECUTION_ROLE: &str = "arn:aws:iam::123456789012:role/vergence-ecs-execution";
pub const TASK_ROLE: &str = "arn:aws:iam::123456789012:role/deployer";

/// One test's corner of moto.
pub struct Moto {
    pub url: String,
    pub config: SdkConfig,
    /// The runner's ECS client, through `injector`.
    pub ecs: aws_sdk_ecs::Client,
    /// A client that sees moto's answers as they are.
    pub plain_ecs: aws_sdk_ecs::Client,
    pub logs: aws_sdk_cloudwatchlogs::Client,
    pub injector: Injector,
    pub artifacts: Arc<dyn ArtifactStore>,
    pub cluster: String,
    pub log_group: String,
    pub subnet: String,
    pub security_group: String,
}

impl Moto {
    /// A fresh cluster and log group name in the moto at `url`, reached
    /// with `config` (whose region is the testbed's); jobs' files go to
    /// `artifacts`.
    pub async fn new(url: &str, config: SdkConfig, artifacts: Arc<dyn ArtifactStore>) -> Self {
        let region = config
            .region()
            .map_or_else(|| "us-east-1".to_owned(), ToString::to_string);
        let injector = Injector::default();
        let ecs = aws_sdk_ecs::Client::from_conf(
            aws_sdk_ecs::config::Builder::from(&config)
                .interceptor(injector.clone())
                .build(),
        );
        let plain_ecs = aws_sdk_ecs::Client::new(&config);
        let logs = aws_sdk_cloudwatchlogs::Client::new(&config);
        let cluster = unique_name("vergence-jobs");
        plain_ecs
            .create_cluster()
            .cluster_name(&cluster)
            .send()
            .await
            .expect("create the test cluster");
        let (subnet, security_group) = default_network(url, &region).await;
        Self {
            url: url.to_owned(),
            config,
            ecs,
            plain_ecs,
            logs,
            injector,
            artifacts,
            cluster,
            log_group: format!("/vergence/{}", unique_name("jobs")),
            subnet,
            security_group,
        }
    }

    pub fn runner(&self) -> EcsRunner {
        self.runner_with(EcsSettings::default())
    }

    pub fn runner_with(&self, settings: EcsSettings) -> EcsRunner {
        EcsRunner::new(
            EcsClients::new(self.ecs.clone(), self.logs.clone()),
            self.artifacts.clone(),
            settings,
        )
    }

    /// The runner settings of a runtime on this cluster.
    pub fn runner_spec(&self) -> EcsRunnerSpec {
        EcsRunnerSpec {
            cluster: self.cluster.clone(),
            region: None,
            subnets: vec![self.subnet.clone()],
            security_groups: vec![self.security_group.clone()],
            assign_public_ip: false,
            task_role_arn: Some(TASK_ROLE.into()),
            execution_role_arn: Some(EXECUTION_ROLE.into()),
            cpu: EcsRunnerSpec::DEFAULT_CPU,
            memory: EcsRunnerSpec::DEFAULT_MEMORY,
            log_group: self.log_group.clone(),
        }
    }

    /// The task as moto describes it (which moves it one state on).
    pub async fn task(&self, arn: &JobHandle) -> Task {
        let described = self
            .plain_ecs
            .describe_tasks()
            .cluster(&self.cluster)
            .tasks(arn.as_str())
            .include(aws_sdk_ecs::types::TaskField::Tags)
            .send()
            .await
            .expect("describe the task");
        described.tasks()[0].clone()
    }

    /// The plain environment RunTask gave the task's `job` container.
    pub async fn task_env(&self, arn: &JobHandle) -> BTreeMap<String, String> {
        let task = self.task(arn).await;
        let overrides = task.overrides().expect("overrides");
        overrides.container_overrides()[0]
            .environment()
            .iter()
            .map(|kv| {
                (
                    kv.name().unwrap().to_owned(),
                    kv.value().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The task ARNs ECS lists for a job.
    pub async fn tasks_of(&self, job: &JobRecord) -> Vec<String> {
        self.plain_ecs
            .list_tasks()
            .cluster(&self.cluster)
            .started_by(job.id.as_str())
            .send()
            .await
            .expect("list tasks")
            .task_arns()
            .to_vec()
    }

    /// Writes the task's output to its stream as the awslogs driver does:
    /// one event per line, in the runner's log group.
    pub async fn write_log_stream(&self, task: &JobHandle, lines: &[String]) {
        let stream = crate::stream_name(task.as_str().rsplit('/').next().unwrap());
        self.logs
            .create_log_stream()
            .log_group_name(&self.log_group)
            .log_stream_name(&stream)
            .send()
            .await
            .expect("create the log stream");
        let now = Timestamp::now().as_millisecond();
        for chunk in lines.chunks(10_000) {
            let events = chunk.iter().map(|line| {
                aws_sdk_cloudwatchlogs::types::InputLogEvent::builder()
                    .timestamp(now)
                    .message(line)
                    .build()
                    .unwrap()
            });
            self.logs
                .put_log_events()
                .log_group_name(&self.log_group)
                .log_stream_name(&stream)
                .set_log_events(Some(events.collect()))
                .send()
                .await
                .expect("put the log events");
        }
    }
}

/// moto's default VPC subnet and "default" security group in `region`,
/// read with two EC2 Query calls (moto does not check the signature, only
/// which service the credential scope names).
async fn default_network(url: &str, region: &str) -> (String, String) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let query = |params: &'static str| {
        let request = http
            .post(format!("{url}/"))
            .header(
                "Authorization",
                format!(
                    "AWS4-HMAC-SHA256 Credential=testing/20260101/{region}/ec2/aws4_request, SignedHeaders=host, Signature=0"
                ),
            )
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(params);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let subnets = query(
        "Action=DescribeSubnets&Version=2016-11-15&Filter.1.Name=default-for-az&Filter.1.Value.1=true",
    )
    .await;
    let groups =
        query("Action=DescribeSecurityGroups&Version=2016-11-15&GroupName.1=default").await;
    (
        first_tag(&subnets, "subnetId").expect("a default subnet"),
        first_tag(&groups, "groupId").expect("the default security group"),
    )
}

fn first_tag(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find('<')? + start;
    Some(xml[start..end].to_owned())
}
