//! A deployment over a fresh table, queue and bucket of the stand-ins.

use std::collections::BTreeMap;
use std::time::Duration;

use vergence_aws::DynamoStore;
use vergence_aws::testing::{
    DYNAMODB_URL, SQS_URL, dynamodb_client, endpoint, fresh_bucket, sdk_config, unique_name,
};
use vergence_lambda::{AwsClients, Deployment, DeploymentConfig};
use vergence_model::ConfigBundle;

/// DynamoDB Local's and moto's URLs, or `None` (the test skips).
pub fn endpoints() -> Option<(String, String)> {
    Some((endpoint(DYNAMODB_URL)?, endpoint(SQS_URL)?))
}

/// A deployment whose local jobs keep `margin` to record their results.
pub async fn deployment(dynamodb: &str, moto: &str, margin: Duration) -> Deployment {
    let sdk = sdk_config(moto).await;
    let dynamodb = dynamodb_client(dynamodb).await;
    let table = unique_name("vergence-test");
    DynamoStore::create_table(&dynamodb, &table)
        .await
        .expect("create the table");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue_url = sqs
        .create_queue()
        .queue_name(unique_name("vergence-test"))
        .send()
        .await
        .expect("create the queue")
        .queue_url()
        .expect("a queue URL")
        .to_owned();
    let (s3, artifact_bucket) = fresh_bucket(moto).await;
    let clients = AwsClients {
        dynamodb,
        sqs,
        s3,
        ecs: aws_sdk_ecs::Client::new(&sdk),
        logs: aws_sdk_cloudwatchlogs::Client::new(&sdk),
        lambda: aws_sdk_lambda::Client::new(&sdk),
        cloudwatch: aws_sdk_cloudwatch::Client::new(&sdk),
    };
    Deployment::new(
        clients,
        DeploymentConfig {
            table,
            queue_url,
            artifact_bucket,
            job_timeout_margin: margin,
        },
    )
}

/// A config bundle of one file.
pub fn bundle(yaml: &str) -> ConfigBundle {
    ConfigBundle::from_files(BTreeMap::from([(
        "vergence.yaml".to_owned(),
        yaml.to_owned(),
    )]))
}
