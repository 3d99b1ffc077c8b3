//! A deployment's clients and adapters, from the function's environment
//! (set by template.yaml).

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use vergence_aws::{DynamoStore, S3ArtifactStore, SqsQueue};
use vergence_compiler::YamlCompiler;
use vergence_engine::control::Control;
use vergence_model::ports::{Clock, StateStore, SystemClock, WorkQueue};

use crate::LambdaError;

/// Where state and work live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploymentConfig {
    /// `VERGENCE_TABLE`: the DynamoDB table.
    pub table: String,
    /// `VERGENCE_QUEUE_URL`: the SQS work queue.
    pub queue_url: String,
    /// `VERGENCE_ARTIFACT_BUCKET`: the S3 bucket where files handed between
    /// jobs (plans) are kept.
    pub artifact_bucket: String,
    /// `VERGENCE_JOB_TIMEOUT_MARGIN_SECONDS`: how long before the function's
    /// own deadline a local job is killed, so its result is still recorded.
    pub job_timeout_margin: Duration,
}

impl DeploymentConfig {
    pub fn from_env() -> Result<Self, LambdaError> {
        let var = |name: &'static str, why: &'static str| {
            std::env::var(name).map_err(|_| LambdaError::MissingEnv { name, why })
        };
        let margin = match std::env::var("VERGENCE_JOB_TIMEOUT_MARGIN_SECONDS") {
            Ok(raw) => raw.parse::<u64>().map_err(|e| LambdaError::InvalidEnv {
                name: "VERGENCE_JOB_TIMEOUT_MARGIN_SECONDS",
                value: raw.clone(),
                message: e.to_string(),
            })?,
            Err(_) => 30,
        };
        Ok(Self {
            table: var(
                "VERGENCE_TABLE",
                "the DynamoDB table holding Vergence's state",
            )?,
            queue_url: var("VERGENCE_QUEUE_URL", "the SQS queue of convergence steps")?,
            artifact_bucket: var(
                "VERGENCE_ARTIFACT_BUCKET",
                "the S3 bucket of files handed between jobs",
            )?,
            job_timeout_margin: Duration::from_secs(margin),
        })
    }
}

/// The AWS clients a deployment is built from, made once per container.
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub s3: aws_sdk_s3::Client,
}

impl AwsClients {
    /// Clients of one SDK config. `path_style` addresses S3 buckets in the
    /// path instead of the host name, as S3-compatible stand-ins need.
    pub fn from_sdk(sdk: &aws_config::SdkConfig, path_style: bool) -> Self {
        let s3 = aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(path_style)
            .build();
        Self {
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
            s3: aws_sdk_s3::Client::from_conf(s3),
        }
    }
}

/// The adapters every function works with.
#[derive(Clone)]
#[allow(missing_debug_implementations)] // holds SDK clients behind trait objects
pub struct Deployment {
    pub store: Arc<DynamoStore>,
    pub queue: Arc<SqsQueue>,
    pub artifacts: Arc<S3ArtifactStore>,
    pub clock: Arc<dyn Clock>,
    pub config: DeploymentConfig,
}

impl Deployment {
    /// Clients from the standard AWS environment (region, credentials, and
    /// `AWS_ENDPOINT_URL` when pointed at stand-ins, with
    /// `VERGENCE_S3_PATH_STYLE=true` for an S3-compatible one).
    pub async fn from_env() -> Result<Self, LambdaError> {
        let config = DeploymentConfig::from_env()?;
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        let path_style = std::env::var("VERGENCE_S3_PATH_STYLE").is_ok_and(|v| v == "true");
        Ok(Self::new(AwsClients::from_sdk(&sdk, path_style), config))
    }

    pub fn new(clients: AwsClients, config: DeploymentConfig) -> Self {
        Self::with_clock(clients, config, Arc::new(SystemClock))
    }

    /// With another clock (tests move time with a manual one).
    pub fn with_clock(
        clients: AwsClients,
        config: DeploymentConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store: Arc::new(DynamoStore::new(clients.dynamodb, config.table.clone())),
            queue: Arc::new(
                SqsQueue::new(clients.sqs, config.queue_url.clone()).with_clock(clock.clone()),
            ),
            artifacts: Arc::new(S3ArtifactStore::new(
                clients.s3,
                config.artifact_bucket.clone(),
                "",
            )),
            clock,
            config,
        }
    }

    pub fn state(&self) -> Arc<dyn StateStore> {
        self.store.clone()
    }

    pub fn work(&self) -> Arc<dyn WorkQueue> {
        self.queue.clone()
    }

    pub fn control(&self) -> Control {
        Control::new(
            self.state(),
            self.work(),
            self.clock.clone(),
            Arc::new(YamlCompiler),
        )
    }
}
