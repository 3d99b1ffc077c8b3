//! A deployment's clients and adapters, from the function's environment
//! (set by template.yaml).

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use vergence_aws::{AwsSecretReader, DynamoStore, S3ArtifactStore, SqsQueue};
use vergence_compiler::YamlCompiler;
use vergence_engine::control::Control;
use vergence_metrics::CloudwatchAlarms;
use vergence_model::notification::SecretReader;
use vergence_model::ports::{Clock, StateStore, SystemClock, WorkQueue};
use vergence_runner_cloud_run::{CloudRunClients, CloudRunRunner, CloudRunSettings};
use vergence_runner_ecs::{EcsClients, EcsRunner, EcsSettings};
use vergence_runner_lambda::{LambdaRunner, LambdaSettings};

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
    /// ECS and CloudWatch Logs, for jobs of `runner: ecs` runtimes.
    pub ecs: aws_sdk_ecs::Client,
    pub logs: aws_sdk_cloudwatchlogs::Client,
    /// Lambda, for jobs of `runner: lambda` runtimes (Invoke).
    pub lambda: aws_sdk_lambda::Client,
    /// CloudWatch, for `cloudwatchAlarm` protections (DescribeAlarms).
    pub cloudwatch: aws_sdk_cloudwatch::Client,
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
            ecs: aws_sdk_ecs::Client::new(sdk),
            logs: aws_sdk_cloudwatchlogs::Client::new(sdk),
            lambda: aws_sdk_lambda::Client::new(sdk),
            cloudwatch: aws_sdk_cloudwatch::Client::new(sdk),
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
    /// The runners that start jobs off the worker, made once per container
    /// (they cache what they registered).
    pub ecs: Arc<EcsRunner>,
    /// The ECS clients, for the first-class ECS runtime's calls.
    pub ecs_clients: EcsClients,
    /// Invocations of the users' functions, for `runner: lambda` jobs.
    pub lambda: Arc<LambdaRunner>,
    /// Reads the alarms of `cloudwatchAlarm` protections (its regional
    /// clients are kept for the container's life).
    pub alarms: Arc<CloudwatchAlarms>,
    /// The HTTP client of `prometheus` protections' queries.
    pub metrics_http: reqwest::Client,
    /// The Cloud Run runner, or why this deployment has none.
    pub cloud_run: Result<Arc<CloudRunRunner>, String>,
    /// Reads the SSM parameters and Secrets Manager secrets notifications
    /// name, when the scheduler sends them.
    pub notification_secrets: Arc<dyn SecretReader>,
}

/// What an access-denied notification secret is told: where the
/// scheduler's rights to read them are granted.
const NOTIFICATION_SECRETS_GRANTED: &str = "the scheduler function may read the parameters under \
     the stack parameter NotificationParameterPath and the secrets NotificationSecretArns lists; \
     see docs/notifications.md";

/// The environment variable holding the Google credential configuration
/// (the stack's `GoogleCredentialConfig` parameter).
const GOOGLE_CREDENTIAL_CONFIG: &str = "VERGENCE_GOOGLE_CREDENTIAL_CONFIG";

impl Deployment {
    /// Clients from the standard AWS environment (region, credentials, and
    /// `AWS_ENDPOINT_URL` when pointed at stand-ins, with
    /// `VERGENCE_S3_PATH_STYLE=true` for an S3-compatible one).
    pub async fn from_env() -> Result<Self, LambdaError> {
        let config = DeploymentConfig::from_env()?;
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        let path_style = std::env::var("VERGENCE_S3_PATH_STYLE").is_ok_and(|v| v == "true");
        let secrets = AwsSecretReader::new(
            aws_sdk_ssm::Client::new(&sdk),
            aws_sdk_secretsmanager::Client::new(&sdk),
        );
        let deployment = Self::new(AwsClients::from_sdk(&sdk, path_style), config)
            .with_notification_secrets(secrets);
        let cloud_run = cloud_run_clients().await;
        Ok(match cloud_run {
            Ok(clients) => deployment.with_cloud_run(clients),
            Err(why) => Self {
                cloud_run: Err(why),
                ..deployment
            },
        })
    }

