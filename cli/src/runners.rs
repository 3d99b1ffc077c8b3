//! The runners `vergence up` and `vergence serve` hand jobs to: local
//! processes (or containers) on this machine, and ECS tasks, Lambda
//! invocations and Cloud Run executions started with the caller's own
//! credentials (the AWS SDK's
//! default chain; Google's application-default credentials); and the
//! first-class ECS runtime's API calls, made from this process with the
//! same AWS credentials; and the metric protections' queries (Prometheus
//! over HTTP, CloudWatch alarms with those credentials).
//!
//! The remote runners are made when a job first needs one, so a config
//! with only local jobs never looks for cloud credentials (which can mean
//! waiting on an instance metadata service that is not there).
//!
//! A container on ECS or Cloud Run cannot reach files on this machine, so
//! plans handed between its jobs need a bucket (`--artifact-bucket`); jobs
//! without files run without one.
//!
//! A build without the `aws` or `cloud-run` feature has no such runner;
//! its jobs wait with a reason saying which build runs them (and
//! `--artifact-bucket` is refused when the arguments are parsed).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::OnceCell;
use vergence_engine::RunnerRouter;
use vergence_model::ports::{
    ArtifactStore, Availability, JobProgress, JobResultSink, Runner, Started,
};
use vergence_model::{BuiltinPlatform, JobHandle, JobRecord, RunnerKind, RunnerSpec};

use crate::args::RunnerArgs;

/// The runners of this machine; `deployment` names the command, for
/// reasons; `local` is the local runner, `artifacts` where container
/// runners keep job files unless a bucket is given, and `sink` where the
/// first-class runtimes report what they did.
pub fn router(
    args: &RunnerArgs,
    deployment: &str,
    local: Arc<dyn Runner>,
    artifacts: Arc<dyn ArtifactStore>,
    sink: Arc<dyn JobResultSink>,
) -> RunnerRouter {
    let router = RunnerRouter::new(deployment)
        .with(RunnerKind::Local, local)
        .with_builtin(
            BuiltinPlatform::Prometheus,
            vergence_metrics::prometheus_runner(reqwest::Client::new(), sink.clone()),
        );
    let router = aws::route(router, args, artifacts.clone(), sink.clone());
    cloud_run::route(router, args, artifacts, sink)
}

/// Why something this build left out cannot be used, and how to get a
/// build that has it.
pub fn left_out(feature: &str, what: &str) -> String {
    format!(
        "this vergence was built without the `{feature}` feature, which {what}; \
         install the full build (the default features: `cargo install --path cli`) to use it"
    )
}

#[cfg(feature = "aws")]
mod aws {
    use super::*;

