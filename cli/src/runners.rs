//! The runners `vergence up` and `vergence serve` hand jobs to: local
//! processes (or containers) on this machine, and ECS tasks and Cloud Run
//! executions started with the caller's own credentials (the AWS SDK's
//! default chain; Google's application-default credentials); and the
//! first-class ECS runtime's API calls, made from this process with the
//! same AWS credentials.
//!
//! The remote runners are made when a job first needs one, so a config
//! with only local jobs never looks for cloud credentials (which can mean
//! waiting on an instance metadata service that is not there).
//!
//! A container on ECS or Cloud Run cannot reach files on this machine, so
//! plans handed between its jobs need a bucket (`--artifact-bucket`); jobs
//! without files run without one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::OnceCell;
use vergence_engine::RunnerRouter;
use vergence_model::ports::{ArtifactStore, Availability, JobProgress, JobResultSink, Runner};
use vergence_model::{BuiltinPlatform, JobHandle, JobRecord, RunnerKind, RunnerSpec};

use crate::args::RunnerArgs;

/// The runners of this machine; `deployment` names the command, for
/// reasons; `local` is the local runner, `artifacts` where container
/// runners keep job files unless a bucket is given, and `sink` where the
/// first-class ECS runtime reports what it did.
pub fn router(
    args: &RunnerArgs,
    deployment: &str,
    local: Arc<dyn Runner>,
    artifacts: Arc<dyn ArtifactStore>,
    sink: Arc<dyn JobResultSink>,
) -> RunnerRouter {
    let ecs_sink = sink.clone();
    let ecs_services = Lazy::new(RunnerKind::Ecs, move || {
        let sink = ecs_sink.clone();
        Box::pin(async move {
            let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
                .load()
                .await;
            let services = vergence_runner_ecs::EcsServices::new(
                vergence_runner_ecs::EcsClients::new(
                    aws_sdk_ecs::Client::new(&aws),
                    aws_sdk_cloudwatchlogs::Client::new(&aws),
                ),
                sink,
            );
            Ok(Arc::new(services) as Arc<dyn Runner>)
        })
    });
    let bucket = args.artifact_bucket.clone();
    let ecs_artifacts = artifacts.clone();
    let ecs = Lazy::new(RunnerKind::Ecs, move || {
        let (bucket, artifacts) = (bucket.clone(), ecs_artifacts.clone());
        Box::pin(async move {
            let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
                .load()
                .await;
            let artifacts = with_bucket(&aws, bucket, artifacts);
            let runner = vergence_runner_ecs::EcsRunner::new(
                vergence_runner_ecs::EcsClients::new(
                    aws_sdk_ecs::Client::new(&aws),
                    aws_sdk_cloudwatchlogs::Client::new(&aws),
                ),
                artifacts,
                vergence_runner_ecs::EcsSettings::default(),
            );
            Ok(Arc::new(runner) as Arc<dyn Runner>)
        })
    });
    let services_sink = sink.clone();
    let cloud_run_services = Lazy::new(RunnerKind::CloudRun, move || {
        let sink = services_sink.clone();
        Box::pin(async move {
            let clients =
                vergence_runner_cloud_run::CloudRunClients::from_application_default_credentials()
                    .await
                    .map_err(|e| e.to_string())?;
            let services = vergence_runner_cloud_run::CloudRunServices::new(clients, sink);
            Ok(Arc::new(services) as Arc<dyn Runner>)
        })
    });
    let bucket = args.artifact_bucket.clone();
    let cloud_run = Lazy::new(RunnerKind::CloudRun, move || {
        let (bucket, artifacts) = (bucket.clone(), artifacts.clone());
        Box::pin(async move {
            let clients =
                vergence_runner_cloud_run::CloudRunClients::from_application_default_credentials()
                    .await
                    .map_err(|e| e.to_string())?;
            // Files go through S3 here too: the bucket is the caller's.
            let artifacts = match bucket {
                Some(_) => {
                    let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
                        .load()
                        .await;
                    with_bucket(&aws, bucket, artifacts)
                }
                None => artifacts,
            };
            let runner = vergence_runner_cloud_run::CloudRunRunner::new(
                clients,
                artifacts,
                vergence_runner_cloud_run::CloudRunSettings::default(),
            );
            Ok(Arc::new(runner) as Arc<dyn Runner>)
        })
    });
    RunnerRouter::new(deployment)
        .with(RunnerKind::Local, local)
        .with(RunnerKind::Ecs, Arc::new(ecs))
        .with(RunnerKind::CloudRun, Arc::new(cloud_run))
        .with_builtin(BuiltinPlatform::Ecs, Arc::new(ecs_services))
        .with_builtin(BuiltinPlatform::CloudRun, Arc::new(cloud_run_services))
}

fn with_bucket(
    aws: &aws_config::SdkConfig,
    bucket: Option<String>,
    artifacts: Arc<dyn ArtifactStore>,
) -> Arc<dyn ArtifactStore> {
    match bucket {
        Some(bucket) => Arc::new(vergence_aws::S3ArtifactStore::new(
            aws_sdk_s3::Client::new(aws),
            bucket,
            "",
        )),
        None => artifacts,
    }
}

type Made = Result<Arc<dyn Runner>, String>;
type Make = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Made> + Send>> + Send + Sync>;

/// A runner made on first use; when it cannot be made, its jobs wait with
/// the reason.
struct Lazy {
    kind: RunnerKind,
    make: Make,
    made: OnceCell<Made>,
}

impl Lazy {
    fn new(
        kind: RunnerKind,
        make: impl Fn() -> Pin<Box<dyn Future<Output = Made> + Send>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            make: Box::new(make),
            made: OnceCell::new(),
        }
    }

    async fn runner(&self) -> vergence_model::Result<&Arc<dyn Runner>> {
        let made = self.made.get_or_init(|| (self.make)()).await;
        made.as_ref().map_err(|why| vergence_model::Error::Runner {
            runner: self.kind.as_str().to_owned(),
            message: why.clone(),
        })
    }
}

#[async_trait]
impl Runner for Lazy {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        self.runner().await?.dispatch(job).await
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        self.runner().await?.poll(job).await
    }

    async fn stop(&self, job: &JobRecord, reason: &str) -> vergence_model::Result<()> {
        self.runner().await?.stop(job, reason).await
    }

    async fn availability(&self, spec: &RunnerSpec) -> Availability {
        match self.runner().await {
            Ok(runner) => runner.availability(spec).await,
            Err(e) => Availability::Unavailable(format!(
                "the {} runner cannot start: {e}",
                self.kind.as_str()
            )),
        }
    }
}