    /// Jobs of `runner: cloudRun` runtimes go to Cloud Run through
    /// `clients`.
    pub fn with_cloud_run(self, clients: CloudRunClients) -> Self {
        let runner =
            CloudRunRunner::new(clients, self.artifacts.clone(), CloudRunSettings::default());
        Self {
            cloud_run: Ok(Arc::new(runner)),
            ..self
        }
    }

    /// Jobs of `runner: lambda` runtimes are invoked through `client`
    /// (tests point it at a stand-in of the Invoke API).
    pub fn with_lambda(self, client: aws_sdk_lambda::Client) -> Self {
        let runner = LambdaRunner::new(client, self.artifacts.clone(), LambdaSettings::default());
        Self {
            lambda: Arc::new(runner),
            ..self
        }
    }

    /// Notification secrets in AWS are read with `reader` (told where the
    /// scheduler's rights come from, for access-denied failures).
    pub fn with_notification_secrets(self, reader: AwsSecretReader) -> Self {
        Self {
            notification_secrets: Arc::new(
                reader.with_access_denied_hint(NOTIFICATION_SECRETS_GRANTED),
            ),
            ..self
        }
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
        let artifacts = Arc::new(S3ArtifactStore::new(
            clients.s3,
            config.artifact_bucket.clone(),
            "",
        ));
        let ecs_clients = EcsClients::new(clients.ecs, clients.logs);
        let ecs = EcsRunner::new(
            ecs_clients.clone(),
            artifacts.clone(),
            EcsSettings::default(),
        );
        let lambda =
            LambdaRunner::new(clients.lambda, artifacts.clone(), LambdaSettings::default());
        Self {
            store: Arc::new(DynamoStore::new(clients.dynamodb, config.table.clone())),
            queue: Arc::new(
                SqsQueue::new(clients.sqs, config.queue_url.clone()).with_clock(clock.clone()),
            ),
            artifacts,
            clock,
            config,
            ecs: Arc::new(ecs),
            ecs_clients,
            lambda: Arc::new(lambda),
            alarms: Arc::new(CloudwatchAlarms::new(clients.cloudwatch)),
            metrics_http: reqwest::Client::new(),
            cloud_run: Err(no_google_credentials()),
            // Clients of the standard AWS environment, made when a
            // notification first reads a secret from AWS.
            notification_secrets: Arc::new(
                AwsSecretReader::from_environment()
                    .with_access_denied_hint(NOTIFICATION_SECRETS_GRANTED),
            ),
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

/// The Cloud Run clients of the environment: the credential configuration
/// the stack was given, else application-default credentials when
/// `GOOGLE_APPLICATION_CREDENTIALS` names a file; otherwise why there are
/// none. A bad configuration leaves only the Cloud Run runner out: ECS and
/// local jobs go on, and `runner: cloudRun` instances say why they wait.
async fn cloud_run_clients() -> Result<CloudRunClients, String> {
    let config = std::env::var(GOOGLE_CREDENTIAL_CONFIG).unwrap_or_default();
    let built = if !config.trim().is_empty() {
        CloudRunClients::from_credential_config(GOOGLE_CREDENTIAL_CONFIG, &config).await
    } else if std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").is_some() {
        CloudRunClients::from_application_default_credentials().await
    } else {
        return Err(no_google_credentials());
    };
    built.map_err(|e| {
        tracing::error!(error = %e, "the Cloud Run runner is unavailable");
        e.to_string()
    })
}

fn no_google_credentials() -> String {
    format!(
        "no Google credential configuration was given (the stack parameter GoogleCredentialConfig, {GOOGLE_CREDENTIAL_CONFIG}; docs/runners/cloud-run.md)"
    )
}