    /// ECS tasks and Lambda invocations, and the first-class ECS
    /// runtime's API calls.
    pub fn route(
        router: RunnerRouter,
        args: &RunnerArgs,
        artifacts: Arc<dyn ArtifactStore>,
        sink: Arc<dyn JobResultSink>,
    ) -> RunnerRouter {
        let alarm_sink = sink.clone();
        let services = Lazy::new(RunnerKind::Ecs, move || {
            let sink = sink.clone();
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
        let alarms = Lazy::new(RunnerKind::Local, move || {
            let sink = alarm_sink.clone();
            Box::pin(async move {
                let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .load()
                    .await;
                let alarms =
                    vergence_metrics::CloudwatchAlarms::new(aws_sdk_cloudwatch::Client::new(&aws));
                Ok(vergence_metrics::cloudwatch_runner(Arc::new(alarms), sink))
            })
        });
        let bucket = args.artifact_bucket.clone();
        let files = artifacts.clone();
        let invocations = Lazy::new(RunnerKind::Lambda, move || {
            let (bucket, artifacts) = (bucket.clone(), files.clone());
            Box::pin(async move {
                let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .load()
                    .await;
                let artifacts = with_bucket(&aws, bucket, artifacts);
                let runner = vergence_runner_lambda::LambdaRunner::new(
                    aws_sdk_lambda::Client::new(&aws),
                    artifacts,
                    vergence_runner_lambda::LambdaSettings::default(),
                );
                Ok(Arc::new(runner) as Arc<dyn Runner>)
            })
        });
        let bucket = args.artifact_bucket.clone();
        let tasks = Lazy::new(RunnerKind::Ecs, move || {
            let (bucket, artifacts) = (bucket.clone(), artifacts.clone());
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
        router
            .with(RunnerKind::Ecs, Arc::new(tasks))
            .with(RunnerKind::Lambda, Arc::new(invocations))
            .with_builtin(BuiltinPlatform::Ecs, Arc::new(services))
            .with_builtin(BuiltinPlatform::CloudWatch, Arc::new(alarms))
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

    /// Where Cloud Run jobs keep files: the caller's S3 bucket, if given.
    #[cfg(feature = "cloud-run")]
    pub async fn cloud_run_files(
        bucket: Option<String>,
        artifacts: Arc<dyn ArtifactStore>,
    ) -> Arc<dyn ArtifactStore> {
        match bucket {
            Some(_) => {
                let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .load()
                    .await;
                with_bucket(&aws, bucket, artifacts)
            }
            None => artifacts,
        }
    }
}

#[cfg(not(feature = "aws"))]
mod aws {
    use super::*;

    /// No ECS and no Lambda: their jobs, task, invocation or first-class
    /// runtime, wait saying why.
    pub fn route(
        router: RunnerRouter,
        _: &RunnerArgs,
        _: Arc<dyn ArtifactStore>,
        _: Arc<dyn JobResultSink>,
    ) -> RunnerRouter {
        let why = left_out("aws", "runs ECS jobs");
        router
            .without(RunnerKind::Ecs, why.clone())
            .without(
                RunnerKind::Lambda,
                left_out("aws", "runs jobs as Lambda invocations"),
            )
            .with_builtin(
                BuiltinPlatform::Ecs,
                Arc::new(Lazy::never(RunnerKind::Ecs, why)),
            )
            .with_builtin(
                BuiltinPlatform::CloudWatch,
                Arc::new(Lazy::never(
                    RunnerKind::Local,
                    left_out("aws", "reads CloudWatch alarms"),
                )),
            )
    }

    /// There is no bucket: the argument parser refuses one in this build,
    /// which has no S3 to keep files in.
    #[cfg(feature = "cloud-run")]
    pub async fn cloud_run_files(
        _: Option<String>,
        artifacts: Arc<dyn ArtifactStore>,
    ) -> Arc<dyn ArtifactStore> {
        artifacts
    }
}

#[cfg(feature = "cloud-run")]
mod cloud_run {
    use super::*;

    /// Cloud Run jobs, and the first-class Cloud Run runtime's API calls.
    pub fn route(
        router: RunnerRouter,
        args: &RunnerArgs,
        artifacts: Arc<dyn ArtifactStore>,
        sink: Arc<dyn JobResultSink>,
    ) -> RunnerRouter {
        let services = Lazy::new(RunnerKind::CloudRun, move || {
            let sink = sink.clone();
            Box::pin(async move {
                let clients = vergence_runner_cloud_run::CloudRunClients::from_application_default_credentials()
                    .await
                    .map_err(|e| e.to_string())?;
                let services = vergence_runner_cloud_run::CloudRunServices::new(clients, sink);
                Ok(Arc::new(services) as Arc<dyn Runner>)
            })
        });
        let bucket = args.artifact_bucket.clone();
        let jobs = Lazy::new(RunnerKind::CloudRun, move || {
            let (bucket, artifacts) = (bucket.clone(), artifacts.clone());
            Box::pin(async move {
                let clients = vergence_runner_cloud_run::CloudRunClients::from_application_default_credentials()
                    .await
                    .map_err(|e| e.to_string())?;
                // Files go through S3 here too: the bucket is the caller's.
                let artifacts = aws::cloud_run_files(bucket, artifacts).await;
                let runner = vergence_runner_cloud_run::CloudRunRunner::new(
                    clients,
                    artifacts,
                    vergence_runner_cloud_run::CloudRunSettings::default(),
                );
                Ok(Arc::new(runner) as Arc<dyn Runner>)
            })
        });
        router
            .with(RunnerKind::CloudRun, Arc::new(jobs))
            .with_builtin(BuiltinPlatform::CloudRun, Arc::new(services))
    }
}

#[cfg(not(feature = "cloud-run"))]
mod cloud_run {
    use super::*;

    /// No Cloud Run: its jobs, of either kind, wait saying why.
    pub fn route(
        router: RunnerRouter,
        _: &RunnerArgs,
        _: Arc<dyn ArtifactStore>,
        _: Arc<dyn JobResultSink>,
    ) -> RunnerRouter {
        let why = left_out("cloud-run", "runs Cloud Run jobs");
        router
            .without(RunnerKind::CloudRun, why.clone())
            .with_builtin(
                BuiltinPlatform::CloudRun,
                Arc::new(Lazy::never(RunnerKind::CloudRun, why)),
            )
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

    /// A runner this build cannot make, for `why`: for first-class runtimes,
    /// whose jobs go by platform, where `RunnerRouter::without` does not
    /// reach (it would say only "built without them").
    #[cfg(not(all(feature = "aws", feature = "cloud-run")))]
    fn never(kind: RunnerKind, why: String) -> Self {
        Self::new(kind, move || {
            let why = why.clone();
            Box::pin(async move { Err(why) })
        })
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

    async fn start(&self, job: &JobRecord) -> vergence_model::Result<Started> {
        self.runner().await?.start(job).await
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
